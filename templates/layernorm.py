"""y = (x - mean) / sqrt(var + eps) * gamma + beta over the rows of x[M, N] (eps = 1e-5).

Compute definition: the two-pass variance (no E[x^2] - mean^2 cancellation). Each stage has one
consumer, so all can be computed at a loop of the output; the row sum is computed twice for that
reason, in one loop where both are computed per row (the code generator fuses the two sibling
loops: autotune.codegen.fuse)::

    sa[i]   = sum_j x[i, j]
    var[i]  = sum_j (x[i, j] - sa[i] / N)^2
    rs[i]   = 1 / sqrt(var[i] / N + eps)
    sb[i]   = sum_j x[i, j]
    y[i, j] = (x[i, j] - sb[i] / N) * rs[i] * gamma[j] + beta[j]

Schedule: rows split into blocks of [rows] (the block loop runs over threads when [parallel]);
the row statistics computed at the block loop or per row ([attach]) into small local buffers, the
row loop of y vectorized, and `reassoc` on so LLVM vectorizes the row sums; [stream] and
[prefetch] as softmax's (x's row some rows ahead prefetched after each row's first sum).
"""
from __future__ import annotations

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import Config
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Shape, Template
from autotune.templates.softmax import row_loop, row_presets, row_space

EPS = 1e-5


def define(shape: Shape, dtype: str) -> te.Tensor:
    M, N = shape["M"], shape["N"]
    x = te.placeholder((M, N), dtype, name="x")
    gamma = te.placeholder((N,), dtype, name="gamma")
    beta = te.placeholder((N,), dtype, name="beta")
    ka, kv, kb = (te.reduce_axis(N, name=n) for n in ("ka", "kv", "kb"))
    inv_n = te.const(1.0 / N, dtype)
    sa = te.compute((M,), lambda i: te.sum(x[i, ka], axis=ka), name="sa")
    var = te.compute((M,), lambda i: te.sum((x[i, kv] - sa[i] * inv_n) * (x[i, kv] - sa[i] * inv_n), axis=kv),
                     name="var")
    rs = te.compute((M,), lambda i: te.const(1.0, dtype) / te.sqrt(var[i] * inv_n + te.const(EPS, dtype)), name="rs")
    sb = te.compute((M,), lambda i: te.sum(x[i, kb], axis=kb), name="sb")
    return te.compute((M, N), lambda i, j: (x[i, j] - sb[i] * inv_n) * rs[i] * gamma[j] + beta[j], name="y")


space = row_space  # the knobs of a row-wise op: rows per block, where statistics go, parallel, stream
presets = row_presets


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    rows = min(cfg["rows"], shape["M"])
    s.split("y", "i", rows, "io", "ii")
    at = "io" if cfg["attach"] == "block" else "ii"
    s.compute_at("rs", "y", at)
    s.compute_at("sb", "y", at)
    s.compute_at("var", "rs", "i")
    s.compute_at("sa", "var", "i")
    s.vectorize("y", "j")
    if cfg["parallel"] and threads > 1:
        s.parallel("y", "io")
    if cfg["stream"]:
        s.stream("y")
    if cfg["prefetch"]:
        s.prefetch("y", row_loop(rows), "x", cfg["prefetch"])
    return CodegenOptions(reassoc=True)


def reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return ((x - mean) / np.sqrt(var + x.dtype.type(EPS)) * gamma + beta).astype(x.dtype)


def torch_reference(x, gamma, beta):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F
    return F.layer_norm(x, (x.shape[1],), gamma, beta, eps=1e-5)


TEMPLATE = Template(
    name="layernorm", description="y[M,N] = layer normalization of x[M,N] over each row, scaled by gamma[N], "
                                  "shifted by beta[N] (eps 1e-5)",
    dims=("M", "N"), define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 8.0 * s["M"] * s["N"], default_shape="4096x1024", presets=presets, torch_reference=torch_reference)
