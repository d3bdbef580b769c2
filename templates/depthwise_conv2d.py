"""Y[N,C,OH,OW] = depthwise conv2d(X[N,C,H,W], W[C,R,S]) (channel multiplier 1), NCHW.

Each channel is filtered by its own R x S window. Few FLOPs per byte, so the schedule keeps a
tile of [ohb] rows x [owb] columns of one channel in a stack accumulator, columns vectorized
innermost (unit stride in NCHW when stride is 1), rows unrolled::

    Xp = zero-padded X            (a root stage computed once, per row block, or inlined) [pad_at]
    for <par> first, then n, c, oho                  # the outermost loop runs over threads
      for owo in OW / owb:
        acc[ohb, owb] = 0
        for r, s:  (unrolled when [unroll_rs])
          for ohi (unrolled): for owi (vectorized): acc += Xp[n, c, oh*st + r*dil, ow*st + s*dil] * W[c, r, s]
        Y[tile] = acc   (clamped to the valid region)
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Shape, Template
from autotune.templates.conv2d import conv_geometry, out_size, padded_input, place_padding_and_threads
from autotune.target import Target, current
from autotune.templates.gemm import fit as _fit


def define(shape: Shape, dtype: str) -> te.Tensor:
    N, C, H, W, R, S = (shape[d] for d in ("N", "C", "H", "W", "R", "S"))
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "depthwise_conv2d")
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((C, R, S), dtype, name="W")
    Xp = padded_input(X, Hp, Wp, pad, dtype)
    rr = te.reduce_axis(R, name="rr")
    rs = te.reduce_axis(S, name="rs")
    return te.compute(
        (N, C, OH, OW),
        lambda n, c, oh, ow: te.sum(Xp[n, c, oh * st + rr * dil, ow * st + rs * dil] * Wt[c, rr, rs], axis=(rr, rs)),
        name="Y")


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    N, C, H, W = shape["N"], shape["C"], shape["H"], shape["W"]
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "depthwise_conv2d")
    vec = (target or current()).lanes(dtype)
    has_pad = Hp > H or Wp > W or pad > 0
    par = ["none"]
    if threads > 1:
        par = [a for a, e in (("n", N), ("c", C), ("oh", OH)) if e > 1] or ["none"]
    return ConfigSpace([
        ChoiceKnob("owb", _fit(sorted({vec // 2, vec, 2 * vec, 4 * vec} | ({OW} if OW <= 4 * vec else set())), OW)),  # output columns per tile (vectorized)
        ChoiceKnob("ohb", _fit([1, 2, 4, 8], OH)),                      # output rows per tile (unrolled)
        ChoiceKnob("unroll_rs", [False, True] if shape["R"] * shape["S"] <= 64 else [False]),
        ChoiceKnob("pad_at", ["rows", "root", "inline"] if has_pad else ["none"]),
        ChoiceKnob("parallel", par),
    ], prune=code_size_prune(shape, OW))


MAX_VECTOR_LOOPS = 12  # vectorized loops per tile: each costs Numba and LLVM ~0.1 s to compile


def code_size_prune(shape: Shape, OW: int) -> Callable[[Mapping[str, Any]], str | None]:
    """The space's prune rule: the tile's body is one vectorized loop per unrolled row (times R x S
    with [unroll_rs]), twice over when the columns leave a tail; more than MAX_VECTOR_LOOPS took
    seconds to a minute to compile."""
    def prune(cfg: Mapping[str, Any]) -> str | None:
        owb = min(cfg["owb"], OW)
        loops = min(cfg["ohb"], shape["H"]) * (shape["R"] * shape["S"] if cfg["unroll_rs"] else 1) * (2 if OW % owb else 1)
        if loops <= MAX_VECTOR_LOOPS:
            return None
        return (f"the {cfg['ohb']}x{cfg['owb']} tile{' with R x S unrolled' if cfg['unroll_rs'] else ''} is "
                f"{loops} vectorized loops (at most {MAX_VECTOR_LOOPS} compile in about a second)")
    return prune


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "depthwise_conv2d")
    owb, ohb = min(cfg["owb"], OW), min(cfg["ohb"], OH)
    par = cfg["parallel"] if threads > 1 else "none"
    s.split("Y", "oh", ohb, "oho", "ohi")
    s.split("Y", "ow", owb, "owo", "owi")
    outer = ["n", "c", "oho"]
    if par != "none":
        p = {"n": "n", "c": "c", "oh": "oho"}[par]
        outer = [p] + [a for a in outer if a != p]
    s.reorder("Y", *outer, "owo", "rr", "rs", "ohi", "owi")
    s.cache_write("Y", "owo")
    if cfg["unroll_rs"]:
        s.unroll("Y", "rr")
        s.unroll("Y", "rs")
    s.unroll("Y", "ohi")
    s.vectorize("Y", "owi")
    place_padding_and_threads(s, cfg, par, outer[0])
    return CodegenOptions()


def reference(X: np.ndarray, W: np.ndarray, stride: int = 1, pad: int = 0, dilation: int = 1) -> np.ndarray:
    """Exact depthwise conv2d: a broadcast multiply-add per kernel tap (r, s)."""
    N, C, H, Wd = X.shape
    _, R, S = W.shape
    OH, OW = out_size(H, R, stride, pad, dilation), out_size(Wd, S, stride, pad, dilation)
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((N, C, OH, OW), dtype=np.result_type(X, W))
    for r in range(R):
        for q in range(S):
            h0, w0 = r * dilation, q * dilation
            win = Xp[:, :, h0:h0 + (OH - 1) * stride + 1:stride, w0:w0 + (OW - 1) * stride + 1:stride]
            out += win * W[None, :, r, q, None, None]
    return out


def torch_reference(X, W, stride=1, pad=0, dilation=1):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F
    return F.conv2d(X, W[:, None], stride=stride, padding=pad, dilation=dilation, groups=X.shape[1])


TEMPLATE = Template(
    name="depthwise_conv2d",
    description="Y[N,C,OH,OW] = depthwise conv2d(X[N,C,H,W], W[C,R,S]), NCHW, stride/pad/dilation",
    dims=("N", "C", "H", "W", "R", "S"), extra_dims={"stride": 1, "pad": 0, "dilation": 1},
    define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 2.0 * s["N"] * s["C"] * s["R"] * s["S"]
    * out_size(s["H"], s["R"], s["stride"], s["pad"], s["dilation"])
    * out_size(s["W"], s["S"], s["stride"], s["pad"], s["dilation"]),
    default_shape="1x64x56x56x3x3x1x1", torch_reference=torch_reference)
