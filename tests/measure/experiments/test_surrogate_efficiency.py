"""surrogate-efficiency on logs written by a replay runner over a known landscape."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from autotune.records import RecordLog
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.experiments.common import slug
from autotune.measure.experiments.surrogate_efficiency import run as surrogate_efficiency
from autotune.measure.replay import ReplayRunner
from tests.measure.experiments.landscape import landscape


def test_surrogate_efficiency_runs_a_pretrained_search_from_a_model_of_the_other_tasks(tmp_path: Path) -> None:
    # shapes whose spaces hold more configs than the pool compare() draws its target from (4000): in a
    # smaller space that draw retries until its budget of tries runs out, 12 s a task
    tasks = [Task.create("matmul", "256x256x256", threads=2), Task.create("matmul", "128x256x192", threads=2)]
    for t in tasks:
        Tuner(t, make_strategy("random", t.space(), seed=0), ReplayRunner([], fallback=landscape),
              RecordLog(tmp_path / f"random_{slug(t.key())}.jsonl")).run(TuneOptions(trials=40))
    args = argparse.Namespace(workdir=str(tmp_path), compare="random,xgb+pretrained", tasks="matmul:256x256x256,"
                              "matmul:128x256x192", dtype="float32", threads=2, seeds=1, trials=4, batch=4,
                              noise=0.1, long=32, seed=0, corpus=None)
    out = surrogate_efficiency(args)
    assert set(out["tasks"]) == {t.key() for t in tasks}
    for row in out["tasks"].values():
        assert set(row["searches"]) == {"random", "xgb+pretrained"}
        assert all(n is None or 1 <= n <= 4 for n in row["searches"]["xgb+pretrained"]["runs"])
    assert out["xgb+pretrained_median_saving"] > 0
    with pytest.raises(SystemExit, match="one model kind"):
        surrogate_efficiency(argparse.Namespace(**{**vars(args), "compare": "xgb+pretrained,lgbm+pretrained"}))
