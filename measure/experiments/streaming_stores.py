"""streaming-stores: row-wise templates (softmax, layernorm) with their output rows written by
plain stores and by non-temporal ones (the `stream` knob), every parallel config of each at each
shape built both ways and timed alternately in one process under the machine's timing lock.
`--knob prefetch --on 2` compares the `prefetch` knob the same way: no prefetch against x's row
2 rows ahead.

    python -m autotune.measure.experiments streaming-stores --shapes 4096x1024,16384x1024 --rounds 3
    python -m autotune.measure.experiments streaming-stores --knob prefetch --on 2 --shapes 4096x1024

Prints, per operator and shape: the fastest config's time with the knob off (plain stores, no
prefetch) and on, and the median over configs of each config's time on over its time off (the same
config timed the same minute); the memory rate the fastest reaches against the machine's read rate
at that working set (measure.peak).
"""
from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", default="softmax,layernorm", help="comma-separated row-wise templates")
    p.add_argument("--shapes", default="4096x1024,16384x1024", help="comma-separated MxN shapes (float32)")
    p.add_argument("--threads", type=int, default=2, help="threads of the kernels")
    p.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (the median is kept)")
    p.add_argument("--rows", default="1,2,4,8,16", help="comma-separated rows per block to build (of the template's)")
    p.add_argument("--knob", choices=("stream", "prefetch"), default="stream", help="the knob compared off and on")
    p.add_argument("--on", type=int, default=2, help="--knob prefetch: the rows ahead compared with 0")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build, check and time every config both ways; print one line per operator and shape."""
    from autotune.environment import settings
    from autotune.measure.peak import machine_peak
    from autotune.measure.timing import TimingProtocol, time_callable
    from autotune.target import cpu_model
    from autotune.task import Task
    from autotune.timing_lock import TimingLock, lock_path

    peak = machine_peak("float32", args.threads)
    proto = TimingProtocol(warmup=2, number=1, repeat=7, min_repeat_ms=50)
    rng = np.random.default_rng(0)
    res: dict[str, Any] = {"cpu": cpu_model(), "threads": args.threads, "rows": []}
    for op in args.ops.split(","):
        for shape in args.shapes.split(","):
            M, N = (int(v) for v in shape.split("x"))
            task = Task.create(op, {"M": M, "N": N}, "float32", threads=args.threads)
            knob = getattr(args, "knob", "stream")
            off, on = (False, True) if knob == "stream" else (0, getattr(args, "on", 2))
            if not {off, on} <= set(task.space().by_name[knob].values()):
                print(f"{op} {shape}: {knob} {on} is not in its space (rows of {N * 4} bytes); skipped")
                continue
            ins = [rng.standard_normal(a.shape).astype(np.float32) for a in task.arguments()]
            ref = task.reference(ins)
            calls: dict[tuple[str, bool], Any] = {}
            rows = {int(r) for r in args.rows.split(",")}
            for cfg in task.space().grid():
                if (not cfg["parallel"] and args.threads > 1) or cfg["rows"] not in rows or cfg[knob] not in (off, on):
                    continue
                k = task.build(cfg)
                np.testing.assert_allclose(k(*ins), ref, rtol=1e-4, atol=1e-5)
                calls[(str({n: v for n, v in cfg.items() if n != knob}), cfg[knob] == on)] = k.bind(*ins)
            times: dict[tuple[str, bool], list[float]] = {key: [] for key in calls}
            with TimingLock(lock_path(settings().cache_dir)):
                for _ in range(args.rounds):
                    for key, fn in calls.items():
                        times[key].append(time_callable(fn, proto).median)
            med = {key: statistics.median(v) for key, v in times.items()}
            plain = min(v for (c, s), v in med.items() if not s)
            streamed = min(v for (c, s), v in med.items() if s)
            ratios = [med[(c, True)] / med[(c, False)] for (c, s) in med if s and (c, False) in med]
            nbytes = 2 * M * N * 4
            rate = peak.bandwidth(nbytes)[0]
            row = {"op": op, "shape": [M, N], "knob": knob, "on": on, "plain_seconds": plain, "stream_seconds": streamed,
                   "best_ratio": streamed / plain, "median_config_ratio": statistics.median(ratios),
                   "configs": len(ratios), "gbps": nbytes / min(plain, streamed) / 1e9, "limit_gbps": rate}
            res["rows"].append(row)
            ways = ("plain", "streaming") if knob == "stream" else ("no prefetch", f"prefetch {on}")
            print(f"{op} {shape} float32, {args.threads} threads ({res['cpu']}): fastest {ways[0]} {plain * 1e6:.0f} us, "
                  f"{ways[1]} {streamed * 1e6:.0f} us ({row['best_ratio']:.2f}x); a config {ways[1]} over {ways[0]}, "
                  f"median of {len(ratios)}: {row['median_config_ratio']:.2f}x; {row['gbps']:.0f} GB/s of the "
                  f"{rate:.0f} GB/s read rate at {nbytes >> 20} MiB")
    return res
