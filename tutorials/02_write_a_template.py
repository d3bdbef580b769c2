"""Write a template: a compute definition, the knobs of its search space, and a schedule per config.

    python tutorials/02_write_a_template.py          # tune it for 16 trials
    python tutorials/02_write_a_template.py --fast   # 4 trials

The operator: a row-wise scaled sum, out[i] = alpha * sum_j X[i, j]. Its knobs choose how
rows are tiled and whether the inner loop is unrolled; `autotune show`-style source printing
shows what each config generates.
"""
import argparse

import numpy as np

from autotune import te
from autotune.codegen import generate_source
from autotune.space import ChoiceKnob, ConfigSpace, SplitKnob
from autotune.templates import register
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Template


def define(shape, dtype):
    """The computation: what, not how."""
    M, N = shape["M"], shape["N"]
    X = te.placeholder((M, N), dtype, name="X")
    j = te.reduce_axis(N, name="j")
    s = te.compute((M,), lambda i: te.sum(X[i, j], axis=j), name="s")
    return te.compute((M,), lambda i: s[i] * 0.5, name="out")


def space(shape, dtype, threads):
    """The knobs: a split of the row axis (factors need not divide M) and two plain knobs."""
    return ConfigSpace([
        SplitKnob("rows", shape["M"], levels=1, candidates=[1, 2, 4, 8]),
        ChoiceKnob("fuse", [True, False]),        # compute the sums at the row loop of `out`
        ChoiceKnob("reassoc", [True, False]),     # let LLVM vectorise the row sums
    ])


def schedule(s, cfg, shape, threads):
    """The how: primitives applied for one config. Invalid steps raise ScheduleError."""
    (rows,) = cfg["rows"]
    io, ii = s.split("out", "i", rows)
    if cfg["fuse"]:
        s.compute_at("s", "out", ii)
    return CodegenOptions(reassoc=cfg["reassoc"])


TEMPLATE = register(Template(
    name="row_sum_half", description="out[i] = 0.5 * sum_j X[i, j]", dims=("M", "N"),
    define=define, space=space, schedule=schedule,
    reference=lambda X: 0.5 * X.sum(axis=1), flops=lambda s: float(s["M"] * s["N"]),
    default_shape="1000x512", shape_of=lambda X: {"M": X.shape[0], "N": X.shape[1]}), module=__name__)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fast", action="store_true")
    p.add_argument("--log", default="row_sum.jsonl")
    args = p.parse_args()

    import autotune
    from autotune.task import Task

    task = Task.create("row_sum_half", "1000x512")
    print(task.space())
    cfg = task.space().validate({"rows": [4], "fuse": True, "reassoc": True})
    sched, opts = task.schedule(cfg)
    print(generate_source(sched, reassoc=opts.reassoc))  # what this config generates

    result = autotune.tune(op=task, trials=4 if args.fast else 16, log=args.log, strategy="random")
    print(f"best {result.best_gflops:.2f} GFLOP/s with {result.best_config.key()}")

    X = np.random.rand(1000, 512).astype(np.float32)
    out = task.build(result.best_config)(X)
    assert np.allclose(out, 0.5 * X.sum(axis=1), rtol=1e-4)
    print("ok")


if __name__ == "__main__":
    main()
