"""C = A @ B, blocked like BLIS: packed A and B panels, an MR x NR accumulator tile on the stack.

Loop structure (knob names in brackets)::

    for jc in N / NC:                   # NC from [jc_blocks]; parallel over threads when [parallel]
      for kc in K / [kc]:
        pack B[kc block, jc block] into NR-wide panels         (compute_at kc)
        for ic in M / [mc]:
          pack A[ic block, kc block] into MR-tall panels       (compute_at ic)
          for jr, ir in panels:                                 [order]
            acc[MR, NR] = 0                                     (cache_write, on the stack)
            for kk in kc: for ii in MR (unrolled): for ji in NR (vectorized): acc += Ap * Bp
            C[tile] += acc   (clamped to the valid region: awkward shapes work)

With a few rows (M <= ROWS_MAX, a matrix-vector product at M = 1) packing B costs more than it
saves: B is read once whatever the schedule, so the kernel is memory bound and the best one reads
B in the order it lies. [kernel] "rows" streams it [ku] rows at a time, unpacked, into a block of C::

    for jc in N / NC:                   # parallel over threads when [parallel]; NC from [jc_blocks]
      for ko in K / [ku]:
        for i in M: for jv in NC / NR:
          acc[NR] = 0                                            (cache_write, on the stack)
          for ki in ku (unrolled): for ji in NR (vectorized): acc += A[i, k] * B[k, j]
          C[i, NR columns] += acc
"""
from __future__ import annotations

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace, fit
from autotune.target import Target
from autotune.templates import gemm
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Shape, Template


def define(shape: Shape, dtype: str) -> te.Tensor:
    M, N, K = shape["M"], shape["N"], shape["K"]
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


ROWS_MAX = 8  # at most this many rows of A: the row-streaming kernel is in the space


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    rows = [ChoiceKnob("kernel", ["panels", "rows"]), ChoiceKnob("ku", fit([1, 2, 4, 8], shape["K"]))] \
        if shape["M"] <= ROWS_MAX else []
    # the knobs the row-streaming kernel ignores first: a grid (last knob fastest) meets its twins spread out
    return ConfigSpace([
        *gemm.tile_knobs(shape, dtype, mr=(2, 4, 6, 8, 12), target=target),
        ChoiceKnob("order", ["jr_ir", "ir_jr"]),
        ChoiceKnob("pack_a", [True, False]),
        *rows,
        ChoiceKnob("jc_blocks", [1, 2, 4, 8]),          # column blocks per thread: NC = N / (blocks * threads)
        ChoiceKnob("parallel", [True, False] if threads > 1 else [False]),
    ], prune=gemm.tile_prune(shape, dtype, target), added={"kernel": "panels", "ku": 1})  # logs from before "rows"


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    workers = threads if cfg["parallel"] else 1
    if cfg.get("kernel") == "rows":
        return stream_rows(s, cfg, shape, threads, workers)
    mr, nr, kc, mc = gemm.tiles(cfg, shape)
    nc = column_block(shape, nr, cfg["jc_blocks"] * workers)
    b_panels = gemm.pack_panels(s, cfg, mr, nr, "A", "B")
    gemm.blocked(s, "C", cfg, mr, nr, kc, mc, nc, ("jc",), b_panels)
    if cfg["parallel"] and threads > 1:
        s.parallel("C", "jc")
    return CodegenOptions()


def column_block(shape: Shape, nr: int, blocks: int) -> int:
    """NC: the columns of one of `blocks` column blocks, in whole NR-wide panels."""
    panels = -(-shape["N"] // nr)
    return -(-panels // min(panels, blocks)) * nr


def stream_rows(s: Schedule, cfg: Config, shape: Shape, threads: int, workers: int) -> CodegenOptions:
    """[kernel] "rows": B streamed [ku] rows at a time into an NC-wide block of C per [jc_blocks]
    (module docstring), [nr] columns at a time in an accumulator on the stack."""
    nr, ku = min(cfg["nr"], shape["N"]), min(cfg["ku"], shape["K"])
    nc = column_block(shape, nr, cfg["jc_blocks"] * workers)
    s.split("C", "j", nc, "jc", "jn")
    s.split("C", "jn", nr, "jv", "ji")
    s.split("C", "k", ku, "ko", "ki")
    s.reorder("C", "jc", "ko", "i", "jv", "ki", "ji")
    s.cache_write("C", "jv")
    s.unroll("C", "ki")
    s.vectorize("C", "ji")
    if cfg["parallel"] and threads > 1:
        s.parallel("C", "jc")
    return CodegenOptions(noalias=True)


def presets(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> list[dict]:
    """The target's preset register tiles (gemm.preset_tiles: 6x48 / 8x48 / 4x64 ... with 32
    registers of 16 lanes, 6x16 / 4x24 ... with 16 of 8), column panels outer, A packed; with a few
    rows, the row-streaming kernel first (one column block per thread, and four)."""
    sp = space(shape, dtype, threads, target)
    tiles = [gemm.snap({**tile, "kernel": "panels", "ku": 1, "jc_blocks": 1, "order": "jr_ir", "pack_a": True,
                        "parallel": threads > 1}, sp) for tile in gemm.preset_tiles(dtype, target)]
    if "kernel" not in sp.by_name:
        return tiles
    return [gemm.snap({**tiles[0], "kernel": "rows", "ku": 4, "jc_blocks": blocks}, sp) for blocks in (1, 4)] + tiles


def torch_reference(A, B):  # type: ignore[no-untyped-def]
    return A @ B


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


TEMPLATE = Template(
    name="matmul", description="C[M,N] = A[M,K] @ B[K,N]", dims=("M", "N", "K"),
    define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"], default_shape="256x256x256",
    presets=presets, torch_reference=torch_reference,
    shape_of=lambda A, B: {"M": A.shape[0], "N": B.shape[1], "K": A.shape[1]})
