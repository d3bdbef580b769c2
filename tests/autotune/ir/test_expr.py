"""The definitions language: what it accepts, what it rejects, and that the classic operators can
be written in it and compile (default schedule) to kernels that agree with NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.codegen import build
from autotune.errors import DefinitionError
from autotune.ir import te
from autotune.schedule import Schedule
from tests.helpers import assert_close

RNG = np.random.default_rng(1234)


def rand(shape, dtype="float32"):
    return RNG.uniform(-1, 1, shape).astype(dtype)


def run_default(out: te.Tensor, *arrays: np.ndarray) -> np.ndarray:
    """Build the default schedule (no steps) of `out` and run it."""
    k = build(Schedule(out), threads=1)
    return k(*arrays)


# ---------------------------------------------------------------------------------------------
# definitions: the pieces
# ---------------------------------------------------------------------------------------------
def test_placeholder_and_compute_basic():
    A = te.placeholder((3, 5), "float64", name="A")
    assert A.shape == (3, 5) and A.dtype == "float64" and A.is_placeholder and A.ndim == 2
    B = te.compute((3, 5), lambda i, j: A[i, j] * 2.0, name="B")
    assert not B.is_placeholder
    assert [a.name for a in B.axes] == ["i", "j"]
    assert B.dtype == "float64"
    assert te.input_tensors(B) == [A, B]


def test_reduce_axis_and_sum():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis(6, name="k")
    assert k.kind == "reduce" and k.extent == 6 and k.name == "k"
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    assert isinstance(S.body, te.Reduce) and S.body.op == "sum"
    assert S.reduce_axes == (k,)
    M = te.compute((4,), lambda i: te.max_reduce(A[i, k], axis=[k]), name="M")
    assert M.body.op == "max"


def test_select_and_cast_dtypes():
    A = te.placeholder((4,), "float32", name="A")
    sel = te.compute((4,), lambda i: te.select(A[i] > 0.0, A[i], 0.0), name="R")
    assert sel.dtype == "float32"
    c = te.compute((4,), lambda i: te.cast("float64", A[i]), name="C64")
    assert c.dtype == "float64"
    I = te.placeholder((4,), "int32", name="I")
    f = te.compute((4,), lambda i: te.cast("float32", I[i]) * 0.5, name="F")
    assert f.dtype == "float32"


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (-2,), (2.5,), ("3",), ("x",), None, (True,)])
def test_bad_shape(shape):
    with pytest.raises(DefinitionError, match="shape"):
        te.placeholder(shape, name="A")
    if shape not in ((), None):
        with pytest.raises(DefinitionError, match="shape"):
            te.compute(shape, lambda *ax: 1.0, name="B")


@pytest.mark.parametrize("dtype", ["float16", "complex64", "int8", "", "np.float32"])
def test_bad_dtype(dtype):
    with pytest.raises(DefinitionError, match=r"dtype .* is not supported"):
        te.placeholder((2,), dtype, name="A")
    A = te.placeholder((2,), name="A")
    with pytest.raises(DefinitionError, match="not supported"):
        te.cast(dtype, A[0])


def test_bad_reduce_axis_extent():
    for bad in (0, -3, 2.0, "4"):
        with pytest.raises(DefinitionError, match="extent must be a positive integer"):
            te.reduce_axis(bad, name="k")


def test_reduction_must_be_top_level():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(DefinitionError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="C")
    with pytest.raises(DefinitionError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.exp(te.max_reduce(A[i, k], axis=k)), name="C")
    k2 = te.reduce_axis(4, name="k2")
    with pytest.raises(DefinitionError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(te.sum(A[i, k], axis=k) * A[i, k2], axis=k2), name="C")


def test_reduce_over_spatial_axis_rejected():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(DefinitionError, match="reduce_axis"):
        te.compute((4,), lambda i: te.sum(A[i, i], axis=i), name="C")


def test_unreduced_reduce_axis_rejected():
    """A reduce axis used outside a reduction is a definition error, not a Numba typing error."""
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(DefinitionError, match="'k'"):
        te.compute((4,), lambda i: A[i, k], name="C")


@pytest.mark.parametrize("idx", [(0,), (0, 1, 2)])
def test_wrong_arity(idx):
    A = te.placeholder((3, 3), name="A")
    with pytest.raises(DefinitionError, match=r"'A' has 2 dimensions, indexed with \d"):
        A[idx]
    with pytest.raises(DefinitionError, match="indexed with"):
        te.compute((3,), lambda i: A[i], name="B")


def test_truth_value_is_an_error():
    A = te.placeholder((3,), name="A")
    with pytest.raises(DefinitionError, match="te.select"):
        te.compute((3,), lambda i: A[i] if A[i] > 0 else 0.0, name="B")


def test_bad_operand():
    A = te.placeholder((3,), name="A")
    with pytest.raises(DefinitionError, match="cannot use"):
        te.compute((3,), lambda i: A[i] + "x", name="B")


def test_schedule_needs_a_compute():
    A = te.placeholder((3,), name="A")
    with pytest.raises(DefinitionError, match="te.compute"):
        Schedule(A)


def test_duplicate_tensor_names_rejected():
    A1 = te.placeholder((3,), name="A")
    A2 = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A1[i] + A2[i], name="B")
    with pytest.raises(DefinitionError, match="both named 'A'"):
        Schedule(B)


# ---------------------------------------------------------------------------------------------
# the classic operators, written as definitions, compiled with the default schedule
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_definition(dtype):
    M, N, K = 7, 5, 9
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = rand((M, K), dtype), rand((K, N), dtype)
    assert_close(run_default(C, a, b), a @ b, dtype, K)


def conv2d_reference(x, w, stride, pad, dil):
    C, H, W = x.shape
    K, _, R, S = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    out = np.zeros((K, OH, OW), x.dtype)
    for r in range(R):
        for s in range(S):
            patch = xp[:, r * dil: r * dil + stride * (OH - 1) + 1: stride,
                       s * dil: s * dil + stride * (OW - 1) + 1: stride]
            out += np.einsum("kc,chw->khw", w[:, :, r, s], patch)
    return out


@pytest.mark.parametrize("stride,pad,dil", [(1, 0, 1), (2, 1, 1), (1, 2, 2)])
def test_conv2d_definition(stride, pad, dil):
    C, H, W, K, R, S = 3, 7, 6, 4, 3, 3
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    X = te.placeholder((C, H, W), name="X")
    Wt = te.placeholder((K, C, R, S), name="Wt")
    Xp = te.compute((C, H + 2 * pad, W + 2 * pad),
                    lambda c, h, w: te.select(te.all_of(h >= pad, h < H + pad, w >= pad, w < W + pad),
                                              X[c, h - pad, w - pad], 0.0), name="Xp")
    rc, rr, rs = te.reduce_axis(C, name="rc"), te.reduce_axis(R, name="rr"), te.reduce_axis(S, name="rs")
    Y = te.compute((K, OH, OW), lambda k, y, x: te.sum(
        Xp[rc, y * stride + rr * dil, x * stride + rs * dil] * Wt[k, rc, rr, rs], axis=[rc, rr, rs]), name="Y")
    x, w = rand((C, H, W)), rand((K, C, R, S))
    assert_close(run_default(Y, x, w), conv2d_reference(x, w, stride, pad, dil), "float32", C * R * S)


def test_depthwise_conv2d_definition():
    C, H, W, R, pad = 4, 6, 5, 3, 1
    X = te.placeholder((C, H, W), name="X")
    F = te.placeholder((C, R, R), name="F")
    Xp = te.compute((C, H + 2 * pad, W + 2 * pad),
                    lambda c, h, w: te.select(te.all_of(h >= pad, h < H + pad, w >= pad, w < W + pad),
                                              X[c, h - pad, w - pad], 0.0), name="Xp")
    rr, rs = te.reduce_axis(R, name="rr"), te.reduce_axis(R, name="rs")
    Y = te.compute((C, H, W), lambda c, y, x: te.sum(Xp[c, y + rr, x + rs] * F[c, rr, rs], axis=[rr, rs]), name="Y")
    x, f = rand((C, H, W)), rand((C, R, R))
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    want = np.zeros_like(x)
    for r in range(R):
        for s in range(R):
            want += xp[:, r:r + H, s:s + W] * f[:, r, s][:, None, None]
    assert_close(run_default(Y, x, f), want, "float32", R * R)


def test_max_pool_definition():
    C, H, W = 3, 9, 8
    X = te.placeholder((C, H, W), name="X")
    OH, OW = (H - 3) // 2 + 1, (W - 3) // 2 + 1
    rr, rs = te.reduce_axis(3, name="rr"), te.reduce_axis(3, name="rs")
    P = te.compute((C, OH, OW), lambda c, y, x: te.max_reduce(X[c, y * 2 + rr, x * 2 + rs], axis=[rr, rs]), name="P")
    x = rand((C, H, W))
    want = np.full((C, OH, OW), -np.inf, np.float32)
    for r in range(3):
        for s in range(3):
            want = np.maximum(want, x[:, r:r + 2 * (OH - 1) + 1:2, s:s + 2 * (OW - 1) + 1:2])
    np.testing.assert_array_equal(run_default(P, x), want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_definition(dtype):
    M, N = 5, 13
    X = te.placeholder((M, N), dtype, name="X")
    k1, k2 = te.reduce_axis(N, name="k1"), te.reduce_axis(N, name="k2")
    mx = te.compute((M,), lambda i: te.max_reduce(X[i, k1], axis=k1), name="mx")
    e = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]), name="e")
    s = te.compute((M,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    out = te.compute((M, N), lambda i, j: e[i, j] / s[i], name="out")
    assert out.dtype == dtype
    x = rand((M, N), dtype) * 5
    ex = np.exp(x - x.max(axis=1, keepdims=True))
    assert_close(run_default(out, x), ex / ex.sum(axis=1, keepdims=True), dtype, N)


def test_layernorm_definition():
    M, N, eps = 4, 11, 1e-5
    X = te.placeholder((M, N), name="X")
    g = te.placeholder((N,), name="g")
    b = te.placeholder((N,), name="b")
    k1, k2 = te.reduce_axis(N, name="k1"), te.reduce_axis(N, name="k2")
    S = te.compute((M,), lambda i: te.sum(X[i, k1], axis=k1), name="S")
    mean = te.compute((M,), lambda i: S[i] * (1.0 / N), name="mean")
    V = te.compute((M,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2), name="V")
    Y = te.compute((M, N), lambda i, j: (X[i, j] - mean[i]) / te.sqrt(V[i] * (1.0 / N) + eps) * g[j] + b[j],
                   name="Y")
    x, gg, bb = rand((M, N)), rand((N,)), rand((N,))
    mu = x.mean(axis=1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps) * gg + bb
    assert_close(run_default(Y, x, gg, bb), want, "float32", N)


def test_fused_dense_bias_relu_definition():
    M, N, K = 6, 10, 8
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis(K, name="k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    Y = te.compute((M, N), lambda i, j: te.max(D[i, j] + bias[j], 0.0), name="Y")
    x, w, b = rand((M, K)), rand((N, K)), rand((N,))
    assert_close(run_default(Y, x, w, b), np.maximum(x @ w.T + b, 0), "float32", K)


def test_elementwise_math_and_cast():
    N = 9
    A = te.placeholder((N,), "float64", name="A")
    I = te.placeholder((N,), "int32", name="I")
    Y = te.compute((N,), lambda i: te.sigmoid(A[i]) + te.tanh(A[i]) * te.abs(A[i]) - te.cast("float64", I[i]) / 3.0
                   + te.min(A[i], 0.25), name="Y")
    a = rand((N,), "float64")
    ii = RNG.integers(-5, 5, N).astype(np.int32)
    want = 1 / (1 + np.exp(-a)) + np.tanh(a) * np.abs(a) - ii / 3.0 + np.minimum(a, 0.25)
    assert_close(run_default(Y, a, ii), want, "float64")


def test_kernel_checks_its_inputs():
    from autotune.errors import ShapeError
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    k = build(Schedule(B))
    with pytest.raises(ShapeError, match="shape"):
        k(np.zeros(5, np.float32))
    with pytest.raises(ShapeError, match="dtype"):
        k(np.zeros(4, np.float64))
    with pytest.raises(ShapeError, match="takes 1 arrays"):
        k(np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_every_dtype_has_an_item_size() -> None:
    from autotune.dtypes import DTYPES, ITEMSIZE
    assert set(ITEMSIZE) == set(DTYPES)
    assert ITEMSIZE["float32"] == 4 and ITEMSIZE["float64"] == 8
