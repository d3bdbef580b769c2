"""out = relu(A @ W + bias): a matmul stage D and an epilogue stage, fused or not.

Two computes::

    D[i, j]   = sum_k A[i, k] * W[k, j]
    out[i, j] = max(D[i, j] + bias[j], 0)

The knob [fuse] picks how the epilogue meets the matmul:

- "none": D is a root stage blocked exactly like templates/matmul.py (packed panels, stack
  accumulator tile), written to a full intermediate; the epilogue is a second pass over it.
  (With threads, root stages other than the output run serially before the parallel epilogue.)
- "block": D is computed at the output's (ic, jc) block loop into a local [mc, nc] buffer, with
  the matmul blocking inside it (kc blocks, packed panels, stack accumulator tile); the epilogue
  then reads the block while it is still in cache. The outermost block loop runs over threads.
  Each block packs the W panels it needs (W is re-packed once per row block: cheap when mc is
  large). "block_prepacked": the same, with W packed once, whole, before the main loop.
- "tile": D is computed at the output's register-tile loop into an [mr, nr] buffer on the stack
  (the accumulator tile itself), over the whole K; the epilogue reads it right away. W (and A,
  with [pack_a]) are packed once, whole, before the main loop.
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
    W = te.placeholder((K, N), dtype, name="W")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis(K, name="k")
    D = te.compute((M, N), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="D")
    return te.compute((M, N), lambda i, j: te.max(D[i, j] + bias[j], 0.0), name="out")


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    return ConfigSpace([
        ChoiceKnob("fuse", ["block", "block_prepacked", "tile", "none"]),
        *gemm.tile_knobs(shape, dtype, target=target),
        ChoiceKnob("nc_panels", [1, 2, 4, 8, 16, 64]),  # NC = nc_panels * NR
        ChoiceKnob("order", ["jr_ir", "ir_jr"]),        # register tiles: column panels outer or row panels outer
        ChoiceKnob("outer", ["jc_ic", "ic_jc"]),        # cache blocks: the outermost one runs over threads
        ChoiceKnob("pack_a", [True, False]),
        ChoiceKnob("parallel", [True, False] if threads > 1 else [False]),
    ], prune=gemm.tile_prune(shape, dtype, target))


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    mr, nr, kc, mc = gemm.tiles(cfg, shape)
    nc = min(cfg["nc_panels"] * nr, -(-shape["N"] // nr) * nr)
    parallel = cfg["parallel"] and threads > 1
    fuse = cfg["fuse"]
    w_panels = gemm.pack_panels(s, cfg, mr, nr, "A", "W")
    blocks = ("jc", "ic") if cfg["outer"] == "jc_ic" else ("ic", "jc")

    if fuse == "none":
        # D blocked like matmul over the whole matrix; the epilogue a separate vectorised pass.
        gemm.blocked(s, "D", cfg, mr, nr, kc, mc, nc, ("jc",), w_panels)
        if parallel:
            s.parallel("out", "i")
        s.vectorize("out", "j")
        return CodegenOptions()

    # the output's blocks and register tiles
    s.split("out", "j", nc, "jc", "jn")
    s.split("out", "i", mc, "ic", "im")
    if fuse in ("block", "block_prepacked"):
        s.reorder("out", *blocks, "im", "jn")
        s.vectorize("out", "jn")
        s.compute_at("D", "out", blocks[1])
        gemm.register_tiles(s, "D", cfg, mr, nr, kc, "j", "i", ("kc",))
        if fuse == "block":
            s.compute_at(w_panels, "D", "kc")
        if cfg["pack_a"]:
            gemm.a_panels_at(s, "D", "kc")
    else:  # tile
        s.split("out", "jn", nr, "jr", "ji")
        s.split("out", "im", mr, "ir", "ii")
        panels = gemm.panels(cfg)
        s.reorder("out", *blocks, *panels, "ii", "ji")
        s.unroll("out", "ii")
        s.vectorize("out", "ji")
        s.compute_at("D", "out", panels[1])
        # D's region is one [mr, nr] tile: the (extent-1) outer loops host the accumulator tile,
        # so the k loop runs whole over the zero-padded panels and only the write-back is clamped
        s.split("D", "i", mr, "io", "ii")
        s.split("D", "j", nr, "jo", "ji")
        s.reorder("D", "io", "jo", "k", "ii", "ji")
        s.cache_write("D", "jo")
        s.unroll("D", "ii")
        s.vectorize("D", "ji")
        if cfg["pack_a"]:
            s.reorder("Ap", "p_o", "p_i", "d1")
    if parallel:
        s.parallel("out", blocks[0])
    return CodegenOptions()


def reference(A: np.ndarray, W: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.maximum(A @ W + bias, 0).astype(A.dtype)


def flops(shape: Shape) -> float:
    M, N, K = shape["M"], shape["N"], shape["K"]
    return 2.0 * M * N * K + 2.0 * M * N


def torch_reference(A, W, bias):  # type: ignore[no-untyped-def]
    import torch
    return torch.relu(torch.addmm(bias, A, W))


TEMPLATE = Template(
    name="dense_bias_relu", description="out[M,N] = relu(A[M,K] @ W[K,N] + bias[N]), matmul and epilogue fused",
    dims=("M", "N", "K"), define=define, space=space, schedule=schedule, reference=reference,
    flops=flops, default_shape="256x256x256", torch_reference=torch_reference)
