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
from templates import gemm
from templates.base import CodegenOptions, Shape, Template


def define(shape: Shape, dtype: str) -> te.Tensor:
    M, N, K = shape["M"], shape["N"], shape["K"]
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


def space(shape: Shape, dtype: str, threads: int) -> ConfigSpace:
    return ConfigSpace([
        *gemm.tile_knobs(shape, dtype, mr=(2, 4, 6, 8, 12)),
        ChoiceKnob("jc_blocks", [1, 2, 4, 8]),          # column blocks per thread: NC = N / (blocks * threads)
        ChoiceKnob("order", ["jr_ir", "ir_jr"]),
        ChoiceKnob("pack_a", [True, False]),
        ChoiceKnob("parallel", [True, False] if threads > 1 else [False]),
    ])


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


def presets(shape: Shape, dtype: str, threads: int) -> list[dict]:
    """Configs that were fast on AVX-512 machines (6x48 / 8x48 / 4x64 register tiles)."""
    sp = space(shape, dtype, threads)
    out = []
    for mr, nr, kc, mcp in ((6, 48, 512, 16), (8, 48, 512, 8), (4, 64, 512, 16), (6, 32, 512, 16),
                            (6, 48, 256, 32), (8, 32, 384, 16)):
        cfg = {"mr": mr, "nr": nr if dtype == "float32" else nr // 2, "kc": kc, "mc_panels": mcp, "jc_blocks": 1,
               "order": "jr_ir", "pack_a": True, "parallel": threads > 1}
        fixed = {}
        for k in sp.knobs:  # snap each value into this shape's space
            vals = k.values()
            v = cfg[k.name]
            fixed[k.name] = v if v in vals else min(vals, key=lambda x: abs(x - v) if isinstance(x, int) else 0)
        out.append(fixed)
    return out


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
