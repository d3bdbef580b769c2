"""Summaries and tuning curves of a log: best GFLOP/s (calls/s for an op without a flop count)
against trials and against wall time, one curve per (task, strategy), re-timings of finalists left
out (they are no trials); how many timings were noisy; the best each task's records name
(autotune.records.best_per_task: re-timings of finalists first). User ops are rebuilt from the
definitions their records carry, so their flops are counted without the user's code. Keys are
shown readable (autotune.display); a task whose every trial failed is listed as such, never as a
speed of 0, and left off the plot.

The roofline: each task's best kernel measured on this machine's CPU, GFLOP/s against arithmetic
intensity (measure.peak), drawn under this machine's limits on the plot (measuring the peak once,
a few seconds, when it is not cached), and its share of the limit a column of the summary when the
peak is cached (a plain `report` never measures).

Example::

    >>> from autotune.report import curves                              # doctest: +SKIP
    >>> curves(load_records("tune.jsonl"))                              # doctest: +SKIP
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from typing import Any, Callable, Sequence

from collections import Counter
from pathlib import Path

from autotune.display import readable_key
from autotune.errors import AutotuneError
from autotune.records import Record, RecordError, best_per_task, from_target, kind, load_records
from autotune.target import cpu_model, current_target, same_isa


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


def failed_tasks(records: Sequence[Record]) -> dict[str, tuple[int, str]]:
    """Tasks of which no trial succeeded: key -> (failed trials, the most common failure kind)."""
    by_task: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if not r.retimed:
            by_task[r.key].append(r)
    out = {}
    for key, rs in by_task.items():
        if rs and not any(r.ok for r in rs):
            kinds = Counter(r.error or "?" for r in rs)
            out[key] = (len(rs), kinds.most_common(1)[0][0])
    return out


def no_success(key: str, failed: tuple[int, str]) -> str:
    """The line listing a task whose every trial failed."""
    return f"{readable_key(key)}: no successful trial ({failed[0]} failed, most often {failed[1]})"


def summary(records: Sequence[Record], peak_of: Callable[[str, int], Any] | None = None) -> str:
    """One row per (task, strategy): trials, errors, noisy timings, best speed, and the seconds from
    the task's first record to its last; columns as wide as their longest entry; then the best each
    task's records name and what kind of timing it is. peak_of(dtype, threads): this machine's
    Peak, or None (default: the cached one, never measured); with one, a column gives each best's
    share of the roofline when it was measured on this machine's CPU."""
    cs = curves(records)
    failed = failed_tasks(records)
    shares = best_shares(records, peak_of or cached_peak)
    errs: dict[tuple[str, str], int] = defaultdict(int)
    noisy: dict[tuple[str, str], int] = defaultdict(int)
    by_task: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if not r.retimed:
            errs[(r.key, r.strategy or "?")] += r.error is not None
            noisy[(r.key, r.strategy or "?")] += r.noisy
        by_task[r.key].append(r)
    header: tuple[str, ...] = ("task", "strategy", "trials", "errors", "noisy", "best trial", "unit", "elapsed s")
    body = [(readable_key(task), strat, str(len(pts)), str(errs[(task, strat)]), str(noisy[(task, strat)]),
             "-" if task in failed else f"{pts[-1][2]:.1f}", units(by_task[task])[1], f"{pts[-1][1]:.1f}")
            for (task, strat), pts in sorted(cs.items())]
    if shares:  # the best's share of this machine's roofline, where the peak is cached and it was measured here
        header = (*header[:7], "of limit", header[7])
        body = [(*row[:7], f"{100 * shares[task]:.0f}%" if task in shares else "-", row[7])
                for row, (task, _) in zip(body, sorted(cs))]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    left = {0, 1, 6}  # text columns; the numbers align right

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    named = [_named_best(task, rs) if any(r.ok for r in rs) else no_success(task, failed[task])
             for task, rs in sorted(by_task.items()) if any(r.ok for r in rs) or task in failed]
    limit = (["of limit: the task's best (named below, measured on this CPU) over this machine's roofline at its "
              "arithmetic intensity (measure.peak)"] if shares else [])
    return "\n".join([line(header), *map(line, body),
                      "best trial: the search's fastest single timing; the best named below prefers the finalists' "
                      "re-timings (alternating rounds, quiet ones first)",
                      "elapsed s: from the task's first record to its last (tuning wall time, resumes included)",
                      *limit, *named])


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
        return f"{readable_key(task)}: no usable record{why}"
    per, unit = units(rs)
    again = sum(r.retimed for r in rs)
    where = (f", measured on another ISA ({best.target.get('isa', '?')}; this machine: {here['isa']}): "
             "`autotune replay --any-target`" if elsewhere else "")
    return (f"{readable_key(task)}: best {per / best.seconds:.1f} {unit}, {kind(best)}{where}"
            + (f" ({again} re-timing{'s' * (again != 1)} of finalists in the log)" if again else ""))


def cached_peak(dtype: str, threads: int) -> Any:
    """This machine's peak from the cache ($AUTOTUNE_CACHE_DIR/peak.json), never measured; None
    when it is not cached."""
    from autotune.measure.peak import cached_peak as cached
    return cached(dtype, threads)


def measured_peak(dtype: str, threads: int) -> Any:
    """This machine's peak: cached, else measured once (a few seconds); None where it cannot be."""
    from autotune.measure.peak import machine_peak
    try:
        return machine_peak(dtype, threads)
    except AutotuneError:
        return None


def roofline_points(records: Sequence[Record], peak_of: Callable[[str, int], Any]
                    ) -> list[tuple[str, float, float, Any, float, float]]:
    """(task key, intensity, GFLOP/s, peak, bytes moved, bytes written) of each task's best kernel
    measured on this machine's CPU (its records' target names this CPU model), for tasks with a
    flop count in float32/float64 and a peak (peak_of(dtype, threads))."""
    from autotune.measure.peak import task_roof
    cpu = cpu_model()
    here = [r for r in usable(records) if r.target.get("cpu") == cpu]
    out = []
    for key, best in sorted(best_per_task(here).items()):
        try:  # a task without a template (a hand-written Numba kernel) or a flop count has no roofline
            task = best.task()
            roof = task_roof(task)
        except AutotuneError:
            continue
        peak = peak_of(task.dtype, task.threads) if roof is not None else None
        if peak is None:
            continue
        i, nbytes, written = roof
        out.append((key, i, task.flops() / best.seconds / 1e9, peak, nbytes, written))
    return out


def best_shares(records: Sequence[Record], peak_of: Callable[[str, int], Any]) -> dict[str, float]:
    """Task key -> its best kernel's share of this machine's roofline (see roofline_points)."""
    return {key: peak.share(gflops, i, nbytes, written)
            for key, i, gflops, peak, nbytes, written in roofline_points(records, peak_of)}


def plot(records: Sequence[Record], path: str, peak_of: Callable[[str, int], Any] | None = None) -> Any:
    """Draw the tuning curves (best so far against trials and against wall time) and the roofline
    panel into the PNG at path (its folders made); tasks whose every trial failed are left off.
    peak_of: as `summary` (default: cached, else measured). Returns the figure (closed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    failed = failed_tasks(records)
    cs = {k: pts for k, pts in curves(records).items() if k[0] not in failed}
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(17, 5.5))
    many = len({t for t, _ in cs}) > 1
    for (task, strat), pts in sorted(cs.items()):
        label = f"{readable_key(task)} [{strat}]" if many else strat
        a.step([p[0] for p in pts], [p[2] for p in pts], where="post", label=label)
        b.step([p[1] for p in pts], [p[2] for p in pts], where="post", label=label)
    a.set_xlabel("trials")
    b.set_xlabel("wall time (s)")
    a.set_title("best so far against trials", fontsize=10)
    b.set_title("best so far against wall time", fontsize=10)
    for ax in (a, b):
        ax.set_ylabel("best so far (GFLOP/s or calls/s)")
        ax.grid(alpha=0.3)
    _roofline_panel(c, roofline_points(records, peak_of or measured_peak))
    fig.suptitle("autotune tuning curves" + (f" ({len(failed)} task{'s' * (len(failed) > 1)} with no successful "
                                             "trial left off)" if failed else ""))
    # the legends go below the panels, never over the curves: the curves' under the left two, the roofline's
    # under the right one
    handles, labels = a.get_legend_handles_labels()
    r_handles, r_labels = c.get_legend_handles_labels()
    rows = max(math.ceil(len(labels) / 2), len(r_labels), 0)
    bottom = min(0.45, 0.035 * rows + 0.03) if rows else 0.0
    if labels:
        fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.02, 0.0), ncol=2, fontsize=8, frameon=False)
    if r_labels:
        fig.legend(r_handles, r_labels, loc="lower left", bbox_to_anchor=(0.68, 0.0), fontsize=7, frameon=False)
    fig.set_size_inches(17, 5.5 / (1 - bottom))
    fig.tight_layout(rect=(0, bottom, 1, 0.95))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def _roofline_panel(ax: Any, points: Sequence[tuple[str, float, float, Any, float, float]]) -> None:
    """GFLOP/s against arithmetic intensity (log-log) of each best kernel, under this machine's roofline."""
    import numpy as np
    ax.set_title("best kernels against this machine's roofline", fontsize=10)
    ax.set_xlabel("arithmetic intensity (flop/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    if not points:
        ax.text(0.5, 0.5, "no GFLOP/s kernel measured on this CPU", ha="center", va="center", transform=ax.transAxes,
                fontsize=9)
        return
    ridge = max(p[3].gflops / p[3].read_gbps for p in points if p[3].read_gbps > 0) if any(
        p[3].read_gbps > 0 for p in points) else 1.0
    lo, hi = min(min(p[1] for p in points), ridge / 10) / 4, max(max(p[1] for p in points), ridge) * 4
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    drawn = set()
    for _, _, _, peak, _, _ in points:
        if (peak.dtype, peak.threads) in drawn:
            continue
        drawn.add((peak.dtype, peak.threads))
        tag = f"{peak.dtype}, {peak.threads} thread{'s' * (peak.threads > 1)}"
        ax.plot(xs, [peak.attainable(x) for x in xs], color="black", lw=1.2,
                label=f"roofline from memory ({tag})")
        for gbps, level, style in ((peak.l3_gbps, "L3", "--"), (peak.l2_gbps, "L2", ":")):
            if gbps > 0:
                ax.plot(xs, [min(peak.gflops, x * gbps) for x in xs], color="grey", lw=0.8, ls=style,
                        label=f"from {level} ({tag})")
    for key, i, gflops, peak, nbytes, written in points:
        share = gflops / peak.attainable(i, nbytes, written)
        ax.scatter([i], [gflops], s=25, zorder=3, label=f"{readable_key(key)}: {100 * share:.0f}% of its limit")


def report(log: str, plot_path: str | None = None) -> int:
    records = load_records(log)
    if not records:
        raise AutotuneError(f"the log {log} has no records")
    peak_of = measured_peak if plot_path else cached_peak  # a plain report never measures the machine
    print(summary(records, peak_of))
    if plot_path:
        plot(records, plot_path, peak_of)
        print(f"wrote {plot_path}")
    return 0
