"""Definition ops end to end: the README's example as a plain script (no main guard), replayed
from its log alone in a fresh process; checked inputs; every template through autotune.op."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune import te
from autotune.errors import AutotuneError

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

ROOT = Path(__file__).resolve().parents[2]


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"\*\*1\. A tuned op\.\*\*.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "README.md lost its 'A tuned op' example"
    return block.group(1)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["AUTOTUNE_THREADS"] = "1"
    return env


def test_readme_example_runs_as_a_script_then_replays_from_the_log_alone(tmp_path: Path) -> None:
    code = _readme_example()
    assert "__main__" not in code  # the example needs no main guard
    small = (code.replace('trials=8', 'trials=2').replace('trials=4', 'trials=2')
             .replace("rand(128, 96)", "rand(24, 16)").replace("rand(96, 64)", "rand(16, 8)")
             .replace("rand(256, 64)", "rand(32, 16)").replace("rand(64)", "rand(16)"))
    script = tmp_path / "user" / "example.py"
    script.parent.mkdir()
    script.write_text(small)
    run = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=_env(), capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    # stderr is not a terminal: one closing line per tuning
    assert re.search(r"autotune: row_dot X\[32,16\] W\[16\] float32 threads=\d+: finished 2 trials", run.stderr), run.stderr
    log = script.parent / "tune.jsonl"
    ops = {line.split('"op":"')[1].split('"')[0] for line in log.read_text().splitlines()}
    assert {"matmul", "row_dot", "scaled_add"} <= ops
    assert "compile_error" not in log.read_text() and "unknown operator" not in log.read_text()

    elsewhere = tmp_path / "elsewhere"  # a fresh process that has never seen the script
    elsewhere.mkdir()
    replay = subprocess.run([sys.executable, "-m", "autotune", "replay", str(log)], cwd=elsewhere, env=_env(),
                            capture_output=True, text=True, timeout=900)
    assert replay.returncode == 0, replay.stderr[-3000:]
    for op in ("row_dot", "scaled_add"):
        row = next(line for line in replay.stdout.splitlines() if line.startswith(op + "|"))
        assert "error" not in row and "wrong_answer" not in row and row.split()[2] != "-", replay.stdout
    assert "row_dot: a user op; its shape as numbers is X0xX1xW0" in replay.stdout


@autotune.op(policy="default", verbose=False)
def row_dot(X, W):
    j = te.reduce_axis(X.shape[1], name="j")
    return te.compute((X.shape[0],), lambda i: te.sum(X[i, j] * W[j], axis=j), name="out")


def test_a_weight_shorter_than_the_reduction_is_a_one_line_error() -> None:
    X = np.random.rand(64, 32).astype(np.float32)
    with pytest.raises(AutotuneError) as e:
        row_dot(X, np.random.rand(30).astype(np.float32))
    msg = str(e.value)
    assert "\n" not in msg and "W" in msg and "[30]" in msg and "[32]" in msg, msg


def test_mismatched_template_inputs_name_the_tensor_and_both_shapes() -> None:
    mm = autotune.op("matmul", policy="default", threads=1)
    with warnings.catch_warnings(), pytest.raises(AutotuneError) as e:
        warnings.simplefilter("error")  # refused before any kernel is looked for: no "default schedule" warning
        mm(np.zeros((8, 6), np.float32), np.zeros((5, 4), np.float32))
    msg = str(e.value)
    assert "\n" not in msg and "B" in msg and "[6x4]" in msg and "[5x4]" in msg, msg
    assert not mm.kernels


def test_names_that_fold_to_one_are_refused() -> None:
    @autotune.op(policy="default")
    def fold(A):
        k = te.reduce_axis(A.shape[1], name="\uff49")  # fullwidth i, NFKC-folds to the spatial axis i
        return te.compute((A.shape[0],), lambda i: te.sum(A[i, k], axis=k), name="out")
    with pytest.raises(AutotuneError, match="once normalised"):
        fold(np.ones((4, 4), np.float32))


def test_reads_in_another_order_than_the_arguments_get_the_right_arrays() -> None:
    @autotune.op(policy="default", verbose=False)
    def minus(A, B):
        return te.compute(A.shape, lambda i: B[i] - A[i], name="out")
    a, b = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
    with pytest.warns(RuntimeWarning):
        np.testing.assert_allclose(minus(a, b), b - a)


def test_out_argument_is_written_and_returned_and_a_wrong_one_refused() -> None:
    X = np.random.rand(16, 8).astype(np.float32)
    W = np.random.rand(8).astype(np.float32)
    out = np.empty(16, np.float32)
    with pytest.warns(RuntimeWarning):
        got = row_dot(X, W, out=out)
    assert got is out
    np.testing.assert_allclose(out, X @ W, rtol=1e-5)
    with pytest.raises(AutotuneError, match="out must be"):
        row_dot(X, W, out=np.empty(15, np.float32))
    np.testing.assert_allclose(row_dot(X[:, ::-1].copy()[:, ::-1], W), X @ W, rtol=1e-5)  # non-contiguous input


@pytest.mark.parametrize("name", ["dense_bias_relu", "softmax", "layernorm", "batch_matmul"])
def test_every_template_runs_through_autotune_op(name: str) -> None:
    from autotune.templates import get_template
    t = get_template(name)
    shape = {"dense_bias_relu": "8x12x16", "softmax": "6x20", "layernorm": "6x20", "batch_matmul": "2x8x4x6"}[name]
    from autotune.task import Task
    task = Task.create(name, shape, threads=1)
    ins = task.inputs(seed=1)
    op = autotune.op(name, policy="default", threads=1)
    with pytest.warns(RuntimeWarning, match="default schedule"):
        got = op(*ins)
    np.testing.assert_allclose(got, task.reference(ins), rtol=2e-3, atol=2e-3)
    assert t.shape_from(*ins) == task.shape_dict


def _row_dot_data(n: int = 6, k: int = 4) -> dict:
    from autotune.ir.serialize import to_data
    X = te.placeholder((n, k), name="X")
    W = te.placeholder((k,), name="W")
    j = te.reduce_axis(k, name="j")
    return to_data(te.compute((n,), lambda i: te.sum(X[i, j] * W[j], axis=j), name="out"), [X, W])


def test_a_log_alone_makes_a_user_op_loadable_by_its_shape_string(tmp_path: Path) -> None:
    from autotune.definition import default_config, register_definition
    from autotune.records import Record, RecordLog, load_records
    from autotune.ir.serialize import from_data
    data = _row_dot_data()
    cfg = default_config(from_data(data)[0], 1)
    log = tmp_path / "log.jsonl"
    RecordLog(log).append(Record(op="logged_row_dot", shape={"X0": 6, "W0": 4, "X1": 4}, dtype="float32", threads=1,
                                 config=cfg, costs=[1e-6], definition=data))
    (rec,) = load_records(log)
    assert rec.definition == data
    k = autotune.load_best(log, "logged_row_dot", "6x4x4", threads=1)  # X0 x X1 x W0: the definition's order
    X, W = np.random.rand(6, 4).astype(np.float32), np.random.rand(4).astype(np.float32)
    np.testing.assert_allclose(k(X, W), X @ W, rtol=1e-5)
    with pytest.raises(AutotuneError, match=r"expected 3 \(X0xX1xW0\)"):
        autotune.load_best(log, "logged_row_dot", "6x4", threads=1)
    assert register_definition("logged_row_dot", data).flops({"X0": 6, "X1": 4, "W0": 4}) == 48


def test_a_hostile_or_conflicting_definition_in_a_log_makes_only_that_record_unusable() -> None:
    from autotune.records import Record, RecordError
    bad = _row_dot_data()
    bad["computes"][0]["body"] = {"load": "secret", "index": [{"var": "i"}]}
    rec = Record(op="hostile_op", shape={"X0": 6, "W0": 4, "X1": 4}, dtype="float32", threads=1, config={},
                 costs=[1e-6], definition=bad)
    with pytest.raises(RecordError, match="not an input"):
        rec.task()
    as_matmul = Record(op="matmul", shape={"M": 6, "N": 4, "K": 4}, dtype="float32", threads=1, config={},
                       costs=[1e-6], definition=_row_dot_data())
    with pytest.raises(RecordError, match="library operator"):
        as_matmul.task()
    changed = Record(op="row_dot", shape={"X0": 6, "W0": 4, "X1": 4}, dtype="float32", threads=1, config={},
                     costs=[1e-6], definition=_row_dot_data() | {"output": "out"})
    changed.definition["computes"][0]["body"]["bin"] = "+"  # the function here multiplies
    with pytest.raises(RecordError, match="changed since it was recorded"):
        changed.task()


def test_decorating_an_op_registers_no_module_for_workers_to_run() -> None:
    from autotune.templates import USER_MODULES

    @autotune.op(policy="default")
    def plus_one(A):
        return te.compute(A.shape, lambda i: A[i] + 1.0, name="out")
    assert not any(m.startswith("file:") or m == __name__ for m in USER_MODULES)
    assert plus_one.template.definition is not None
