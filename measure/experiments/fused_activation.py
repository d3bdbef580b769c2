"""fused-activation: a tanh-GELU defined with te.compute (a tuned `autotune.op`) against NumPy's
three passes, and the memory read rate that bounds it (measure.peak), timed alternately under the
machine's timing lock, with and without the op's NaN/Inf input check.

    python -m autotune.measure.experiments fused-activation --shape 1024x3072 --threads 2 --trials 16
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

C = 0.7978845608028654  # sqrt(2 / pi)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", default="1024x3072", help="rows x columns of the float32 input")
    p.add_argument("--threads", type=int, default=2, help="threads of the kernel (NumPy's passes are single-threaded)")
    p.add_argument("--trials", type=int, default=16, help="tuning trials")
    p.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")


def gelu_numpy(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(C * (x + 0.044715 * x * x * x)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Tune the op, check it against NumPy, time both; print one line; return the numbers."""
    import tempfile

    import autotune
    from autotune import te
    from autotune.environment import settings
    from autotune.measure.peak import machine_peak
    from autotune.measure.timing import TimingProtocol, time_callable
    from autotune.target import cpu_model
    from autotune.timing_lock import TimingLock, lock_path

    rows, cols = (int(v) for v in args.shape.split("x"))
    log = tempfile.mkdtemp(prefix="fused-activation-") + "/gelu.jsonl"

    def gelu(X):  # type: ignore[no-untyped-def]
        return te.compute(X.shape, lambda i, j: 0.5 * X[i, j] * (1.0 + te.tanh(
            C * (X[i, j] + 0.044715 * X[i, j] * X[i, j] * X[i, j]))), name="out")
    checked = autotune.op(log=log, trials=args.trials, threads=args.threads)(gelu)
    unchecked = autotune.op(log=log, trials=args.trials, threads=args.threads, check_finite=False)(gelu)
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.empty_like(x)
    np.testing.assert_allclose(checked(x), gelu_numpy(x), rtol=2e-5, atol=2e-6)
    unchecked(x, out=out)
    proto = TimingProtocol(warmup=2, number=1, repeat=7, min_repeat_ms=100)
    times: dict[str, list[float]] = {"numpy": [], "autotune": [], "autotune, input check": []}
    with TimingLock(lock_path(settings().cache_dir)):
        for _ in range(args.rounds):
            for name, fn in (("numpy", lambda: gelu_numpy(x)), ("autotune", lambda: unchecked(x, out=out)),
                             ("autotune, input check", lambda: checked(x, out=out))):
                times[name].append(time_callable(fn, proto).median)
                time.sleep(0.3)
    med = {k: statistics.median(v) for k, v in times.items()}
    peak = machine_peak("float32", args.threads)
    moved = 2 * x.nbytes
    res = {"cpu": cpu_model(), "shape": [rows, cols], "threads": args.threads, "seconds": med,
           "gbps": {k: moved / v / 1e9 for k, v in med.items()}, "read_gbps": peak.read_gbps,
           "limit_seconds": moved / (peak.read_gbps * 1e9), "vs_numpy": {k: med["numpy"] / v for k, v in med.items()}}
    print(f"tanh-GELU {rows}x{cols} float32, {args.threads} threads ({res['cpu']}): " + ", ".join(
        f"{k} {v * 1e3:.3f} ms ({res['vs_numpy'][k]:.2f}x NumPy)" for k, v in med.items())
        + f"; {moved / 1e6:.1f} MB at the memory read rate ({peak.read_gbps:.0f} GB/s): {res['limit_seconds'] * 1e3:.3f} ms")
    return res
