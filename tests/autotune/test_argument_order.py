"""A definition op's kernel takes its arrays in the function's argument order everywhere (issue 38,
item 8): tuned through the decorator, called, loaded with load_best, replayed; shape keys list each
input's dims in turn, and a log written with the older key order still loads the same task."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune import te
from autotune.cli import main
from autotune.records import Record, RecordLog, load_records

pytestmark = pytest.mark.target  # runs kernels: follows the target in force


def test_a_definition_reading_its_arguments_out_of_order_tunes_loads_and_replays_in_signature_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "axpb.jsonl"

    @autotune.op(log=log, trials=1, strategy="random", threads=1, verbose=False)
    def axpb(A, B):  # reads B first
        return te.compute(B.shape, lambda i: B[i] * 2.0 + A[i], name="out")

    A = np.arange(16, dtype=np.float64)  # NumPy's default dtype: tuned and run at float64 (item 6d)
    B = np.full(16, 100.0)
    np.testing.assert_allclose(axpb(A, B), 2 * B + A)
    text = log.read_text()
    assert "compile_error" not in text and '"dtype":"float64"' in text

    k = autotune.load_best(log, "axpb", "16x16", "float64", threads=1)
    np.testing.assert_allclose(k(A, B), 2 * B + A)  # not 2 A + B
    assert [a.name for a in k.arguments] == ["A", "B"]
    out = np.empty(16)
    assert k(A, B, out=out) is out
    np.testing.assert_allclose(out, 2 * B + A)

    capsys.readouterr()
    assert main(["replay", str(log), "--threads", "1"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("axpb|"))
    assert "error" not in row and "wrong_answer" not in row and row.split()[2] != "-", row


def _scaled_row_dot(n: int, k: int) -> tuple[dict, dict]:
    """y[i] = sum_j W[j] * X[i, j] * 0.5 + X[i, 0]: reads W before X; (definition, default config)."""
    from autotune.definition import default_config
    from autotune.ir.serialize import from_data, to_data
    X = te.placeholder((n, k), name="X")
    W = te.placeholder((k,), name="W")
    j = te.reduce_axis(k, name="j")
    s = te.compute((n,), lambda i: te.sum(W[j] * X[i, j], axis=j), name="s")
    out = te.compute((n,), lambda i: s[i] * 0.5 + X[i, 0], name="out")
    data = to_data(out, [X, W])
    return data, default_config(from_data(data)[0], 1)


@pytest.mark.parametrize("order", ["signature", "older"])
def test_a_logged_user_op_loads_with_its_arguments_in_order_whatever_key_order_the_log_has(
        tmp_path: Path, order: str) -> None:
    data, cfg = _scaled_row_dot(6, 5)
    shape = {"X0": 6, "X1": 5, "W0": 5} if order == "signature" else {"X0": 6, "W0": 5, "X1": 5}  # older logs
    log = tmp_path / "log.jsonl"
    RecordLog(log, fsync=False).append(Record(op=f"rd_{order}", shape=shape, dtype="float32", threads=1,
                                              config=cfg, costs=[1e-6], definition=data))
    (rec,) = load_records(log)
    assert rec.key == f"rd_{order}|X0=6,X1=5,W0=5|float32|threads=1"  # as the shape string 6x5x5 lists them
    k = autotune.load_best(log, f"rd_{order}", "6x5x5", threads=1)
    X = np.random.default_rng(0).random((6, 5)).astype(np.float32)
    W = np.random.default_rng(1).random(5).astype(np.float32)
    np.testing.assert_allclose(k(X, W), (X @ W) * 0.5 + X[:, 0], rtol=1e-5)
    with pytest.raises(autotune.ShapeError, match=r"input X must have shape \(6, 5\), got \(5,\)"):
        k(W, X)


def test_a_tuned_ops_records_key_its_dims_input_by_input(tmp_path: Path) -> None:
    from autotune.task import Task
    log = tmp_path / "rd.jsonl"

    @autotune.op(log=log, policy="log", threads=1)
    def wx(X, W):
        j = te.reduce_axis(X.shape[1], name="j")
        return te.compute((X.shape[0],), lambda i: te.sum(W[j] * X[i, j], axis=j), name="out")

    task = Task.create(wx.template, {"W0": 5, "X1": 5, "X0": 6}, threads=1)
    assert task.key() == "wx|X0=6,X1=5,W0=5|float32|threads=1"
    assert list(json.loads(json.dumps(task.shape_dict))) == ["X0", "X1", "W0"]
    assert wx.template.parse_shape("6x5x5") == task.shape_dict
