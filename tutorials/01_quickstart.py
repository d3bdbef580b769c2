"""Quickstart: tune a matmul for your shape and call it like a NumPy function.

    python tutorials/01_quickstart.py            # 512x512x512, 24 trials (a few minutes)
    python tutorials/01_quickstart.py --fast     # a small shape and 2 trials

The first call with a new shape tunes within the budget (every measurement goes to the log);
the next call, and every later run of this script, uses the best kernel from the log.
"""
import argparse
import time

import numpy as np

import autotune

from autotune import te

# No main guard is needed: `scaled_sum`'s definition travels to the measurement workers as data
# (they never import this script), so ops may be defined and called anywhere, as in the README.
# The work below sits in main() only to parse this script's options.


# 2. Your own computation, no template: the search space is derived from the definition.
@autotune.op(policy="log")  # options are set per use below with .configure(...)
def scaled_sum(X, W):
    """out[i] = sum_j X[i, j] * W[j]"""
    j = te.reduce_axis(X.shape[1], name="j")
    return te.compute((X.shape[0],), lambda i: te.sum(X[i, j] * W[j], axis=j), name="out")


def main() -> None:
    p = argparse.ArgumentParser(description="Tune a matmul and a definition op, then call them like NumPy functions.")
    p.add_argument("--fast", action="store_true", help="small shape, few trials")
    p.add_argument("--log", default="quickstart.jsonl", help="the tuning log (default: quickstart.jsonl)")
    args = p.parse_args()
    n, trials = (96, 2) if args.fast else (512, 24)

    # 1. A tuned op from the built-in matmul template. policy="tune": tune shapes the log lacks.
    matmul = autotune.op("matmul", log=args.log, trials=trials)
    A = np.random.rand(n, n).astype(np.float32)
    B = np.random.rand(n, n).astype(np.float32)

    t0 = time.perf_counter()
    C = matmul(A, B)  # tunes (or loads the best from the log), compiles, runs
    print(f"first call (tune or load): {time.perf_counter() - t0:.1f} s")
    assert np.allclose(C, A @ B, rtol=1e-3, atol=1e-3)

    t0 = time.perf_counter()
    for _ in range(10):
        C = matmul(A, B)  # cached: just the kernel
    dt = (time.perf_counter() - t0) / 10
    print(f"matmul {n}^3: {2 * n**3 / dt / 1e9:.1f} GFLOP/s per call")

    X = np.random.rand(n, 64).astype(np.float32)
    W = np.random.rand(64).astype(np.float32)
    y = scaled_sum.configure(log=args.log, policy="tune", trials=trials)(X, W)
    assert np.allclose(y, X @ W, rtol=1e-3, atol=1e-3)
    print("scaled_sum ok; measurements are in", args.log)


if __name__ == "__main__":
    main()
