"""The benchmarks' bookkeeping (not their timings): trials-to-target counting, and the held-out
model comparison on logs written by a replay runner over a known landscape."""
from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

from autotune.cost_model.features import config_features
from autotune.records import RecordLog
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from measure.benchmarks import _alternate, _running_best, _slug, _trials_to, model_accuracy
from measure.replay import ReplayRunner


def test_trials_to_counts_from_one_and_gives_none_when_never_reached() -> None:
    bests = _running_best([5.0, 3.0, math.inf, 2.0, 4.0])
    assert bests == [5.0, 3.0, 3.0, 2.0, 2.0]
    assert _trials_to(3.0, bests) == 2 and _trials_to(1.0, bests) is None


def test_alternate_times_every_callable_every_round_and_keys_medians() -> None:
    calls: dict[str, int] = {"a": 0, "b": 0}

    def counting(key: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            calls[key] += 1
        return run

    medians = _alternate({"a": counting("a"), "b": counting("b")}, rounds=3)
    assert set(medians) == {"a", "b"} and all(m > 0 for m in medians.values())
    assert calls["a"] >= 3 and calls["b"] >= 3
    assert _alternate({"a": counting("a")}, rounds=0) == {}


def landscape(task, cfg) -> float:  # type: ignore[no-untyped-def]
    f = config_features(task, cfg)
    return float(1e-4 * (1 + 0.05 * f[116] + 0.3 * f[69] + 0.2 * f[51]) * (1 + 0.02 * random.Random(cfg.key()).random()))


def test_model_accuracy_on_held_out_tasks_and_operators(tmp_path: Path) -> None:
    tasks = [Task.create("matmul", "96x80x64", threads=2), Task.create("matmul", "64x48x128", threads=2),
             Task.create("batch_matmul", "2x64x48x32", threads=2)]
    for t in tasks:
        Tuner(t, make_strategy("random", t.space(), seed=0), ReplayRunner([], fallback=landscape),
              RecordLog(tmp_path / f"random_{_slug(t.key())}.jsonl")).run(TuneOptions(trials=24))
    args = argparse.Namespace(workdir=str(tmp_path), long=24, models="random,xgb", seed=0)
    out = model_accuracy(args)
    assert set(out["splits"]) == {"task", "operator"}
    for split in out["splits"].values():
        assert set(split) == {"random", "xgb"}
        assert -1.0 <= split["xgb"]["kendall_tau"] <= 1.0 and 0.0 < split["xgb"]["top5"] <= 1.0
    # the landscape is a function of the features: a model that saw the other matmul shape ranks well
    assert out["splits"]["task"]["xgb"]["kendall_tau"] > out["splits"]["task"]["random"]["kendall_tau"] + 0.3
