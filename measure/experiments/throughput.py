"""throughput: candidates measured per minute with a cold compile cache, and again with a warm
one (the same configs, a new runner each time).

    python -m measure.experiments throughput --op matmul --shape 512x512x512 --trials 16
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from measure.experiments.common import add_task_arguments, sample_configs
from measure.timing import TimingProtocol


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_task_arguments(p)
    p.add_argument("--trials", type=int, default=16, help="random configs measured in each phase")
    p.add_argument("--seed", type=int, default=0, help="seed of the random configs")
    p.add_argument("--cache-dir", default=None, help="where the fresh compile cache of the run is made "
                   "(a new directory inside it, removed after; default: the system's temporary directory)")


def run(args: argparse.Namespace) -> dict:
    """Time the same --trials random configs through a LocalRunner twice: cold cache, then warm."""
    from autotune.runner import MeasureInput
    from autotune.task import Task
    from measure.local import LocalRunner, LocalRunnerOptions
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    inputs = [MeasureInput(task, c) for c in sample_configs(task, args.trials, args.seed)]
    out = {"task": task.key(), "trials": args.trials}
    with tempfile.TemporaryDirectory(dir=args.cache_dir) as cache:
        for phase in ("cold", "warm"):
            t0 = time.perf_counter()
            opts = LocalRunnerOptions(protocol=TimingProtocol(warmup=1, repeat=3, min_repeat_ms=20), cache_dir=cache)
            with LocalRunner(opts) as r:
                res = r.run(inputs)
            el = time.perf_counter() - t0
            cs = [x.compile_seconds for x in res if x.compile_seconds is not None]
            out[phase] = {"seconds": el, "per_minute": 60 * len(inputs) / el, "ok": sum(x.ok for x in res),
                          "median_compile_s": statistics.median(cs) if cs else None}
            print(f"{phase} cache: {len(inputs)} candidates in {el:.1f} s = {60 * len(inputs) / el:.1f} per minute "
                  f"({out[phase]['ok']} ok); median compile (or cache load) per candidate "
                  f"{out[phase]['median_compile_s'] or 0:.2f} s")
    return out
