"""y = softmax(x) over the rows of x[M, N], numerically stable (the row max is subtracted first).

Compute definition (exp once per element: e is read by the row sum and the output)::

    mx[i]  = max_j x[i, j]
    e[i,j] = exp(x[i, j] - mx[i])
    s[i]   = sum_j e[i, j]
    y[i,j] = e[i, j] / s[i]

exp is te.exp of its argument clamped to [about log(smallest normal), 0], which kernels compute
with inline code that LLVM vectorizes (autotune.codegen.runtime's `vexp_nonpos`, which the
codegen prints for exp(min(max(v, lo), 0)): a Cody-Waite reduction, a polynomial and one 2**n
from the float's bits, with no clamps, NaN test or second 2**n factor of its own): Numba's
np.exp is a scalar libm call here (no SVML), about 4x slower than NumPy's SIMD exp, which no
schedule could recover.

What bounds it (AVX-512, Zen 4, 2 threads, 4096x1024 float32): 32 MiB of DRAM traffic (x read once,
y written once; e stays in L1) take 1.02 ms at the 33 GB/s measured streaming rate. The
instructions per 16 floats: row max 2, exp pass 19 (`vexp_nonpos` with the subtraction, clamps,
load and store; 31 with `vexp`), row sum 1 (added in the exp pass where e is computed per row: the
code generator fuses the two loops, autotune.codegen.fuse), output 2 (a multiply by 1/s, hoisted):
0.33 ns per element on one core with the rows in L2 (0.44 with `vexp`), 0.69 ms for the whole input
on 2 cores (0.92 with `vexp`, level with the memory time). So memory bound, the exp throughput a
third below it. Timed in a hot loop the 32 MiB partly stay in the L3 and move faster than 33 GB/s
(layernorm, the same traffic and little arithmetic: 0.62 ms; softmax 0.78 ms): there the exp
throughput is what separates the two.

Schedule: the rows are split into blocks of [rows] (the block loop runs over threads when
[parallel]); s, then e (read by s and y, so s is attached first) are computed at the block loop
(or per row, [attach]) into small local buffers, mx per row of e: x is read from DRAM once and
re-read from L1/L2, e is written to and read from L1/L2; row loops are vectorized and the
codegen's `reassoc` lets LLVM vectorize the row max and row sum. [stream]: the output rows are
stored around the caches; [prefetch]: x's row that many rows ahead is prefetched after each row's
max (schedule step `prefetch`), so its memory traffic overlaps the exp and output passes.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace
from autotune.target import Target, current
from autotune.codegen.options import CodegenOptions
from autotune.codegen.stream import streamable_row, worth_streaming
from autotune.dtypes import ITEMSIZE
from autotune.templates.base import Shape, Template

_SPEC = {  # dtype: (clamp,)
    "float32": (-87.33,),      # exp(-87.33) ~ 1.18e-38, the smallest normal float32
    "float64": (-708.39,),     # exp(-708.39) ~ 2.2e-308, the smallest normal float64
}


def exp_nonpos(v: te.Expr, dtype: str) -> te.Expr:
    """exp(v) for v <= 0, v clamped below at about log(smallest normal number).

    te.exp of v clamped to [clamp, 0]: the codegen prints exp(min(max(v, clamp), 0)) as
    autotune.codegen.runtime's `vexp_nonpos` (v = n*ln2 + r, a polynomial of exp(r) and one 2**n
    from the float's bits; the clamps make its own range handling unnecessary), which LLVM
    vectorizes, also inside a reduction. Its instructions carry no reassoc, so the Cody-Waite
    reduction survives softmax's reassoc. Max relative error against exp in long double on 10**6
    points from the clamp to 0, compiled with reassoc as softmax is (tests/templates/
    test_softmax.py): 7.4e-8 float32 (NumPy's exp: 2.0e-7), 1.4e-16 float64 (FMA targets; SSE4.2
    9.4e-8 and 1.8e-16). v below the clamp (also -inf) gives exp(clamp), about the smallest
    normal number, instead of a denormal or 0, so a masked (-inf) entry of a softmax row is about
    1e-38 / the row sum (templates/__init__.py); v above 0 (never in softmax) gives 1.
    """
    clamp = _SPEC[dtype][0]
    return te.exp(te.min(te.max(v, te.const(clamp, dtype)), te.const(0.0, dtype)))


def row_max(x: te.Tensor, name: str) -> te.Tensor:
    """max_j x[i, j] as two stages, so the row max vectorizes (LLVM does not vectorize a max
    reduction from Numba: its selects carry no fast-math flags).

    `{name}_part[i, l]` = max over the full chunks of V columns (two vectors of the target's
    lanes) of x[i, chunk*V + l] (a reduction whose inner loop l is spatial: a vector max);
    `name[i]` = the max of the V partial maxima as a balanced tree (log2 V steps deep, not a chain
    of V dependent maxima) and of the N % V tail columns.
    """
    M, N = x.shape
    V = 2 * current().lanes(x.dtype)
    full, tail = divmod(N, V)
    if full == 0:
        r = te.reduce_axis(N, name=f"{name}_r")
        return te.compute((M,), lambda i: te.max_reduce(x[i, r], axis=r), name=name)
    ko = te.reduce_axis(full, name=f"{name}_ko")
    part = te.compute((M, V), lambda i, l: te.max_reduce(x[i, ko * V + l], axis=ko), name=f"{name}_part")

    def tree(i: te.Expr) -> te.Expr:
        level = [part[i, l] for l in range(V)]
        while len(level) > 1:
            level = [te.max(a, b) for a, b in zip(level[::2], level[1::2])] + level[len(level) // 2 * 2:]
        return level[0]
    if tail == 0:
        return te.compute((M,), tree, name=name)
    r = te.reduce_axis(tail, name=f"{name}_r")  # the tree once (r < 1: a select evaluates one side), then the tail
    return te.compute((M,), lambda i: te.max_reduce(
        te.select(r < 1, te.max(tree(i), x[i, full * V]), x[i, r + full * V]), axis=r), name=name)


def schedule_row_max(s: Schedule, name: str, consumer: str, axis: str) -> None:
    """Compute row_max's stages at `axis` of `consumer`, the partial maxima vectorized."""
    s.compute_at(name, consumer, axis)
    part = f"{name}_part"
    if part in s.stages:
        s.compute_at(part, name, "i")
        s.reorder(part, f"{name}_ko", "l")
        s.vectorize(part, "l")


def define(shape: Shape, dtype: str) -> te.Tensor:
    M, N = shape["M"], shape["N"]
    x = te.placeholder((M, N), dtype, name="x")
    ks = te.reduce_axis(N, name="ks")
    mx = row_max(x, "mx")
    e = te.compute((M, N), lambda i, j: exp_nonpos(x[i, j] - mx[i], dtype), name="e")
    s = te.compute((M,), lambda i: te.sum(e[i, ks], axis=ks), name="s")
    return te.compute((M, N), lambda i, j: e[i, j] / s[i], name="y")


def row_space(shape: Shape, dtype: str, threads: int) -> ConfigSpace:
    """Knobs of a row-wise operator (softmax, layernorm). stream: the output rows are written with
    non-temporal stores (autotune.codegen.stream), which pays off where the output is far larger
    than the caches; offered for rows of a cache line or more that fit the stream's local buffer.
    prefetch: x's row that many rows ahead is prefetched after each row's first pass
    (autotune.codegen.prefetch), so its memory traffic overlaps the row's other passes."""
    M, N = shape["M"], shape["N"]
    rows = sorted({r for r in (1, 2, 4, 8, 16) if r <= M} | {min(M, 16)})
    return ConfigSpace([
        ChoiceKnob("rows", rows),                        # rows per block
        ChoiceKnob("attach", ["block", "row"]),          # where the row statistics are computed
        ChoiceKnob("parallel", [True, False] if threads > 1 else [False]),
        ChoiceKnob("stream", [False, True] if streamable_row(N * ITEMSIZE[dtype]) else [False]),
        ChoiceKnob("prefetch", [0, 2, 4] if M > 1 else [0]),  # rows ahead of the row loop (steps.Prefetch)
    ], prune=_prune_rows, added={"stream": False, "prefetch": 0})  # logs from before "stream" and "prefetch"


def _prune_rows(cfg: Mapping[str, Any]) -> str | None:
    if cfg["prefetch"] and cfg["attach"] == "block":
        return "prefetch with attach 'block': a block's statistics read its rows before the row loop, which has no pass to overlap"
    return None


def row_loop(rows: int) -> str:
    """The loop over single rows of a row-wise op's schedule split into blocks of `rows`: ii, or io
    for blocks of one row (a split by 1 leaves no ii loop)."""
    return "ii" if rows > 1 else "io"


space = row_space


def row_presets(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> list[dict]:
    """Blocks of 8 rows in parallel, the statistics per row, x prefetched 2 rows ahead; the output
    streamed first where `worth_streaming` says so for the target's L3, then the same config the
    other way."""
    sp = row_space(shape, dtype, threads)
    base = {"rows": min(8, shape["M"]), "attach": "row", "parallel": threads > 1, "stream": False,
            "prefetch": max(sp.by_name["prefetch"].values()[:2])}
    if sp.by_name["stream"].values() == [False]:
        return [base]
    first = worth_streaming(shape["M"] * shape["N"] * ITEMSIZE[dtype], (target or current()).l3)
    return [{**base, "stream": first}, {**base, "stream": not first}]


presets = row_presets


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    rows = min(cfg["rows"], shape["M"])
    s.split("y", "i", rows, "io", "ii")
    at = "io" if cfg["attach"] == "block" else "ii"
    s.compute_at("s", "y", at)
    s.compute_at("e", "y", at)   # after s: e's other reader must be computed there already
    schedule_row_max(s, "mx", "e", "i")
    s.vectorize("e", "j")
    s.vectorize("y", "j")
    if cfg["parallel"] and threads > 1:
        s.parallel("y", "io")
    if cfg["stream"]:
        s.stream("y")
    if cfg["prefetch"]:
        s.prefetch("y", row_loop(rows), "x", cfg["prefetch"])
    return CodegenOptions(reassoc=True)


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def torch_reference(x):  # type: ignore[no-untyped-def]
    import torch
    return torch.softmax(x, dim=1)


TEMPLATE = Template(
    name="softmax", description="y[M,N] = softmax(x[M,N]) over each row (numerically stable)",
    dims=("M", "N"), define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 5.0 * s["M"] * s["N"], default_shape="4096x1024", presets=presets, torch_reference=torch_reference)
