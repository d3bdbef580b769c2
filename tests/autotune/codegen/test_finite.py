"""all_finite: the compiled one-read check a tuned op runs on its inputs agrees with
np.isfinite(a).all() wherever NaN or Inf sits (vector body or remainder), at the extremes of the
type, and for the arrays it hands to NumPy (integers, float16, non-contiguous, empty, 0-d)."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.codegen.finite import all_finite
from autotune.codegen.invoke import NONFINITE, OVERLAP, RAN, STRIDED


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (37,), (1024,), (9, 13), (2, 3, 5, 7)])
def test_every_position_of_nan_and_inf_is_found(dtype, shape):
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    assert all_finite(a)
    for pos in sorted({0, a.size // 2, a.size - 1}):
        for bad in (np.nan, np.inf, -np.inf):
            b = a.copy()
            b.flat[pos] = bad
            assert not all_finite(b), (pos, bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extremes_of_the_type_are_finite(dtype):
    info = np.finfo(dtype)
    a = np.array([info.max, -info.max, info.tiny, info.smallest_subnormal, -0.0, 0.0] * 40, dtype)
    assert all_finite(a)  # a sum of x * 0 cannot overflow where a plain sum would


def test_other_arrays_agree_with_numpy():
    assert all_finite(np.arange(7)) and all_finite(np.ones(3, bool))
    assert all_finite(np.ones(3, np.float16)) and not all_finite(np.array([1, np.inf], np.float16))
    strided = np.ones((4, 6), np.float32)[:, ::2]
    assert all_finite(strided)
    strided[1, 1] = np.nan
    assert not all_finite(strided)
    assert all_finite(np.zeros((0, 3), np.float32))
    assert all_finite(np.array(2.0)) and not all_finite(np.array(np.nan))


def test_the_checked_trampoline_runs_the_kernel_only_on_finite_inputs():
    """Invoker.checked: the inputs' check and the kernel in one compiled call; integer inputs are
    never checked, an output or scratch array after the inputs never either."""
    import numba

    from autotune.codegen.invoke import invoker_for

    @numba.njit("void(float32[::1], int64[::1], float64[::1], float64[::1])", no_cpython_wrapper=True)
    def add(x, n, y, out):
        for i in range(out.size):
            out[i] = x[i] + n[i] + y[i]
    call = invoker_for(add).checked(3)
    x, n, y = np.ones(5, np.float32), np.arange(5), np.full(5, 2.0)
    out = np.zeros(5)
    assert call((x, n, y), (out,)) == RAN and out.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    for i, bad in ((0, np.nan), (2, np.inf), (2, -np.inf)):
        arrays = [x.copy(), n, y.copy()]
        arrays[i][4] = bad
        out[:] = -1.0
        assert call(tuple(arrays), (out,)) == NONFINITE and (out == -1.0).all(), (i, bad)  # the kernel did not run
    out[:] = np.nan  # an output holding NaN is no input's fault
    assert call((x, n, y), (out,)) == RAN and np.isfinite(out).all()


def test_the_output_checked_trampoline_runs_the_kernel_then_looks_at_its_output():
    """Invoker.checked_output: the kernel runs on any inputs; NONFINITE when its output then holds
    NaN or Inf (an input's, or an overflow of finite ones), RAN otherwise; an overlapping output or
    a strided input still runs nothing."""
    import numba

    from autotune.codegen.invoke import invoker_for

    @numba.njit("void(float32[::1], float32[::1], float32[::1])", no_cpython_wrapper=True)
    def mul(x, y, out):
        for i in range(out.size):
            out[i] = x[i] * y[i]
    call = invoker_for(mul).checked_output(2)
    x, y, out = np.full(5, 2.0, np.float32), np.full(5, 3.0, np.float32), np.zeros(5, np.float32)
    assert call((x, y), (out,)) == RAN and (out == 6.0).all()
    for bad in (np.nan, np.inf, -np.inf):
        z = x.copy()
        z[4] = bad
        assert call((z, y), (out,)) == NONFINITE and out[:4].tolist() == [6.0] * 4  # it ran
    big = np.full(5, 3e38, np.float32)
    assert call((big, y), (out,)) == NONFINITE and np.isinf(out).all()  # finite inputs, an overflow
    buf = np.zeros(10, np.float32)
    assert call((buf[:5], y), (buf[2:7],)) == OVERLAP
    assert call((np.zeros(10, np.float32)[::2], y), (out,)) == STRIDED


def test_the_checked_trampoline_runs_nothing_on_an_output_that_overlaps_an_input():
    """Invoker.checked: an output sharing memory with an input (a tuned op's out=) is refused in the
    same compiled call; arrays side by side in one buffer are apart."""
    import numba

    from autotune.codegen.invoke import invoker_for

    @numba.njit("void(float64[::1], float64[::1])", no_cpython_wrapper=True)
    def double(x, out):
        for i in range(out.size):
            out[i] = 2.0 * x[i]
    call = invoker_for(double).checked(1)
    buf = np.arange(12.0)
    for x, out in ((buf[:6], buf[3:9]), (buf[3:9], buf[:6]), (buf[:6], buf[:6]), (buf[2:4], buf[:6])):
        before = buf.copy()
        assert call((x,), (out,)) == OVERLAP and (buf == before).all()
    assert call((buf[:6],), (buf[6:],)) == RAN and buf[6:].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize("checked", [True, False])
def test_the_trampolines_run_nothing_on_an_input_that_is_not_c_contiguous(checked: bool) -> None:
    """Invoker.checked and .apart: the compiled entry's unboxing takes any strides, so a transposed
    or sliced view of the kernel's shape and dtype is refused (STRIDED) in the same compiled call;
    extents of 1 take any stride (NumPy's flag), an empty array is contiguous."""
    import numba

    from autotune.codegen.invoke import invoker_for

    @numba.njit("void(float32[:, ::1], float32[:, ::1])", no_cpython_wrapper=True)
    def copy(x, out):
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = x[i, j]
    inv = invoker_for(copy)
    call = inv.checked(1) if checked else inv.apart(1)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = np.full((4, 4), -1.0, np.float32)
    for view in (x.T, np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2], np.arange(32, dtype=np.float32).reshape(8, 4)[::2]):
        assert call((view,), (out,)) == STRIDED and (out == -1.0).all()
    column = np.arange(8, dtype=np.float32).reshape(8, 1)[::2]  # strides (32, 4) of shape (4, 1): not C-contiguous
    assert not column.flags.c_contiguous and call((column,), (np.empty((4, 1), np.float32),)) == STRIDED
    row = np.arange(8, dtype=np.float32).reshape(2, 4)[:1]  # shape (1, 4): any first stride
    assert row.flags.c_contiguous and call((row,), (np.empty((1, 4), np.float32),)) == RAN
    assert call((np.zeros((0, 4), np.float32)[:, ::1],), (np.empty((0, 4), np.float32),)) == RAN
    assert call((x,), (out,)) == RAN and (out == x).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_team_check_of_a_large_input_finds_a_bad_value_in_any_chunk(dtype: str) -> None:
    """parallel_finite_check: arrays from PARALLEL_BYTES on are checked in chunks on the team's
    threads; a NaN or ±Inf in the first, a middle or the last (partial) chunk is found, smaller
    arrays take the one-thread check."""
    from autotune.codegen.finite import PARALLEL_BYTES, parallel_finite_check
    from autotune.codegen.invoke import FINITE_CHUNK
    check = parallel_finite_check(np.dtype(dtype), 2)
    n = 5 * FINITE_CHUNK + 17                       # a partial chunk at the end
    assert n * np.dtype(dtype).itemsize >= PARALLEL_BYTES
    x = np.ones((n,), dtype).reshape(n, 1)
    assert check(x)
    for at, bad in ((0, np.nan), (2 * FINITE_CHUNK + 5, np.inf), (n - 1, -np.inf), (4 * FINITE_CHUNK - 1, np.nan)):
        y = x.copy()
        y[at, 0] = bad
        assert not check(y), (at, bad)
    small = np.ones(8, dtype)
    small[3] = np.nan
    assert not check(small)
    assert parallel_finite_check(np.dtype(np.int32), 2) is None


def test_a_parallel_ops_large_input_with_nan_is_answered_by_the_reference() -> None:
    """A two-thread op over a 2 MiB input: the team's check finds the NaN; NumPy's answer."""
    import warnings

    import autotune
    from autotune import te

    @autotune.op(policy="default", threads=2)
    def twice(X):
        return te.compute(X.shape, lambda i, j: X[i, j] * 2.0, name="out")
    x = np.ones((512, 1024), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        assert (twice(x) == 2.0).all()
        x[300, 1000] = np.nan
        with pytest.warns(RuntimeWarning, match="holds NaN or Inf"):
            y = twice(x)
    assert np.isnan(y[300, 1000]) and np.count_nonzero(np.isnan(y)) == 1
