"""NaN, Inf and -0.0 for every template and for definitions (issue 38, item 6e; the table in
templates/__init__.py): kernels are compiled assuming finite values, so a call whose inputs hold
NaN or Inf is answered by the NumPy reference, with a warning; -0.0 inputs give NumPy's values
(a zero's sign may differ). A kernel whose output shows every NaN and Inf of its inputs
(autotune.ir.nonfinite) is compiled without nnan and ninf and checks its output after the run
instead: the same answers, and an overflow of finite inputs answered by NumPy too."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import autotune
from autotune import te
from autotune.task import Task

pytestmark = pytest.mark.target  # runs kernels: follows the target in force

SHAPES = {"matmul": "8x6x4", "batch_matmul": "2x8x6x4", "conv2d": "1x3x6x6x4x3x3x1x1",  # 3x3: Winograd by default
          "depthwise_conv2d": "1x3x6x6x3x3x1x1", "pool2d": "1x3x6x6x2x2x1x0", "dense_bias_relu": "8x6x4",
          "softmax": "4x10", "layernorm": "4x10"}


def _sum(X):  # type: ignore[no-untyped-def]
    j = te.reduce_axis(X.shape[1], name="j")
    return te.compute((X.shape[0],), lambda i: te.sum(X[i, j], axis=j), name="out")


def _max(X):  # type: ignore[no-untyped-def]
    j = te.reduce_axis(X.shape[1], name="j")
    return te.compute((X.shape[0],), lambda i: te.max_reduce(X[i, j], axis=j), name="out")


def _elementwise(X, Y):  # type: ignore[no-untyped-def]
    return te.compute(X.shape, lambda i, j: X[i, j] * 2.0 - Y[i, j], name="out")


DEFINITIONS = {"nf_sum": _sum, "nf_max_reduce": _max, "nf_elementwise": _elementwise}
OPS = sorted(SHAPES) + sorted(DEFINITIONS)


def _op_and_inputs(name: str, **options: object) -> tuple[autotune.TunedOp, Task, list[np.ndarray]]:
    if name in DEFINITIONS:
        op = autotune.op(DEFINITIONS[name], name=name, policy="default", threads=1, verbose=False, **options)
        ins = [np.random.default_rng(i).uniform(-1, 1, (4, 10)).astype(np.float32)
               for i in range(len(inspect.signature(DEFINITIONS[name]).parameters))]
        return op, op.task_for(*ins), ins
    ins = Task.create(name, SHAPES[name], threads=1).inputs(seed=1)
    op = autotune.op(name, policy="default", threads=1, **options)
    return op, op.task_for(*ins), ins  # the op's task (a pooling window: the default shape's)


def _call(op: autotune.TunedOp, ins: list[np.ndarray]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "autotune: no tuning record", RuntimeWarning)  # a default schedule
        return op(*ins)


@pytest.mark.parametrize("name", OPS)
def test_nan_and_inf_inputs_give_numpys_answer(name: str) -> None:
    op, task, ins = _op_and_inputs(name)
    finite = _call(op, ins)  # the kernel; compiled once
    np.testing.assert_allclose(finite, task.reference(ins), rtol=2e-3, atol=2e-3)
    for value in (np.nan, np.inf, -np.inf):
        bad = [a.copy() for a in ins]
        bad[0].reshape(-1)[0] = value  # the first element: every operator reads it
        with np.errstate(all="ignore"):
            want = np.asarray(task.reference(bad)).astype(np.float32)
        with pytest.warns(RuntimeWarning, match=f"{name}: input [A-Za-z]+ holds NaN or Inf"):
            got = _call(op, bad)
        np.testing.assert_array_equal(got, want)  # NaN where NumPy's is, the same Inf and values
        if np.isnan(value):
            assert np.isnan(want).any()


@pytest.mark.parametrize("name", OPS)
def test_negative_zero_inputs_give_numpys_values(name: str) -> None:
    op, task, ins = _op_and_inputs(name)
    zeros = [np.full_like(a, -0.0) for a in ins]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # finite: the kernel answers, no fallback
        warnings.filterwarnings("ignore", "autotune: no tuning record", RuntimeWarning)
        got = op(*zeros)
    np.testing.assert_array_equal(got, np.asarray(task.reference(zeros)))  # -0.0 == 0.0: the sign may differ


def test_check_finite_false_runs_the_kernel_on_nan_without_a_word() -> None:
    op, task, ins = _op_and_inputs("nf_max_reduce", check_finite=False)
    ins[0][1, 5] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.filterwarnings("ignore", "autotune: no tuning record", RuntimeWarning)
        got = op(*ins)
    assert got.shape == (4,)  # unspecified where the row holds NaN (fast-math nnan); the other rows exact
    np.testing.assert_array_equal(np.delete(got, 1), np.delete(ins[0].max(axis=1), 1))


def test_a_kernel_of_task_build_answers_nan_like_the_op() -> None:
    task = Task.create("pool2d", SHAPES["pool2d"], threads=1)
    k = task.build(task.default_config())
    X = task.inputs(seed=1)[0]
    X[0, 0, 0, 0] = np.nan
    with pytest.warns(RuntimeWarning, match="pool2d: input X holds NaN or Inf"):
        got = k(X)
    np.testing.assert_array_equal(got, task.reference([X]))
    assert np.isnan(got[0, 0, 0, 0])


def test_a_parallel_kernel_checks_its_inputs_too() -> None:
    """Two threads: the kernel runs on a thread team, its inputs checked before (not in one
    compiled call with it, as on one thread)."""
    op = autotune.op("matmul", policy="default", threads=2)
    A = np.random.default_rng(0).uniform(-1, 1, (64, 48)).astype(np.float32)
    B = np.random.default_rng(1).uniform(-1, 1, (48, 40)).astype(np.float32)
    np.testing.assert_allclose(_call(op, [A, B]), A @ B, rtol=1e-4, atol=1e-4)
    assert op.kernel_for(A, B).nest.main.parallel_extent is not None
    B[5, 7] = np.inf
    with pytest.warns(RuntimeWarning, match="input B holds NaN or Inf"):
        got = _call(op, [A, B])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(A @ B))


# whose kernels check their output (+, - and * only, no reassoc), not their inputs
CHECKS_OUTPUT = {"matmul", "batch_matmul", "conv2d", "depthwise_conv2d", "nf_elementwise"}


@pytest.mark.parametrize("name", OPS)
def test_kernels_of_products_and_sums_check_their_output(name: str) -> None:
    op, _, ins = _op_and_inputs(name)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "autotune: no tuning record", RuntimeWarning)
        k = op.kernel_for(*ins)
    assert k.checks_output == (name in CHECKS_OUTPUT)
    assert ("'nnan'" in k.source) == (not k.checks_output)  # compiled without nnan/ninf where it checks its output


def test_an_input_that_no_output_reads_may_hold_nan() -> None:
    """A 3x3 stride-2 window over 8 rows reads rows 0-6: a NaN in row 7 changes no output. A
    convolution's kernel checks its output, so it answers (NumPy's answer: finite); pooling of the
    same geometry checks its inputs and goes to the reference."""
    conv = Task.create("conv2d", "1x3x8x8x4x3x3x2x0", threads=1)
    pool = Task.create("pool2d", "1x3x8x8x3x3x2x0", threads=1)
    X, W = conv.inputs(seed=1)
    X[0, 1, 7, 2] = np.nan
    k = conv.build(conv.default_config())
    assert k.checks_output
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = k(X, W)
    np.testing.assert_allclose(got, conv.reference([X, W]), rtol=1e-4, atol=1e-4)
    assert np.isfinite(got).all()
    with pytest.warns(RuntimeWarning, match="pool2d: input X holds NaN or Inf"):
        pool.build(pool.default_config())(X)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_overflow_of_finite_inputs_is_answered_by_numpy(threads: int) -> None:
    """float32 products of 1e30 overflow: the kernel's output holds Inf though no input does. A
    kernel that checks its output hands the call to the reference (the same Inf, and NaN where
    NumPy has it), with a warning that names the overflow; on one thread and on a team."""
    op = autotune.op("matmul", policy="default", threads=threads)
    A = np.random.default_rng(0).uniform(-1, 1, (64, 48)).astype(np.float32)
    B = np.random.default_rng(1).uniform(-1, 1, (48, 40)).astype(np.float32)
    _call(op, [A, B])
    assert op.kernel_for(A, B).checks_output
    assert (op.kernel_for(A, B).nest.main.parallel_extent is not None) == (threads > 1)
    A[3] = 1e30
    B[:, 5] = -1e30
    with np.errstate(over="ignore"):
        want = A @ B
    for out in (None, np.empty((64, 40), np.float32)):
        with pytest.warns(RuntimeWarning, match="output held NaN or Inf .an overflow. though no input did"):
            got = op(A, B, out=out)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
        np.testing.assert_allclose(np.delete(got, 3, axis=0), np.delete(want, 3, axis=0), rtol=1e-4, atol=1e-4)
        assert out is None or got is out
