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
"""
from __future__ import annotations

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace
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


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    return ConfigSpace([
        *gemm.tile_knobs(shape, dtype, mr=(2, 4, 6, 8, 12), target=target),
        ChoiceKnob("jc_blocks", [1, 2, 4, 8]),          # column blocks per thread: NC = N / (blocks * threads)
        ChoiceKnob("order", ["jr_ir", "ir_jr"]),
        ChoiceKnob("pack_a", [True, False]),
        ChoiceKnob("parallel", [True, False] if threads > 1 else [False]),
    ], prune=gemm.tile_prune(shape, dtype, target))


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    mr, nr, kc, mc = gemm.tiles(cfg, shape)
    workers = threads if cfg["parallel"] else 1
    panels = -(-shape["N"] // nr)
    nc = -(-panels // min(panels, cfg["jc_blocks"] * workers)) * nr
    b_panels = gemm.pack_panels(s, cfg, mr, nr, "A", "B")
    gemm.blocked(s, "C", cfg, mr, nr, kc, mc, nc, ("jc",), b_panels)
    if cfg["parallel"] and threads > 1:
        s.parallel("C", "jc")
    return CodegenOptions()


def presets(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> list[dict]:
    """The target's preset register tiles (gemm.preset_tiles: 6x48 / 8x48 / 4x64 ... with 32
    registers of 16 lanes, 6x16 / 4x24 ... with 16 of 8), column panels outer, A packed."""
    sp = space(shape, dtype, threads, target)
    return [gemm.snap({**tile, "jc_blocks": 1, "order": "jr_ir", "pack_a": True, "parallel": threads > 1}, sp)
            for tile in gemm.preset_tiles(dtype, target)]


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
