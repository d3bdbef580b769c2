"""The Python API: tuned ops from templates and from definitions, and logs (autotune_numba: test_numba_tune.py)."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune import te
from autotune.errors import AutotuneError
from autotune.records import load_records


@autotune.op(policy="log")
def saxpy(X, Y):
    """out = 3 X + Y"""
    return te.compute(X.shape, lambda i, j: X[i, j] * 3.0 + Y[i, j], name="out")


def test_template_op_tunes_a_new_shape_then_reuses_the_log(tmp_path: Path) -> None:
    log = tmp_path / "mm.jsonl"
    mm = autotune.op("matmul", log=log, trials=3, strategy="random", threads=1)
    A = np.random.rand(33, 17).astype(np.float32)
    B = np.random.rand(17, 9).astype(np.float32)
    np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-4, atol=1e-4)
    assert list(mm.sources.values()) == ["tuned"]
    logged = load_records(log)
    assert sum(not r.retimed for r in logged) == 3 and sum(r.retimed for r in logged) <= 3  # finalists timed again
    again = autotune.op("matmul", log=log, policy="log", threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # from the log: no "default schedule" warning
        np.testing.assert_allclose(again(A, B), A @ B, rtol=1e-4, atol=1e-4)
    assert list(again.sources.values()) == ["log"]


def test_definition_op_without_a_log_runs_a_default_schedule_and_says_so_once() -> None:
    X = np.random.rand(13, 70).astype(np.float32)
    Y = np.random.rand(13, 70).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="default schedule"):
        out = saxpy(X, Y)
    np.testing.assert_allclose(out, 3 * X + Y, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        saxpy(X, Y)  # cached per shape: no second warning


def test_apply_history_supplies_records_to_every_op(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    tuned = saxpy.configure(log=log, policy="tune", trials=2, strategy="random", threads=1)
    X = np.random.rand(8, 40).astype(np.float32)
    tuned(X, X)
    plain = saxpy.configure(threads=1)
    with autotune.apply_history(log):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_allclose(plain(X, X), 4 * X, rtol=1e-6)
    assert "log" in plain.sources.values()


def test_bad_uses_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match="needs a log"):
        autotune.op("matmul", policy="tune")
    with pytest.raises(AutotuneError, match="unknown operator"):
        autotune.op("no_such_op")
    with pytest.raises(AutotuneError, match="no tuning log"):
        with autotune.apply_history(tmp_path / "missing.jsonl"):
            pass
    mm = autotune.op("matmul", policy="default")
    with pytest.raises(AutotuneError, match="dtype"):
        mm(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float64))
    a = np.ones((4, 4), np.float32)
    with warnings.catch_warnings(), pytest.raises(AutotuneError, match="out overlaps input 0"):  # noalias kernels
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        mm(a, a.copy(), out=a)


def test_out_takes_the_fast_path_on_later_calls_and_every_check_still_holds() -> None:
    """From the second call on, out= runs the compiled entry directly: the output is written in
    place, an out overlapping an input is refused, an input holding NaN is answered by the NumPy
    reference, and an out of another layout or read-only goes the checked way to a clear error."""
    mm = autotune.op("matmul", policy="default", threads=1)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
    out = np.empty((8, 8), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "running a default schedule": intended here
        for _ in range(3):  # the first call makes the call path; the later ones take it
            out[:] = 0.0
            assert mm(a, b, out=out) is out
            np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
        big = np.zeros(8 * 5 + 8 * 8, np.float32)
        a_in = big[:40].reshape(8, 5)
        a_in[:] = a
        with pytest.raises(AutotuneError, match="out overlaps input 0"):
            mm(a_in, b, out=big[32:96].reshape(8, 8))  # contiguous, sharing a_in's last row
        bad = a.copy()
        bad[2, 3] = np.nan
        with pytest.warns(RuntimeWarning, match="input A holds NaN or Inf"):
            assert mm(bad, b, out=out) is out
        np.testing.assert_allclose(out, bad @ b, rtol=1e-5, atol=1e-5)
        assert np.isnan(out[2]).all() and np.isfinite(np.delete(out, 2, axis=0)).all()
        with pytest.raises(AutotuneError, match="C-contiguous"):
            mm(a, b, out=np.empty((8, 8), np.float32, order="F"))
        frozen = np.empty((8, 8), np.float32)
        frozen.flags.writeable = False
        with pytest.raises(AutotuneError, match="read-only|writ"):
            mm(a, b, out=frozen)
        assert mm(a, b, out=out) is out        # and the fast path again
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
        unchecked = mm.configure(check_finite=False)  # its entry refuses the overlap too
        for _ in range(2):
            assert unchecked(a_in, b, out=out) is out
            with pytest.raises(AutotuneError, match="out overlaps input 0"):
                unchecked(a_in, b, out=big[32:96].reshape(8, 8))
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
