"""model-accuracy on logs written by a replay runner over a known landscape."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from autotune.records import RecordLog
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.experiments.common import slug
from autotune.measure.experiments.model_accuracy import _sizes, run as model_accuracy
from autotune.measure.replay import ReplayRunner
from tests.measure.experiments.landscape import landscape


def test_model_accuracy_on_held_out_tasks_and_operators(tmp_path: Path) -> None:
    tasks = [Task.create("matmul", "96x80x64", threads=2), Task.create("matmul", "64x48x128", threads=2),
             Task.create("batch_matmul", "2x64x48x32", threads=2)]
    for t in tasks:
        Tuner(t, make_strategy("random", t.space(), seed=0), ReplayRunner([], fallback=landscape),
              RecordLog(tmp_path / f"random_{slug(t.key())}.jsonl")).run(TuneOptions(trials=24))
    args = argparse.Namespace(workdir=str(tmp_path), long=24, models="random,xgb", seed=0, in_task="4,12",
                              splits=3, plot=str(tmp_path / "learning.png"))
    out = model_accuracy(args)
    assert set(out["splits"]) == {"task", "operator"}
    assert set(out["in_task"]) == {4, 12} and (tmp_path / "learning.png").stat().st_size > 0
    for size in out["in_task"].values():
        assert set(size) == {"random", "xgb"} and set(size["xgb"]["per_task"]) == {t.key() for t in tasks}
    # within a task too, a model fitted to 12 of its configs ranks the other 12 better than chance
    assert out["in_task"][12]["xgb"]["kendall_tau"] > out["in_task"][12]["random"]["kendall_tau"] + 0.3
    for split in out["splits"].values():
        assert set(split) == {"random", "xgb", "xgb+similar"}
        assert -1.0 <= split["xgb"]["kendall_tau"] <= 1.0 and 0.0 < split["xgb"]["top5"] <= 1.0
    # the landscape is a function of the features: a model that saw the other matmul shape ranks well,
    # and so does one that leans on the most similar task
    for name in ("xgb", "xgb+similar"):
        assert out["splits"]["task"][name]["kendall_tau"] > out["splits"]["task"]["random"]["kendall_tau"] + 0.3



def test_in_task_sizes_are_sorted_and_each_at_least_two() -> None:
    assert _sizes("16,8,8") == [8, 16]
    for bad in ("1,8", "many"):
        with pytest.raises(SystemExit, match="--in-task"):
            _sizes(bad)
    with pytest.raises(SystemExit, match="--splits"):
        _sizes("8", splits=0)
