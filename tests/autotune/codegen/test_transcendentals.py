"""te.exp, te.log, te.tanh, te.sigmoid and te.sqrt in kernels: accurate over the whole float32 and
float64 ranges (against long double), NumPy's answers on special values (0, -0, denormals, huge
values, overflow, +-inf, NaN), and inline vector code (no libm call in the loop). exp, log, tanh
and sigmoid are autotune.codegen.runtime's vexp, vlog, vtanh, vsigmoid; sqrt is Numba's
llvm.sqrt. Also a tanh-GELU written with te.compute against NumPy."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.target import current

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

FUNCS = ("exp", "log", "tanh", "sigmoid", "sqrt")
LD = np.longdouble

# Max relative error (normal results) against long double, measured on this file's points with
# FMA (AVX2, AVX-512) and without (SSE4.2), as multiples of the dtype's eps (float32 1.19e-7,
# float64 2.22e-16); the bounds leave a margin above the worst measured. NumPy's own functions
# measured 1.7 (exp), 2.1 (log), 0.9 (tanh) eps for float32 and 0.6, 0.6, 0.8 eps for float64.
#   func      float32 (FMA / no FMA)    float64 (FMA / no FMA)
#   exp       0.63 / 0.84               0.61 / 0.78
#   log       0.68 / 0.68               0.68 / 0.68
#   tanh      1.80 / 1.80               1.71 / 1.71
#   sigmoid   1.53 / 1.61               1.53 / 1.53
#   sqrt      0.50 / 0.50               0.50 / 0.50 (correctly rounded)
BOUND_EPS = {"exp": 1.0, "log": 1.0, "tanh": 2.5, "sigmoid": 2.0, "sqrt": 0.5}
# results below the smallest normal number (exp, sigmoid): absolute error in denormal steps
DENORMAL_STEPS = 1.0


def kernel_of(func: str, dtype: str, n: int, *, reassoc: bool = False):  # type: ignore[no-untyped-def]
    X = te.placeholder((n,), dtype, name="X")
    s = Schedule(te.compute((n,), lambda i: getattr(te, func)(X[i]), name="Y"))
    s.vectorize("Y", "i")
    return build(s, reassoc=reassoc)


def reference(func: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(LD)
    with np.errstate(all="ignore"):
        if func == "sigmoid":
            return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        return getattr(np, func)(x)


def points(func: str, dtype: str, n: int) -> np.ndarray:
    """Every finite bit pattern equally likely (the whole range, denormals, both signs), a dense
    grid over where the function varies, and values spread over all magnitudes near 0."""
    rng = np.random.default_rng(41)
    it = np.uint32 if dtype == "float32" else np.uint64
    x = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dtype)
    lo, hi = {"exp": (-110, 90) if dtype == "float32" else (-750, 712), "log": (0, 10), "tanh": (-25, 25),
              "sigmoid": (-120, 120) if dtype == "float32" else (-760, 760), "sqrt": (0, 10)}[func]
    grid = np.linspace(lo, hi, n).astype(dtype)
    tiny = rng.standard_normal(n) * 10.0 ** rng.uniform(-45 if dtype == "float32" else -320, 0, n)
    with np.errstate(all="ignore"):
        x = np.concatenate([x[np.isfinite(x)], grid, tiny.astype(dtype), -tiny.astype(dtype)])
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("func", FUNCS)
def test_accurate_over_the_whole_range(func: str, dtype: str) -> None:
    """Also compiled with reassoc: the functions' instructions carry their own flags, so the
    kernel's reassoc leaves their error unchanged."""
    fi = np.finfo(dtype)
    x = points(func, dtype, 100_000)
    want = reference(func, x)
    for reassoc in (False, True):
        got = kernel_of(func, dtype, x.size, reassoc=reassoc)(x).astype(LD)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), x[np.isnan(got) != nan][:5]
        over = ~nan & (np.abs(want) > LD(fi.max))          # beyond the dtype: inf, as NumPy gives
        assert np.all(np.isinf(got[over]) & (np.sign(got[over]) == np.sign(want[over])))
        normal = ~nan & ~over & (np.abs(want) >= LD(fi.tiny))
        rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
        assert float(rel.max()) <= BOUND_EPS[func] * float(fi.eps), (reassoc, float(rel.max()) / float(fi.eps))
        small = ~nan & (np.abs(want) < LD(fi.tiny))
        steps = np.abs(got[small] - want[small]) / LD(fi.smallest_subnormal)
        assert not steps.size or float(steps.max()) <= DENORMAL_STEPS


def special(dtype: str) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Inputs and the exact results NumPy gives (sigmoid: 1 / (1 + exp(-x)) in long double)."""
    fi = np.finfo(dtype)
    den, big = float(fi.smallest_subnormal), float(fi.max)
    f32 = dtype == "float32"
    x = [0.0, -0.0, den, -den, big, -big, np.inf, -np.inf, np.nan, 1.0, -1.0,
         88.8 if f32 else 709.8,            # exp overflows to inf
         -103.0 if f32 else -745.0,         # exp is a denormal
         -104.0 if f32 else -746.0]         # exp underflows to 0
    x_arr = np.array(x, dtype)
    want = {}
    for func in FUNCS:
        with np.errstate(all="ignore"):
            r = reference(func, x_arr).astype(dtype)
        want[func] = r.tolist()
    return x_arr, want


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("func", FUNCS)
def test_special_values_give_numpys_answers(func: str, dtype: str) -> None:
    """0, -0 (with its sign: tanh(-0) = sqrt(-0) = -0, log(+-0) = -inf), denormals, +-max, +-inf,
    NaN, exp's overflow to inf and underflow to a denormal and to 0, log of a negative number
    (NaN): the kernel gives what NumPy's function gives for each (sigmoid: the exact value; NumPy's
    1 / (1 + exp(-x)) gives 0 where it is a denormal)."""
    x, want = special(dtype)
    n = 64                                   # long enough to run the vector loop
    xs = np.resize(x, n)
    got = kernel_of(func, dtype, n)(xs)[:x.size]
    w = np.array(want[func], dtype)
    same = (got == w) & (np.signbit(got) == np.signbit(w)) | (np.isnan(got) & np.isnan(w))
    fi = np.finfo(dtype)
    with np.errstate(invalid="ignore"):
        close = np.isfinite(w) & (np.abs(got - w) <= np.maximum(2 * fi.eps * np.abs(w), fi.smallest_subnormal))
    assert np.all(same | close), list(zip(x[~(same | close)], got[~(same | close)], w[~(same | close)]))
    if func != "sigmoid":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            npy = getattr(np, func)(x)
        assert np.all((np.isnan(got) == np.isnan(npy)) & (np.isinf(got) == np.isinf(npy)))


def kernel_asm_and_llvm(func: str, dtype: str) -> tuple[str, str]:
    main = kernel_of(func, dtype, 1024).main
    sig = main.signatures[0]
    return main.inspect_asm(sig).split(".Lfunc_end0")[0], main.inspect_llvm(sig)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("func", FUNCS)
def test_a_loop_applying_the_function_is_vectorized_without_calls(func: str, dtype: str) -> None:
    """The loop runs on vectors of the target's full width (<16 x float> on AVX-512, <8 x float> on
    AVX2, <4 x float> on SSE4.2) and the kernel calls nothing: no expf, logf or tanhf."""
    asm, llvm = kernel_asm_and_llvm(func, dtype)
    elem = "float" if dtype == "float32" else "double"
    lanes = current().lanes(dtype)
    assert f"<{lanes} x {elem}>" in llvm
    assert not re.search(r"\bcall", asm), re.findall(r"\bcall\S*\s+\S+", asm)
    assert not re.search(r"\b(exp|log|tanh)f?\b", asm)
    # packed arithmetic (ps/pd), the width of the target
    suffix = "ps" if dtype == "float32" else "pd"
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[current().vector_bits]
    assert re.search(rf"\tv?(mul|fmadd\w*|sqrt){suffix}\t[^\n]*%{reg}", asm)


def test_the_printed_kernel_calls_the_runtime_helpers() -> None:
    A = te.placeholder((8,), name="A")
    K = te.placeholder((8,), "int64", name="K")
    out = te.compute((8,), lambda i: te.exp(A[i]) + te.log(A[i]) + te.tanh(A[i]) + te.sigmoid(A[i])
                     + te.sqrt(A[i]) + te.exp(K[i]), name="B")
    src = generate_source(Schedule(out))
    assert "import KernelPipeline, healing_njit, stack_empty, vexp, vlog, vsigmoid, vtanh\n" in src
    assert "vexp(A[i]) + vlog(A[i]) + vtanh(A[i]) + vsigmoid(A[i]) + np.sqrt(A[i]) + vexp(np.float64(K[i]))" in src
    a = np.linspace(0.5, 3.0, 8).astype(np.float32)
    k = np.arange(8, dtype=np.int64)
    got = build(Schedule(out))(a, k)
    want = np.exp(a) + np.log(a) + np.tanh(a) + 1 / (1 + np.exp(-a)) + np.sqrt(a) + np.exp(k)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def gelu(shape: tuple[int, int], dtype: str) -> te.Tensor:
    X = te.placeholder(shape, dtype, name="X")
    c = float(np.sqrt(2.0 / np.pi))
    return te.compute(shape, lambda i, j: 0.5 * X[i, j] * (1.0 + te.tanh(c * (X[i, j] + 0.044715 * X[i, j] * X[i, j] * X[i, j]))),
                      name="Y")


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-6), ("float64", 1e-14)])
def test_a_tanh_gelu_definition_matches_numpy_and_calls_nothing(dtype: str, rtol: float) -> None:
    """The fused tanh-GELU of issue 41 (its speed against NumPy's three passes is measured
    elsewhere): NumPy's answer within a few eps, and no call left in the vector loop."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((32, 96)) * 4).astype(dtype)
    x[0, :6] = [0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0]
    s = Schedule(gelu(x.shape, dtype))
    s.vectorize("Y", "j")
    k = build(s)
    c = np.sqrt(np.asarray(2.0 / np.pi, dtype))
    want = 0.5 * x * (1 + np.tanh(c * (x + np.asarray(0.044715, dtype) * x ** 3)))
    # where 1 + tanh cancels (x below about -3) NumPy's answer has only an absolute accuracy too
    np.testing.assert_allclose(k(x), want, rtol=rtol, atol=32 * float(np.finfo(dtype).eps))
    asm = k.main.inspect_asm(k.main.signatures[0]).split(".Lfunc_end0")[0]
    assert not re.search(r"\bcall", asm)
