"""winograd: conv2d's Winograd tiles against its direct presets and torch on a 3x3 stride-1 layer,
each Winograd kernel compiled with and without NoAliasKernelPipeline (codegen noalias), timed in
--rounds alternating rounds in one process under the machine's timing lock.

    python -m autotune.measure.experiments winograd --shape 1x64x56x56x64x3x3x1x1 --rounds 7

Prints compile CPU seconds, the error against the NumPy reference (max |Y - ref| / max |ref|), the
median time and the median of the per-round ratios to torch.
"""
from __future__ import annotations

import argparse
import statistics
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", default="1x64x56x56x64x3x3x1x1", help="conv2d shape (3x3, stride 1, dilation 1)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds; each kernel's median of them")


def run(args: argparse.Namespace) -> dict:
    """Build, check and time every Winograd tile (both ways) and the first two direct presets."""
    import numpy as np
    from autotune.bench import baseline_callables, blas_threads
    from autotune.codegen import build
    from autotune.environment import settings
    from autotune.task import Task
    from autotune.timing_lock import TimingLock, lock_path
    from autotune.measure.timing import time_callable

    task = Task.create("conv2d", args.shape, threads=args.threads)
    tiles = [t for t in task.space().by_name["tile"].values() if t.startswith("f")]
    if not tiles:
        raise SystemExit(f"conv2d {args.shape} has no Winograd tiles: they need a 3x3 window, stride 1, dilation 1")
    ins = task.inputs()
    ref = np.asarray(task.reference(ins))
    base = next(p for p in task.presets() if p["tile"].startswith("f"))
    kernels: dict[str, tuple[float, float]] = {}
    fns = {}
    for tile in tiles:
        for noalias in (True, False):
            s, _ = task.schedule({**base, "tile": tile})
            t0 = time.thread_time()
            k = build(s, threads=args.threads, noalias=noalias)
            name = f"{tile}{'' if noalias else ' (aliasing checked)'}"
            kernels[name] = (time.thread_time() - t0, float(np.abs(k(*ins) - ref).max() / np.abs(ref).max()))
            fns[name] = k.bind(*ins)
    for p in [p for p in task.presets() if not p["tile"].startswith("f")][:2]:
        t0 = time.thread_time()
        k = task.build(p)
        name = f"direct {p['tile']} cb={p['cb']}"
        kernels[name] = (time.thread_time() - t0, float(np.abs(k(*ins) - ref).max() / np.abs(ref).max()))
        fns[name] = k.bind(*ins)
    fns.update(baseline_callables(task, ins, ("torch",)))
    kernels["torch"] = (0.0, float("nan"))
    times: dict[str, list[float]] = {n: [] for n in fns}
    with TimingLock(lock_path(settings().cache_dir)), blas_threads(args.threads):
        for _ in range(args.rounds):
            for n, f in fns.items():
                times[n].append(time_callable(f).median)
    rows = []
    print(f"| kernel | compile s | error | ms | x torch |\n|---|---|---|---|---|")
    for n in fns:
        med = statistics.median(times[n])
        ratio = statistics.median(a / b for a, b in zip(times["torch"], times[n]))
        rows.append({"kernel": n, "compile_seconds": kernels[n][0], "error": kernels[n][1], "ms": med * 1e3,
                     "vs_torch": ratio})
        print(f"| {n} | {kernels[n][0]:.2f} | {kernels[n][1]:.1e} | {med * 1e3:.3f} | {ratio:.2f} |")
    return {"shape": args.shape, "threads": args.threads, "rounds": args.rounds, "rows": rows}
