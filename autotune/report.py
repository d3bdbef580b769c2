"""Summaries and tuning curves of a log: best GFLOP/s (calls/s for an op without a flop count)
against trials and against wall time, one curve per (task, strategy), re-timings of finalists left
out (they are no trials); how many timings were noisy; the best each task's records name
(autotune.records.best_per_task: re-timings of finalists first). User ops are rebuilt from the
definitions their records carry, so their flops are counted without the user's code.

Example::

    >>> from autotune.report import curves                              # doctest: +SKIP
    >>> curves(load_records("tune.jsonl"))                              # doctest: +SKIP
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from autotune.errors import AutotuneError
from autotune.records import Record, best_per_task, kind, load_records


def curves(records: Sequence[Record]) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """(task, strategy) -> [(trial, seconds since the first record, best speed so far)], the speed
    in the task's unit (`units`): GFLOP/s from its flop count, else calls/s."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        if not r.retimed:
            groups[(r.key, r.strategy or "?")].append(r)
    out: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, rs in groups.items():
        rs.sort(key=lambda r: r.timestamp)
        per = units(rs)[0]
        t0 = min((r.timestamp for r in rs if r.timestamp > 0), default=0.0)  # a record may have no time stamp (0)
        best = math.inf
        pts = []
        for i, r in enumerate(rs, 1):
            best = min(best, r.seconds)
            pts.append((i, max(r.timestamp - t0, 0.0), per / best if math.isfinite(best) else 0.0))
        out[key] = pts
    return out


def units(records: Sequence[Record]) -> tuple[float, str]:
    """What one call of these records' task counts for, and the unit: GFLOP/s from the flop count
    (a user op's from its recorded definition), calls/s when it has none or cannot be rebuilt."""
    from autotune.task import speed_unit
    for r in records:
        try:
            return r.task().speed_unit()
        except AutotuneError:
            continue
    return speed_unit(0.0)


def summary(records: Sequence[Record]) -> str:
    """One row per (task, strategy): trials, errors, noisy timings, best speed, and the seconds from
    the task's first record to its last; columns as wide as their longest entry; then the best each
    task's records name and what kind of timing it is."""
    cs = curves(records)
    errs: dict[tuple[str, str], int] = defaultdict(int)
    noisy: dict[tuple[str, str], int] = defaultdict(int)
    by_task: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if not r.retimed:
            errs[(r.key, r.strategy or "?")] += r.error is not None
            noisy[(r.key, r.strategy or "?")] += r.noisy
        by_task[r.key].append(r)
    header = ("task", "strategy", "trials", "errors", "noisy", "best", "unit", "elapsed s")
    body = [(task, strat, str(len(pts)), str(errs[(task, strat)]), str(noisy[(task, strat)]), f"{pts[-1][2]:.1f}",
             units(by_task[task])[1], f"{pts[-1][1]:.1f}") for (task, strat), pts in sorted(cs.items())]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    left = {0, 1, 6}  # text columns; the numbers align right

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    named = []
    for task, best in sorted(best_per_task(records, valid=False).items()):
        per, unit = units(by_task[task])
        again = sum(r.retimed for r in by_task[task])
        named.append(f"{task}: best {per / best.seconds:.1f} {unit}, {kind(best)}"
                     + (f" ({again} re-timing{'s' * (again != 1)} of finalists in the log)" if again else ""))
    return "\n".join([line(header), *map(line, body),
                      "elapsed s: from the task's first record to its last (tuning wall time, resumes included)",
                      *named])


def plot(records: Sequence[Record], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = curves(records)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (task, strat), pts in sorted(cs.items()):
        label = f"{task} [{strat}]" if len({t for t, _ in cs}) > 1 else strat
        a.step([p[0] for p in pts], [p[2] for p in pts], where="post", label=label)
        b.step([p[1] for p in pts], [p[2] for p in pts], where="post", label=label)
    a.set_xlabel("trials")
    b.set_xlabel("wall time (s)")
    for ax in (a, b):
        ax.set_ylabel("best so far (GFLOP/s, or calls/s for an op without a flop count)")
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.suptitle("autotune tuning curves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(log: str, plot_path: str | None = None) -> int:
    records = load_records(log)
    if not records:
        raise AutotuneError(f"the log {log} has no records")
    print(summary(records))
    if plot_path:
        plot(records, plot_path)
        print(f"wrote {plot_path}")
    return 0
