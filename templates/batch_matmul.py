"""C[b] = A[b] @ B[b] for every batch index b: matmul's BLIS-like blocking with the batch outermost.

Loop structure (knob names in brackets)::

    for b in B:  /  for jc in N / [nc]:  # the outer two, in the order [par_axis]; the outermost
      for jc in N / [nc]:  /  for b in B: # runs over threads when there is more than one
        for kc in K / [kc]:
          pack B[b, kc block, jc block] into NR-wide panels       (compute_at kc)
          for ic in M / [mc]:
            pack A[b, ic block, kc block] into MR-tall panels     (compute_at ic)   [pack_a]
            for jr, ir in panels:                                  [order]
              acc[MR, NR] = 0                                      (cache_write, on the stack)
              for kk in kc: for ii in MR (unrolled): for ji in NR (vectorized): acc += Ap * Bp
              C[b, tile] += acc   (clamped to the valid region)

Parallel over the batch suits many small matrices; parallel over column blocks suits a batch
smaller than the thread count.
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
    Bt, M, N, K = shape["B"], shape["M"], shape["N"], shape["K"]
    A = te.placeholder((Bt, M, K), dtype, name="A")
    B = te.placeholder((Bt, K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    par = ["none"]
    if threads > 1:
        par = ["batch", "cols", "none"] if shape["B"] > 1 else ["cols", "none"]
    return ConfigSpace([
        *gemm.tile_knobs(shape, dtype, target=target),
        ChoiceKnob("nc_panels", [1, 2, 4, 8, 16, 64]),  # NC = nc_panels * NR
        ChoiceKnob("order", ["jr_ir", "ir_jr"]),
        ChoiceKnob("pack_a", [True, False]),
        ChoiceKnob("parallel", par),                    # which outer loop runs over threads
    ], prune=gemm.tile_prune(shape, dtype, target))


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    mr, nr, kc, mc = gemm.tiles(cfg, shape)
    nc = min(cfg["nc_panels"] * nr, -(-shape["N"] // nr) * nr)
    par = cfg["parallel"] if threads > 1 else "none"
    b_panels = gemm.pack_panels(s, cfg, mr, nr, "A", "B")
    outer = ("jc", "b") if par == "cols" else ("b", "jc")
    gemm.blocked(s, "C", cfg, mr, nr, kc, mc, nc, outer, b_panels)
    if par != "none":
        s.parallel("C", outer[0])
    return CodegenOptions()


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return np.matmul(A, B)


def torch_reference(A, B):  # type: ignore[no-untyped-def]
    import torch
    return torch.bmm(A, B)


TEMPLATE = Template(
    name="batch_matmul", description="C[B,M,N] = A[B,M,K] @ B[B,K,N] (a matmul per batch index)",
    dims=("B", "M", "N", "K"), define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 2.0 * s["B"] * s["M"] * s["N"] * s["K"], default_shape="8x128x128x128", torch_reference=torch_reference)
