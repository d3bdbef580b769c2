"""TPU kernel templates: tiled kernels whose knobs are tile sizes, run on the emulated TPU core.

Each template is a Template (a compute definition of the same math, a knob space of tile sizes)
plus `kernel(shape, cfg) -> TiledKernel` for the emulator and `ops(shape)` for its op graph.
Their backend is "tpu_emulator" (autotune.backends.tpu): features, graphs and the runner are the
emulator's. They are not CPU kernels: scheduling one for Numba raises ScheduleError. The
templates registry resolves them by name without listing them (unlisted entries of templates.TEMPLATES).

Example::

    >>> from autotune.backends.tpu.templates import TPU_TEMPLATES, tiled_kernel
    >>> from autotune.task import Task
    >>> t = Task.create("tpu_matmul", "512x512x512x0", threads=1)
    >>> tiled_kernel(t, t.space().validate({"bm": 128, "bn": 128, "bk": 128})).grid
    (1, 4, 4, 4)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from autotune.errors import ScheduleError
from autotune.ir import te
from autotune.space import ChoiceKnob, Config, ConfigSpace
from autotune.backends.tpu.emulator import Block, TiledKernel
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Shape, Template

BM = (8, 16, 32, 64, 128, 256, 512, 1024)
BN = (128, 256, 512, 1024, 2048)
BK = (128, 256, 512, 1024, 2048)
EW_OPS = ("add", "mul", "relu", "exp", "tanh")


@dataclass(frozen=True)
class OpNode:
    """One op of a kernel's graph: its kind, output shape and inputs (indices of earlier ops)."""
    kind: str
    shape: tuple[int, ...]
    inputs: tuple[int, ...] = ()


def _fit(vals: tuple[int, ...], n: int, align: int) -> list[int]:
    padded = -(-n // align) * align
    out = [v for v in vals if v < padded] + [min([v for v in vals if v >= padded], default=max(vals))]
    return sorted(set(out))


def _not_cpu(s, cfg, shape, threads) -> CodegenOptions:  # type: ignore[no-untyped-def]
    raise ScheduleError("schedule", None, "TPU kernel templates run on the TPU emulator (TpuRunner), "
                                          "not as Numba CPU kernels")


def _gemm_space(M: int, N: int, K: int) -> ConfigSpace:
    return ConfigSpace([ChoiceKnob("bm", _fit(BM, M, 8)), ChoiceKnob("bn", _fit(BN, N, 128)),
                        ChoiceKnob("bk", _fit(BK, K, 128))])


def gemm_kernel(name: str, B: int, M: int, N: int, K: int, cfg: Config, ew: int = 0, a_reuse: float = 1.0,
                reduce_rows: bool = False) -> TiledKernel:
    """A (batched) tiled matmul: grid (B, M/bm, N/bn, K/bk), fp32 accumulation over k, then `ew`
    elementwise ops (and an optional row reduction) on the output block before it is written."""
    bm, bn, bk = min(cfg["bm"], -(-M // 8) * 8), min(cfg["bn"], -(-N // 128) * 128), min(cfg["bk"], -(-K // 128) * 128)
    grid = (B, -(-M // bm), -(-N // bn), -(-K // bk))
    a = Block("A", (B * M, K), (bm, bk), (1, 3))
    b = Block("B", (B * K, N), (bk, bn), (3, 2))
    out = Block("C", (B * M, N), (bm, bn), (1, 2))
    if a_reuse > 1:  # convolution: neighbouring windows share input rows (fewer bytes fetched)
        a = Block("X", (B * M, K), (max(8, int(bm / a_reuse)), bk), (1, 3))
    vpu = ew + (2 if reduce_rows else 0)
    return TiledKernel(grid, (a, b), out, mxu=(bm, bk, bn), vpu_ops=vpu / max(grid[3], 1), reduction_axes=(3,),
                       name=name, flops=2.0 * B * M * N * K + vpu * B * M * N)


def _gemm_ops(B: int, M: int, N: int, K: int, ew: int, reduce_rows: bool, conv: bool = False) -> list[OpNode]:
    ops = [OpNode("parameter", (B, M, K)), OpNode("parameter", (B, K, N)),
           OpNode("convolution" if conv else "dot", (B, M, N), (0, 1))]
    for i in range(ew):
        ops.append(OpNode(EW_OPS[i % len(EW_OPS)], (B, M, N), (len(ops) - 1,)))
    if reduce_rows:
        ops.append(OpNode("reduce", (B, M, 1), (len(ops) - 1,)))
    ops.append(OpNode("output", ops[-1].shape, (len(ops) - 1,)))
    return ops


def _te_matmul(B: int, M: int, N: int, K: int, dtype: str) -> te.Tensor:
    A = te.placeholder((B, M, K), dtype, name="A")
    W = te.placeholder((B, K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * W[b, k, j], axis=k), name="C")


@dataclass(frozen=True)
class TpuKernelTemplate:
    template: Template
    kernel: Callable[[Shape, Config], TiledKernel]
    ops: Callable[[Shape], list[OpNode]]


def _matmul(shape: Shape, cfg: Config) -> TiledKernel:
    return gemm_kernel("tpu_matmul", 1, shape["M"], shape["N"], shape["K"], cfg, shape["ew"])


def _bmm(shape: Shape, cfg: Config) -> TiledKernel:
    return gemm_kernel("tpu_batch_matmul", shape["B"], shape["M"], shape["N"], shape["K"], cfg, shape["ew"])


def conv_gemm(shape: Shape) -> tuple[int, int, int, float]:
    """Implicit GEMM of an NHWC conv: (M = N*OH*OW, N = Cout, K = Cin*R*S, window reuse)."""
    oh = (shape["H"] - shape["R"]) // shape["stride"] + 1 + (shape["R"] // 2) * 2 // shape["stride"]
    ow = (shape["W"] - shape["S"]) // shape["stride"] + 1 + (shape["S"] // 2) * 2 // shape["stride"]
    reuse = max(1.0, shape["R"] * shape["S"] / shape["stride"] ** 2)
    return shape["N"] * max(oh, 1) * max(ow, 1), shape["K"], shape["C"] * shape["R"] * shape["S"], reuse


def _conv(shape: Shape, cfg: Config) -> TiledKernel:
    M, N, K, reuse = conv_gemm(shape)
    return gemm_kernel("tpu_conv2d", 1, M, N, K, cfg, shape["ew"], a_reuse=reuse)


def _fused_reduce(shape: Shape, cfg: Config) -> TiledKernel:
    return gemm_kernel("tpu_matmul_reduce", 1, shape["M"], shape["N"], shape["K"], cfg, shape["ew"], reduce_rows=True)


def _tmpl(name: str, desc: str, dims: tuple[str, ...], extra: dict, define, space, flops, default: str) -> Template:  # type: ignore[no-untyped-def]
    return Template(name=name, description=desc, dims=dims, define=define, space=space, schedule=_not_cpu,
                    reference=lambda *a, **k: None, flops=flops, default_shape=default, extra_dims=extra,
                    backend="tpu_emulator")


def _gemm_flops(s: Shape) -> float:
    return 2.0 * s.get("B", 1) * s["M"] * s["N"] * s["K"]


TPU_KERNELS: dict[str, TpuKernelTemplate] = {
    "tpu_matmul": TpuKernelTemplate(
        _tmpl("tpu_matmul", "tiled bf16 matmul + ew elementwise ops, on the TPU emulator", ("M", "N", "K"), {"ew": 0},
              lambda s, d: _te_matmul(1, s["M"], s["N"], s["K"], d), lambda s, d, t: _gemm_space(s["M"], s["N"], s["K"]),
              _gemm_flops, "1024x1024x1024"),
        _matmul, lambda s: _gemm_ops(1, s["M"], s["N"], s["K"], s["ew"], False)),
    "tpu_batch_matmul": TpuKernelTemplate(
        _tmpl("tpu_batch_matmul", "tiled batched bf16 matmul on the TPU emulator", ("B", "M", "N", "K"), {"ew": 0},
              lambda s, d: _te_matmul(s["B"], s["M"], s["N"], s["K"], d),
              lambda s, d, t: _gemm_space(s["M"], s["N"], s["K"]), _gemm_flops, "12x128x128x64"),
        _bmm, lambda s: _gemm_ops(s["B"], s["M"], s["N"], s["K"], s["ew"], False)),
    "tpu_conv2d": TpuKernelTemplate(
        _tmpl("tpu_conv2d", "NHWC conv2d as an implicit GEMM on the TPU emulator", ("N", "H", "W", "C", "K", "R", "S"),
              {"stride": 1, "ew": 0}, lambda s, d: _te_matmul(1, *conv_gemm(s)[:1], conv_gemm(s)[1], conv_gemm(s)[2], d),
              lambda s, d, t: _gemm_space(*conv_gemm(s)[:3]), lambda s: 2.0 * math.prod(conv_gemm(s)[:3]),
              "8x56x56x64x64x3x3"),
        _conv, lambda s: _gemm_ops(1, *conv_gemm(s)[:3], s["ew"], False, conv=True)),
    "tpu_matmul_reduce": TpuKernelTemplate(
        _tmpl("tpu_matmul_reduce", "matmul + elementwise + row reduction (an XLA-style fusion)", ("M", "N", "K"),
              {"ew": 1}, lambda s, d: _te_matmul(1, s["M"], s["N"], s["K"], d),
              lambda s, d, t: _gemm_space(s["M"], s["N"], s["K"]), _gemm_flops, "1024x1024x1024"),
        _fused_reduce, lambda s: _gemm_ops(1, s["M"], s["N"], s["K"], s["ew"], True)),
}
TPU_TEMPLATES: dict[str, Template] = {k: v.template for k, v in TPU_KERNELS.items()}


def tiled_kernel(task, cfg: Config) -> TiledKernel:  # type: ignore[no-untyped-def]
    """The emulator's description of a task's kernel for a tile config."""
    return TPU_KERNELS[task.op].kernel(task.shape_dict, cfg)


def kernel_ops(task) -> list[OpNode]:  # type: ignore[no-untyped-def]
    """The ops of a task's kernel, for its op graph."""
    return TPU_KERNELS[task.op].ops(task.shape_dict)


# ---- random kernels from real model families (training data) --------------------------------

FAMILIES = ("resnet", "bert", "efficientnet")


def random_kernel(family: str, rng: np.random.Generator) -> tuple[str, dict[str, int]]:
    """(template name, shape) of a kernel like those of a model family."""
    if family == "resnet":
        c = int(rng.choice([64, 128, 256, 512]))
        hw = int(rng.choice([7, 14, 28, 56]))
        r = int(rng.choice([1, 3]))
        if rng.random() < 0.8:
            return "tpu_conv2d", {"N": int(rng.choice([8, 16, 32])), "H": hw, "W": hw, "C": c,
                                  "K": int(rng.choice([c, 2 * c, c // 2 or c])), "R": r, "S": r,
                                  "stride": int(rng.choice([1, 2]) if r == 3 else 1), "ew": int(rng.integers(0, 3))}
        return "tpu_matmul", {"M": int(rng.choice([8, 32, 128])), "N": 1000, "K": 2048, "ew": int(rng.integers(0, 2))}
    if family == "bert":
        seq, hid = int(rng.choice([128, 256, 384, 512])), int(rng.choice([768, 1024]))
        batch = int(rng.choice([1, 4, 8]))
        kind = rng.random()
        if kind < 0.5:
            n, k = [(hid, hid), (4 * hid, hid), (hid, 4 * hid), (3 * hid, hid)][int(rng.integers(0, 4))]
            return "tpu_matmul", {"M": batch * seq, "N": n, "K": k, "ew": int(rng.integers(0, 4))}
        if kind < 0.8:
            heads = hid // 64
            return "tpu_batch_matmul", {"B": batch * heads, "M": seq, "N": int(rng.choice([seq, 64])),
                                        "K": int(rng.choice([64, seq])), "ew": int(rng.integers(0, 2))}
        return "tpu_matmul_reduce", {"M": batch * seq, "N": hid, "K": hid, "ew": int(rng.integers(1, 4))}
    c = int(rng.choice([16, 24, 40, 80, 112, 192, 320]))
    hw = int(rng.choice([7, 14, 28, 56, 112]))
    if rng.random() < 0.7:
        return "tpu_conv2d", {"N": int(rng.choice([8, 16])), "H": hw, "W": hw, "C": c,
                              "K": int(rng.choice([c * 6, c, c // 4 or 8])), "R": 1, "S": 1, "stride": 1,
                              "ew": int(rng.integers(0, 3))}
    return "tpu_matmul_reduce", {"M": int(rng.choice([8, 16])) * hw * hw // 16, "N": c * 4, "K": c, "ew": 2}
