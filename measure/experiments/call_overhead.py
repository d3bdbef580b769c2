"""call-overhead: microseconds per call of the bare compiled kernel, the same kernel through a
tuned op (`autotune.op`, with and without out=, and without its NaN/Inf check, check_finite=False:
of the inputs before the run, or of the output after it where the kernel checks_output) and NumPy, on a 96^3 matmul and a 1024-element elementwise op (median of
--calls single calls each, under the machine's timing lock). --large: instead, calls whose check
matters (a matrix-vector product, a 1x1 convolution, a 512^3 matmul, on 2 threads): the bound
kernel, the tuned op and the op without its check (both with out=), median of --calls calls.

    python -m autotune.measure.experiments call-overhead --calls 20000
    python -m autotune.measure.experiments call-overhead --large --calls 300
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=10000, help="calls timed one by one for each median")
    p.add_argument("--large", action="store_true", help="time large calls on 2 threads instead (see the docstring)")


def _median_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(calls, 200)):
        fn()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3


def _large(calls: int) -> dict:
    import warnings

    import autotune
    from autotune.environment import settings
    from autotune.timing_lock import TimingLock, lock_path

    rng = np.random.default_rng(0)
    cases = [("matrix-vector 1x4096x4096", "matmul", ((1, 4096), (4096, 4096))),
             ("conv2d 1x1 1x256x56x56 -> 64 (pad 1)", "conv2d", ((1, 256, 56, 56), (64, 256, 1, 1))),
             ("matmul 512^3", "matmul", ((512, 512), (512, 512)))]
    rows = []
    print("| call | bare kernel | tuned op, out= | tuned op, out=, check_finite=False | its check |")
    print("|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        for name, template, shapes in cases:
            ins = tuple(rng.random(sh, np.float32) for sh in shapes)
            op = autotune.op(template, policy="default", threads=2)
            op(*ins)
            unchecked = op.configure(check_finite=False)
            unchecked(*ins)
            bare = op.kernel_for(*ins).bind(*ins)
            with TimingLock(lock_path(settings().cache_dir)):
                out = op(*ins)  # into one output: a fresh one's allocation and page faults vary from call to call
                r = {"call": name, "bare_us": _median_us(bare, calls),
                     "op_us": _median_us(lambda: op(*ins, out=out), calls),
                     "unchecked_us": _median_us(lambda: unchecked(*ins, out=out), calls)}
            rows.append(r)
            print(f"| {name} | {r['bare_us']:.1f} µs | {r['op_us']:.1f} µs | {r['unchecked_us']:.1f} µs | "
                  f"{r['op_us'] - r['unchecked_us']:.1f} µs |", flush=True)
    return {"calls": calls, "large": rows}


def run(args: argparse.Namespace) -> dict:
    """Time each way of calling both ops; print a Markdown table; return the rows."""
    if args.large:
        return _large(args.calls)
    import autotune
    from autotune import te
    from autotune.environment import settings
    from autotune.timing_lock import TimingLock, lock_path

    matmul = autotune.op("matmul", policy="default", threads=1)

    @autotune.op(policy="default", threads=1)
    def axpb(X):
        return te.compute(X.shape, lambda i: X[i] * 2.0 + 1.0, name="out")

    rng = np.random.default_rng(0)
    A, B = rng.random((96, 96), np.float32), rng.random((96, 96), np.float32)
    X = rng.random(1024, np.float32)
    cases = [("matmul 96^3", matmul, (A, B), lambda: A @ B), ("elementwise 1024 (2x+1)", axpb, (X,), lambda: X * 2.0 + 1.0)]
    rows = []
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        for name, op, ins, numpy_fn in cases:
            out = op(*ins)
            unchecked = op.configure(check_finite=False)
            unchecked(*ins)
            bare = op.kernel_for(*ins).bind(*ins)
            with TimingLock(lock_path(settings().cache_dir)):
                r = {"op": name, "bare_us": _median_us(bare, args.calls),
                     "op_us": _median_us(lambda: op(*ins), args.calls),
                     "op_out_us": _median_us(lambda: op(*ins, out=out), args.calls),
                     "unchecked_us": _median_us(lambda: unchecked(*ins), args.calls),
                     "numpy_us": _median_us(numpy_fn, args.calls)}
            r["overhead_us"] = r["op_us"] - r["bare_us"]
            r["unchecked_overhead_us"] = r["unchecked_us"] - r["bare_us"]
            rows.append(r)
    print("| op | bare kernel | tuned op | tuned op, out= | tuned op, check_finite=False | numpy "
          "| overhead (tuned op - bare) | overhead without the check |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['op']} | {r['bare_us']:.2f} µs | {r['op_us']:.2f} µs | {r['op_out_us']:.2f} µs | "
              f"{r['unchecked_us']:.2f} µs | {r['numpy_us']:.2f} µs | {r['overhead_us']:.2f} µs | "
              f"{r['unchecked_overhead_us']:.2f} µs |")
    return {"calls": args.calls, "rows": rows}
