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
import warnings
from collections import defaultdict
from typing import Sequence

from autotune.errors import AutotuneError
from autotune.records import Record, RecordError, best_per_task, from_target, kind, load_records
from autotune.target import current_target, same_isa


def curves(records: Sequence[Record]) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """(task, strategy) -> [(trial, seconds since the first record, best speed so far)], the speed
    in the task's unit (`units`): GFLOP/s from its flop count, else calls/s. A record no best may
    come from (`usable`: a config outside its space, an impossible speed) counts as a trial only."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        if not r.retimed:
            groups[(r.key, r.strategy or "?")].append(r)
    good = {id(r) for r in usable(records)}
    out: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, rs in groups.items():
        rs.sort(key=lambda r: r.timestamp)
        per = units(rs)[0]
        t0 = min((r.timestamp for r in rs if r.timestamp > 0), default=0.0)  # a record may have no time stamp (0)
        best = math.inf
        pts = []
        for i, r in enumerate(rs, 1):
            if id(r) in good:
                best = min(best, r.seconds)
            pts.append((i, max(r.timestamp - t0, 0.0), per / best if math.isfinite(best) else 0.0))
        out[key] = pts
    return out


def usable(records: Sequence[Record]) -> list[Record]:
    """The successful records a best may come from, as `autotune replay` and `load_best` judge
    them: a config inside its template's space (checked once per config), a possible speed, and
    measured on this machine's ISA when the task has any such record."""
    configs: dict[tuple[str, str], bool] = {}
    flops: dict[str, float] = {}
    out = []
    for r in records:
        if not r.ok:
            continue
        k = (r.key, r.config_key())
        if k not in configs:
            try:
                r.validated_config()
                configs[k] = True
            except RecordError:
                configs[k] = False
        if not configs[k]:
            continue
        if r.key not in flops:
            flops[r.key] = r.task().flops()
        try:
            r.check_speed(flops[r.key])
        except RecordError:
            continue
        out.append(r)
    here = current_target(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = {r.key for r in from_target(out, here)}
    return [r for r in out if r.key not in local or not r.target or same_isa(dict(r.target), here)]


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
    named = [_named_best(task, rs) for task, rs in sorted(by_task.items()) if any(r.ok for r in rs)]
    return "\n".join([line(header), *map(line, body),
                      "elapsed s: from the task's first record to its last (tuning wall time, resumes included)",
                      *named])


def _named_best(task: str, rs: Sequence[Record]) -> str:
    """The best of a task's records as `autotune replay` picks it: records of this machine's ISA
    first, a config inside its space and a possible speed; else why there is none."""
    here = current_target(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = from_target(rs, here)
    best, elsewhere = best_per_task(local).get(task), False
    if best is None:
        best = best_per_task(rs).get(task)
        elsewhere = best is not None
    if best is None:
        why = ""
        for r in rs:
            if r.ok:
                try:
                    r.validated_config()
                except RecordError as e:
                    why = f": {e}"
                    break
        return f"{task}: no usable record{why}"
    per, unit = units(rs)
    again = sum(r.retimed for r in rs)
    where = (f", measured on another ISA ({best.target.get('isa', '?')}; this machine: {here['isa']}): "
             "`autotune replay --any-target`" if elsewhere else "")
    return (f"{task}: best {per / best.seconds:.1f} {unit}, {kind(best)}{where}"
            + (f" ({again} re-timing{'s' * (again != 1)} of finalists in the log)" if again else ""))


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
