"""Y[N,C,OH,OW] = max pooling of X[N,C,H,W] over R x S windows, with stride, padding and dilation.

NaN: the compiled window max may drop a NaN (fast-math nnan); a tuned op answers inputs holding
NaN or Inf with the NumPy reference instead (check_finite, the table in templates/__init__.py).

Padding contributes the lowest finite value of the dtype (so it never wins a max). The
schedule is depthwise_conv2d's: a stack tile of [ohb] rows x [owb] columns of one channel,
columns vectorized (vmaxps), rows unrolled, the padded input kept as a root stage, computed per
row block, or inlined [pad_at]; see templates/depthwise_conv2d.py for the knobs.
"""
from __future__ import annotations

import numpy as np

from autotune.ir import te
from autotune.templates import depthwise_conv2d
from autotune.templates.base import Shape, Template
from autotune.templates.conv2d import conv_geometry, out_size


def define(shape: Shape, dtype: str) -> te.Tensor:
    N, C, H, W, R, S = (shape[d] for d in ("N", "C", "H", "W", "R", "S"))
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "pool2d")
    X = te.placeholder((N, C, H, W), dtype, name="X")
    if pad == 0 and Hp <= H and Wp <= W:
        Xp = X
    else:
        low = te.const(float(np.finfo(dtype).min), dtype)
        Xp = te.compute(
            (N, C, Hp, Wp),
            lambda n, c, hp, wp: te.select(te.all_of(hp >= pad, hp < H + pad, wp >= pad, wp < W + pad),
                                           X[n, c, hp - pad, wp - pad], low),
            name="Xp")
    rr = te.reduce_axis(R, name="rr")
    rs = te.reduce_axis(S, name="rs")
    return te.compute(
        (N, C, OH, OW),
        lambda n, c, oh, ow: te.max_reduce(Xp[n, c, oh * st + rr * dil, ow * st + rs * dil], axis=(rr, rs)),
        name="Y")


def reference(X: np.ndarray, *, R: int = 2, S: int = 2, stride: int = 1, pad: int = 0,
              dilation: int = 1) -> np.ndarray:
    """Exact max pooling: a running maximum over the R x S strided views."""
    N, C, H, W = X.shape
    OH, OW = out_size(H, R, stride, pad, dilation), out_size(W, S, stride, pad, dilation)
    low = np.finfo(X.dtype).min
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=low)
    out = np.full((N, C, OH, OW), low, dtype=X.dtype)
    for r in range(R):
        for q in range(S):
            h0, w0 = r * dilation, q * dilation
            np.maximum(out, Xp[:, :, h0:h0 + (OH - 1) * stride + 1:stride, w0:w0 + (OW - 1) * stride + 1:stride],
                       out=out)
    return out


TEMPLATE = Template(
    name="pool2d",
    description="Y[N,C,OH,OW] = max pooling of X[N,C,H,W] over RxS windows, NCHW, stride/pad/dilation",
    dims=("N", "C", "H", "W", "R", "S"), extra_dims={"stride": 1, "pad": 0, "dilation": 1},
    define=define, space=depthwise_conv2d.space, schedule=depthwise_conv2d.schedule, reference=reference,
    flops=lambda s: 1.0 * s["N"] * s["C"] * s["R"] * s["S"]   # comparisons
    * out_size(s["H"], s["R"], s["stride"], s["pad"], s["dilation"])
    * out_size(s["W"], s["S"], s["stride"], s["pad"], s["dilation"]),
    default_shape="1x64x112x112x3x3x2x1",
    metric="GOP/s")
