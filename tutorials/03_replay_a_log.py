"""Replay a tuning log: rebuild the best kernels from their recipes on this machine, re-verify
and re-time them, and use one as a plain function — no re-tuning.

    python tutorials/03_replay_a_log.py --log quickstart.jsonl
    python tutorials/03_replay_a_log.py --fast      # makes a tiny log first

The same from the shell: `autotune replay LOG [--json OUT]`.
"""
import argparse
import os

import numpy as np

from autotune.replay import format_rows, load_best, replay_log


def make_small_log(path: str) -> None:
    import autotune
    from autotune.measure.local import LocalRunnerOptions
    from autotune.measure.timing import TimingProtocol
    quick = LocalRunnerOptions(protocol=TimingProtocol(repeat=3, min_repeat_ms=5))  # each config timed briefly
    autotune.tune(op="matmul", shape="64x48x32", trials=2, log=path, strategy="random", runner_options=quick)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--log", default="replay.jsonl")
    p.add_argument("--fast", action="store_true", help="tune a tiny log first if --log does not exist")
    args = p.parse_args()
    if not os.path.exists(args.log):
        if not args.fast:
            raise SystemExit(f"no log at {args.log}: run tutorials/01_quickstart.py first, or pass --fast")
        make_small_log(args.log)

    rows = replay_log(args.log)  # re-verify and re-time the best kernel of each task
    print(format_rows(rows))

    row = rows[0]  # use one as a function: the config is validated, then rebuilt
    shape = dict(row.record.shape)
    kernel = load_best(args.log, row.record.op, shape, row.record.dtype)
    inputs = [np.random.rand(*a.shape).astype(a.dtype) for a in kernel.arguments]  # in the op's order
    out = kernel(*inputs)
    print(f"{row.key}: output {out.shape}, finite: {bool(np.isfinite(out).all())}")


if __name__ == "__main__":
    main()
