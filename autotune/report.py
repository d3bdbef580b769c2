"""Summaries and tuning curves of a log: best GFLOP/s against trials and against wall time,
one curve per (task, strategy).

Example::

    >>> from autotune.report import curves                              # doctest: +SKIP
    >>> curves(load_records("tune.jsonl"))                              # doctest: +SKIP
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from autotune.records import Record, load_records


def curves(records: Sequence[Record]) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """(task, strategy) -> [(trial, seconds since the first record, best GFLOP/s so far)]."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.key, r.strategy or "?")].append(r)
    out: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for key, rs in groups.items():
        rs.sort(key=lambda r: r.timestamp)
        try:
            fl = rs[0].task().flops()
        except Exception:
            fl = 1e9  # unknown operator: plot 1/seconds
        best = math.inf
        pts = []
        for i, r in enumerate(rs, 1):
            best = min(best, r.seconds)
            pts.append((i, r.timestamp - rs[0].timestamp, fl / best / 1e9 if math.isfinite(best) else 0.0))
        out[key] = pts
    return out


def summary(records: Sequence[Record]) -> str:
    cs = curves(records)
    rows = [f"{'task':<40} {'strategy':<13} {'trials':>6} {'errors':>6} {'best GFLOP/s':>12} {'wall s':>8}"]
    errs: dict[tuple[str, str], int] = defaultdict(int)
    for r in records:
        errs[(r.key, r.strategy or "?")] += r.error is not None
    for (task, strat), pts in sorted(cs.items()):
        rows.append(f"{task:<40} {strat:<13} {len(pts):>6} {errs[(task, strat)]:>6} {pts[-1][2]:>12.1f} "
                    f"{pts[-1][1]:>8.1f}")
    return "\n".join(rows)


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
        ax.set_ylabel("best GFLOP/s so far")
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.suptitle("autotune tuning curves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(log: str, plot_path: str | None = None) -> int:
    records = load_records(log)
    if not records:
        from autotune.errors import AutotuneError
        raise AutotuneError(f"the log {log} has no records")
    print(summary(records))
    if plot_path:
        plot(records, plot_path)
        print(f"wrote {plot_path}")
    return 0
