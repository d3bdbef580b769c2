"""A tuned op checks its inputs before it looks up, tunes or logs anything (issue 38, item 6): the
number of arrays, their ranks, shapes, one float dtype, and a writable C-contiguous out=; each
mismatch is a one-line ShapeError (a ValueError) naming the argument and the fix."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune import te
from autotune.errors import ShapeError
from autotune.task import Task

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"matmul": "8x6x4", "batch_matmul": "2x8x6x4", "conv2d": "1x3x6x6x4x3x3x1x1", "depthwise_conv2d": "1x3x6x6x3x3x1x1",
          "pool2d": "1x3x6x6x2x2x1x0", "dense_bias_relu": "8x6x4", "softmax": "4x10", "layernorm": "4x10"}
ARGS = {"matmul": "A B", "batch_matmul": "A B", "conv2d": "X W", "depthwise_conv2d": "X W", "pool2d": "X",
        "dense_bias_relu": "A W bias", "softmax": "x", "layernorm": "x gamma beta"}


def _one_line(e: pytest.ExceptionInfo[BaseException], *needles: str) -> str:
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_template_refuses_bad_inputs_before_tuning_or_logging(name: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    task = Task.create(name, SHAPES[name], threads=1)
    ins = task.inputs()
    args = ARGS[name].split()
    log = tmp_path / "never.jsonl"
    op = autotune.op(name, log=log, trials=8, threads=1)
    with pytest.raises(ShapeError) as e:  # a rank short (item 6b: matmul raised IndexError)
        op(ins[0][0], *ins[1:])
    _one_line(e, args[0], f"must have {ins[0].ndim} dimensions")
    with pytest.raises(ShapeError) as e:
        op(*[a.astype(np.int32) for a in ins])
    _one_line(e, args[0], "int32", "astype")
    with pytest.raises(autotune.AutotuneError) as e:
        op(*ins, ins[-1])
    _one_line(e, f"takes {len(ins)} arrays")
    if len(ins) > 1:  # the last input one longer in every dim: some dim no longer agrees (item 6c)
        grown = np.zeros([n + 1 for n in ins[-1].shape], ins[-1].dtype)
        with pytest.raises(ShapeError) as e:
            op(*ins[:-1], grown)
        _one_line(e, args[-1], "expected")
    assert not log.exists() and not op.kernels  # nothing tuned, measured or logged
    assert "autotune" not in capsys.readouterr().err


def test_a_read_only_out_is_refused_and_a_writable_one_written() -> None:
    mm = autotune.op("matmul", policy="default", threads=1)
    A = np.random.rand(8, 4).astype(np.float32)
    B = np.random.rand(4, 6).astype(np.float32)
    frozen = np.zeros((8, 6), np.float32)
    frozen.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        with pytest.raises(ShapeError) as e:
            mm(A, B, out=frozen)
    _one_line(e, "out is read-only", "np.empty([8, 6], np.float32)")
    assert not frozen.any()  # item 6a: it used to be written anyway
    with pytest.raises(ShapeError) as e:
        mm(A, B, out=[[0.0] * 6] * 8)
    _one_line(e, "out must be a NumPy array")
    out = np.empty((8, 6), np.float32)
    assert mm(A, B, out=out) is out
    np.testing.assert_allclose(out, A @ B, rtol=1e-5)
    with pytest.raises(ShapeError) as e:  # a kernel of load_best / Task.build checks out= alike
        mm.kernel_for(A, B)(A, B, out=frozen)
    _one_line(e, "out is read-only")


def test_a_read_only_memmap_as_out_is_an_error_not_a_crash(tmp_path: Path) -> None:
    # item 6a: the kernel wrote into the read-only mapping and the caller died of SIGSEGV
    script = textwrap.dedent(f"""
        import warnings
        import numpy as np
        import autotune
        warnings.simplefilter("ignore", RuntimeWarning)
        path = {str(tmp_path / "out.dat")!r}
        np.zeros((8, 6), np.float32).tofile(path)
        mapped = np.memmap(path, np.float32, "r", shape=(8, 6))
        mm = autotune.op("matmul", policy="default", threads=1)
        try:
            mm(np.ones((8, 4), np.float32), np.ones((4, 6), np.float32), out=mapped)
        except ValueError as e:
            print(type(e).__name__, e)
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.startswith("ShapeError matmul: out is read-only") and run.stdout.count("\n") == 1, run.stdout


def test_a_definition_known_only_as_float64_data_makes_a_task() -> None:
    # item 6d: a measurement worker knows a float64 op only from its data; the shape check asked
    # for float32 and every config failed with compile_error
    from autotune.ir.serialize import to_data
    A = te.placeholder((16,), "float64", name="A")
    data = to_data(te.compute((16,), lambda i: A[i] * 2.0, name="out"), [A])
    task = Task.from_data({"op": "f64_only_twice", "shape": {"A0": 16}, "dtype": "float64", "threads": 1,
                           "definition": data})
    assert task.key() == "f64_only_twice|A0=16|float64|threads=1"
    k = task.build(task.default_config())
    x = np.linspace(-1, 1, 16)
    np.testing.assert_allclose(k(x), 2 * x)


def test_a_definition_op_runs_on_float64_arrays_and_refuses_mixed_or_integer_ones() -> None:
    @autotune.op(policy="default", threads=1, verbose=False)
    def halve(X):
        return te.compute(X.shape, lambda i, j: X[i, j] * 0.5, name="out")
    X = np.random.rand(5, 7)  # float64
    with pytest.warns(RuntimeWarning, match="default schedule"):
        got = halve(X)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, X * 0.5)
    with pytest.raises(ShapeError) as e:
        halve(np.arange(6).reshape(2, 3))
    _one_line(e, "input X has dtype int64", "X.astype(np.float32)")

    @autotune.op(policy="default", threads=1, verbose=False)
    def add(X, Y):
        return te.compute(X.shape, lambda i: X[i] + Y[i], name="out")
    with pytest.raises(ShapeError) as e:
        add(np.ones(4, np.float32), np.ones(4))
    _one_line(e, "X float32, Y float64", "Y.astype(np.float32)")


def test_a_call_path_is_chosen_by_every_arrays_shape_dtype_and_strides() -> None:
    """A tuned op remembers its last call path per thread: calls alternating between shapes,
    dtypes, a strided view and back, with and without out=, each get their own kernel's answer."""
    mm = autotune.op("matmul", policy="default", threads=1)
    rng = np.random.default_rng(0)
    a32, b32 = rng.random((8, 6), np.float32), rng.random((6, 4), np.float32)
    a16, b16 = rng.random((16, 6), np.float32), rng.random((6, 4), np.float32)
    big = rng.random((8, 12), np.float32)
    strided = big[:, ::2]  # the shape of a32, other strides
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(2):
            for a, b in [(a32, b32), (a16, b16), (a32.astype(np.float64), b32.astype(np.float64)), (strided, b32),
                         (a32, b32)]:
                want = a.astype(np.float64) @ b.astype(np.float64)
                got = mm(a, b)
                assert got.dtype == a.dtype and got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-5)
                out = np.empty(want.shape, a.dtype)
                assert mm(a, b, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-5)
    with pytest.raises(ShapeError):
        mm(a32, b16[:5])


def test_a_call_with_the_last_shapes_and_dtypes_but_other_arrays_gets_its_own_answer() -> None:
    """The last call path is found by the arrays' shapes and dtypes (the compiled entry checks the
    strides): a transposed view of the last shape, an array whose dtype is equal but another object
    (unpickled), and an object with a shape and dtype that is not an ndarray each get the right answer."""
    import pickle

    class Duck:  # an array-like with a shape and dtype (as xarray's DataArray), converted by np.asarray
        def __init__(self, a: np.ndarray) -> None:
            self.a, self.shape, self.dtype = a, a.shape, a.dtype

        def __array__(self, dtype=None, copy=None):  # type: ignore[no-untyped-def]
            return self.a

    mm = autotune.op("matmul", policy="default", threads=1)
    rng = np.random.default_rng(1)
    a, b = rng.random((8, 8), np.float32), rng.random((8, 8), np.float32)
    unpickled = pickle.loads(pickle.dumps(a))
    assert unpickled.dtype is not np.dtype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(2):
            for x, y in [(a, b), (a.T, b), (a, b.T), (unpickled, b), (Duck(a), b), (a, Duck(b.T.copy())), (a, b)]:
                want = np.asarray(x).astype(np.float64) @ np.asarray(y).astype(np.float64)
                np.testing.assert_allclose(mm(x, y), want, rtol=1e-5)
                out = np.empty((8, 8), np.float32)
                assert mm(x, y, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-5)
