"""softmax: the row max (vector partial maxima, a tree over them, then the tail columns), exp's
accuracy, and rows with -inf, huge and very negative values."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from autotune.codegen import build
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.target import current
from autotune.task import Task
from autotune.templates import softmax

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_row_max_covers_the_chunks_and_the_tail(dtype: str) -> None:
    V = 2 * current().lanes(dtype)
    N = 3 * V + V - 1                       # full chunks and the longest tail
    t = Task.create("softmax", {"M": 3, "N": N}, dtype, threads=1)
    x = np.zeros((3, N), dtype)
    x[0, V + 1] = 50.0                      # the max inside the chunks (the tree's)
    x[1, 3 * V] = 50.0                      # the first tail column (the tree's step)
    x[2, N - 1] = 50.0                      # the last tail column
    k = t.build({"rows": 1, "attach": "row", "parallel": False})
    got = k(x)
    np.testing.assert_allclose(got, t.reference([x]), rtol=1e-5 if dtype == "float32" else 1e-12)
    assert np.allclose(got.max(axis=1), 1.0)


@pytest.mark.parametrize("dtype, bound, unfused", [("float32", 1.5e-7, 1.5e-7), ("float64", 3e-16, 3e-16)])
def test_exp_is_accurate_on_a_fine_grid_in_a_kernel_compiled_like_softmax(dtype: str, bound: float,
                                                                           unfused: float) -> None:
    """exp_nonpos's max relative error against exp in long double on 10**6 points from its clamp to
    0, compiled with reassoc as softmax is (`vexp_nonpos`, whose instructions carry no reassoc;
    measured on AVX-512 and AVX2: 7.4e-8 float32, 1.35e-16 float64; SSE4.2, no FMA (`unfused`):
    9.4e-8 and 1.8e-16). Below the clamp, -inf included: about the smallest normal number, never
    0, a denormal or NaN."""
    bound = bound if current().fma else unfused
    clamp = softmax._SPEC[dtype][0]
    n = 1_000_001
    X = te.placeholder((n,), dtype, name="X")
    s = Schedule(te.compute((n,), lambda i: softmax.exp_nonpos(X[i], dtype), name="Y"))
    s.vectorize("Y", "i")
    kernel = build(s, reassoc=True)
    x = np.linspace(clamp, 0.0, n).astype(dtype)
    want = np.exp(x.astype(np.longdouble))
    err = np.abs(kernel(x).astype(np.longdouble) - want) / want
    assert float(err.max()) < bound
    tiny = np.finfo(dtype).tiny
    below = np.resize(np.array([-np.inf, -1e30, clamp - 1.0, clamp * 4], dtype), n)
    got = kernel(below)
    assert np.all(got >= tiny * 0.99) and np.all(got <= tiny * 1.01)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", [{"rows": 1, "attach": "row", "parallel": False},
                                 {"rows": 4, "attach": "block", "parallel": True}])
def test_rows_with_minus_inf_huge_and_very_negative_values_match_the_reference(dtype: str, cfg: dict) -> None:
    V = 2 * current().lanes(dtype)
    N = 4 * V + 3
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, N)).astype(dtype)
    big = np.finfo(dtype).max / 2
    x[0, ::3] = -np.inf                         # masked entries: exp(-inf) = 0
    x[1] = np.linspace(-1e30, 1e30, N)          # one entry dominates
    x[2, :] = -big
    x[2, 5] = big                               # x - max overflows to -inf
    x[3] = np.linspace(-2000.0, 0.0, N)         # most exps below the clamp
    x[4] = 1e4                                  # a constant row: 1/N each
    x[5] = rng.standard_normal(N) * 50 - 1e6    # large offset, spread of ~100
    t = Task.create("softmax", {"M": 8, "N": N}, dtype, threads=2)
    k = t.build(cfg)
    k.check_finite = False  # the kernel itself on -inf (a mask), not the NumPy reference a checked call runs
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = k(x)
    want = t.reference([x])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-30)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_prints_the_clamped_exp_and_other_exps_keep_the_general_one(dtype: str) -> None:
    """exp(min(max(v, clamp), 0)) is printed as vexp_nonpos (its argument already in its domain);
    an exp whose argument is not clamped on both sides, or clamped below the domain, stays vexp."""
    from autotune.codegen.source import generate_source
    t = Task.create("softmax", {"M": 4, "N": 40}, dtype, threads=1)
    sched, opts = t.schedule(t.space().validate({"rows": 1, "attach": "row", "parallel": False}))
    src = generate_source(sched, reassoc=opts.reassoc)
    assert "vexp_nonpos(min(max(" in src and "vexp(" not in src
    X = te.placeholder((8,), dtype, name="X")
    clamp = softmax._SPEC[dtype][0]
    for body, helper in [(lambda i: te.exp(te.max(X[i], te.const(clamp, dtype))), "vexp("),
                         (lambda i: te.exp(te.min(te.max(X[i], te.const(clamp * 2, dtype)), te.const(0.0, dtype))), "vexp("),
                         (lambda i: te.exp(te.min(te.max(X[i], te.const(clamp, dtype)), te.const(1.0, dtype))), "vexp("),
                         (lambda i: te.exp(te.max(te.min(X[i], te.const(0.0, dtype)), te.const(-3.0, dtype))), "vexp_nonpos(")]:
        assert helper in generate_source(Schedule(te.compute((8,), body, name="Y")))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_clamped_exp_loop_is_vectorized_without_calls_or_conversions(dtype: str) -> None:
    """exp_nonpos's loop runs on vectors of the target's full width, calls nothing, and rounds n by
    the added constant: no float-to-int conversion (cvt) and no rounding instruction (round/rndscale)."""
    import re
    X = te.placeholder((1024,), dtype, name="X")
    s = Schedule(te.compute((1024,), lambda i: softmax.exp_nonpos(X[i], dtype), name="Y"))
    s.vectorize("Y", "i")
    main = build(s, reassoc=True).main
    sig = main.signatures[0]
    asm, llvm = main.inspect_asm(sig).split(".Lfunc_end0")[0], main.inspect_llvm(sig)
    assert f"<{current().lanes(dtype)} x {'float' if dtype == 'float32' else 'double'}>" in llvm
    assert not re.search(r"\bcall", asm), re.findall(r"\bcall\S*\s+\S+", asm)
    assert not re.search(r"\tv?(cvt\w*|round\w*|rndscale\w*)\t", asm), re.findall(r"\tv?(?:cvt|round|rndscale)\w*", asm)


@pytest.mark.parametrize("rows, streamed_first", [(4096, True), (2048, False), (8, False)])
def test_row_presets_stream_an_output_of_half_the_l3_first(rows: int, streamed_first: bool) -> None:
    """A 16 MiB output on a 32 MiB L3 is streamed first (measure/experiments/RESULTS.md), an 8 MiB
    one is not; the other way comes second, so a search measures both first."""
    from autotune.target import Target
    target = Target.named("avx2", l3=32 << 20)
    presets = softmax.row_presets({"M": rows, "N": 1024}, "float32", 2, target)
    assert [p["stream"] for p in presets] == [streamed_first, not streamed_first]
    assert presets[0] == {"rows": min(8, rows), "attach": "row", "parallel": True, "stream": streamed_first,
                          "prefetch": 2}
    assert softmax.row_presets({"M": 64, "N": 8}, "float32", 1, target) == [
        {"rows": 8, "attach": "row", "parallel": False, "stream": False, "prefetch": 2}]  # rows of 32 bytes: never streamed
