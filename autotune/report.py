"""Summaries and tuning curves of a log: best GFLOP/s (calls/s for an op without a flop count)
against trials and against wall time, one curve per (task, strategy). User ops are rebuilt from
the definitions their records carry, so their flops are counted without the user's code.

Example::

    >>> from autotune.report import curves                              # doctest: +SKIP
    >>> curves(load_records("tune.jsonl"))                              # doctest: +SKIP
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from autotune.errors import AutotuneError
from autotune.records import Record, load_records


def curves(records: Sequence[Record]) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """(task, strategy) -> [(trial, seconds since the first record, best speed so far)], the speed
    in the task's unit (`units`): GFLOP/s from its flop count, else calls/s."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.key, r.strategy or "?")].append(r)
    out: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, rs in groups.items():
        rs.sort(key=lambda r: r.timestamp)
        per = units(rs)[0]
        best = math.inf
        pts = []
        for i, r in enumerate(rs, 1):
            best = min(best, r.seconds)
            pts.append((i, r.timestamp - rs[0].timestamp, per / best if math.isfinite(best) else 0.0))
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
    """One row per (task, strategy): trials, errors, best speed, and the seconds from the task's
    first record to its last; columns as wide as their longest entry."""
    cs = curves(records)
    errs: dict[tuple[str, str], int] = defaultdict(int)
    by_task: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        errs[(r.key, r.strategy or "?")] += r.error is not None
        by_task[r.key].append(r)
    header = ("task", "strategy", "trials", "errors", "best", "unit", "elapsed s")
    body = [(task, strat, str(len(pts)), str(errs[(task, strat)]), f"{pts[-1][2]:.1f}",
             units(by_task[task])[1], f"{pts[-1][1]:.1f}") for (task, strat), pts in sorted(cs.items())]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    left = {0, 1, 5}  # text columns; the numbers align right

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([line(header), *map(line, body),
                      "elapsed s: from the task's first record to its last (tuning wall time, resumes included)"])


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
