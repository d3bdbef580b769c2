"""ray-scaling: candidates per minute with 1 and 2 compile workers (LocalRunner), and the Ray
runner's overhead against the local runner on the same configs (each with a cold compile cache).
Needs Ray: pip install ".[ray]".

    python -m autotune.measure.experiments ray-scaling --op matmul --shape 256x256x256 --trials 16
"""
from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any, Callable

from autotune.measure.experiments.common import add_random_configs_arguments, random_inputs
from autotune.measure.timing import TimingProtocol


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_random_configs_arguments(p, "random configs each runner measures", "each runner")


def run(args: argparse.Namespace) -> dict:
    """Time --trials random configs through three runners, each with its own cold cache."""
    from autotune.measure.local import LocalRunner, LocalRunnerOptions
    task, inputs = random_inputs(args)
    proto = TimingProtocol(warmup=1, repeat=3, min_repeat_ms=20)
    out: dict = {"task": task.key(), "trials": len(inputs)}

    def timed(label: str, make: Callable[[str], Any]) -> float:
        with tempfile.TemporaryDirectory(dir=args.cache_dir) as cache:
            t0 = time.perf_counter()
            with make(cache) as r:
                res = r.run(inputs)
            el = time.perf_counter() - t0
        out[label] = {"seconds": el, "per_minute": 60 * len(inputs) / el, "ok": sum(x.ok for x in res)}
        print(f"{label:<28} {len(inputs)} candidates in {el:6.1f} s = {60 * len(inputs) / el:5.1f} per minute")
        return el

    def local(workers: int, cache: str) -> LocalRunnerOptions:
        return LocalRunnerOptions(compile_workers=workers, protocol=proto, cache_dir=cache)

    one = timed("local, 1 compile worker", lambda cache: LocalRunner(local(1, cache)))
    two = timed("local, 2 compile workers", lambda cache: LocalRunner(local(2, cache)))
    import ray

    from autotune.measure.ray_runner import RayRunner
    ray.shutdown()
    rr = timed("ray, 1 node x 2 workers", lambda cache: RayRunner(options=local(2, cache), num_cpus=2))
    ray.shutdown()
    out["speedup_2_workers"] = one / two
    out["ray_overhead"] = rr / two
    print(f"2 workers vs 1: {one / two:.2f}x faster; Ray runner vs local runner: {rr / two:.2f}x the time "
          "(includes starting Ray)")
    return out
