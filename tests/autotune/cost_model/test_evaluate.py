"""train-model and evaluate-model: a prior trained on logs, scored on another task's log."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.records import RecordLog
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner
from tests.autotune.cost_model.test_models import landscape


def random_log(path: Path, task: Task, trials: int) -> Path:
    Tuner(task, make_strategy("random", task.space(), seed=0), ReplayRunner([], fallback=landscape),
          RecordLog(path)).run(TuneOptions(trials=trials))
    return path


def test_a_trained_prior_is_refitted_for_each_task_it_is_scored_on(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    train = [random_log(tmp_path / "a.jsonl", Task.create("matmul", "64x48x32", threads=2), 24),
             random_log(tmp_path / "b.jsonl", Task.create("conv2d", "1x8x10x10x8x3x3x1x1", threads=2), 24)]
    held = random_log(tmp_path / "held.jsonl", Task.create("matmul", "96x80x64", threads=2), 24)
    model = tmp_path / "prior.json"
    assert main(["train-model", *map(str, train), "--model", "xgb", "--out", str(model)]) == 0
    assert len(json.loads(model.read_text())["training"]["task"]) == 48  # the file keeps its training set
    out = tmp_path / "scores.json"
    plot = tmp_path / "scores.png"
    assert main(["evaluate-model", "--model", str(model), "--log", str(held), "--json", str(out),
                 "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 0
    assert "refitted for each task of the log" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert list(res["tasks"]) == ["matmul|M=96,N=80,K=64|float32|threads=2"] and -1 <= res["median"]["kendall_tau"] <= 1
