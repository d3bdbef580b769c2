"""A model-guided search keeps each proposed config's predicted score, and the tuner logs it in the
config's record (Record.predicted), so predictions can be held against measurements. Measured by a
replay runner (a runtime that follows the features): no kernel is compiled."""
from __future__ import annotations

from pathlib import Path

import autotune
from autotune.measure.replay import ReplayRunner
from autotune.records import load_records
from tests.autotune.cost_model.test_models import landscape


def test_a_model_guided_tune_logs_the_prediction_of_each_config_it_chose(tmp_path: Path) -> None:
    log = tmp_path / "guided.jsonl"
    autotune.tune(op="matmul", shape="32x32x32", threads=1, trials=4, batch=4, cost_model="xgb", log=log,
                  runner=ReplayRunner([], fallback=landscape), presets=False, finalists=None, progress=False)
    recs = load_records(log, strict=True)
    assert len(recs) >= 2 and {r.strategy for r in recs} == {"evolutionary+xgb(prior roofline)"}
    predicted = [r.predicted for r in recs if r.predicted is not None]
    assert len(predicted) >= 2  # the roofline prior scores the first picks already
    assert all(isinstance(p, float) for p in predicted) and len(set(predicted)) > 1
    assert all(abs(p) < 100 for p in predicted)  # standardised over the task: the prior's and the model's compare


def test_a_search_without_a_model_logs_no_prediction(tmp_path: Path) -> None:
    log = tmp_path / "random.jsonl"
    autotune.tune(op="matmul", shape="32x32x32", threads=1, trials=3, strategy="random", log=log,
                  runner=ReplayRunner([], fallback=landscape), presets=False, finalists=None, progress=False)
    assert [r.predicted for r in load_records(log)] == [None] * len(load_records(log)) != []
