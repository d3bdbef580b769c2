"""throughput: candidates measured per minute with a cold compile cache, and again with a warm
one (the same configs, a new runner each time).

    python -m autotune.measure.experiments throughput --op matmul --shape 512x512x512 --trials 16
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from autotune.measure.experiments.common import add_random_configs_arguments, random_inputs
from autotune.measure.timing import TimingProtocol


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_random_configs_arguments(p, "random configs measured in each phase", "the run")


def run(args: argparse.Namespace) -> dict:
    """Time the same --trials random configs through a LocalRunner twice: cold cache, then warm."""
    from autotune.measure.local import LocalRunner, LocalRunnerOptions
    task, inputs = random_inputs(args)
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
