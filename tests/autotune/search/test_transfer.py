"""Transfer: a prior that carries its training set and is refitted for the task it is used on."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import Dataset, ModelError, load_model, make_model
from autotune.backends import config_features
from autotune.search.guided import guided_search
from autotune.cost_model.metrics import kendall_tau
from autotune.backends.cpu.roofline import ACC, TRIP, UNROLLED
from autotune.search.transfer import prior_for, save_prior, similarity_weights
from autotune.task import Task

MATMUL = Task.create("matmul", "64x48x32", threads=2)
CONV = Task.create("conv2d", "1x8x10x10x8x3x3x1x1", threads=2)
TARGET = Task.create("matmul", "96x80x64", threads=2)


def logged(task: Task, n: int, seed: int, invert: bool = False) -> tuple[np.ndarray, list[float]]:
    """Features of n random configs, with a runtime that follows the features (or its inverse)."""
    cfgs = task.space().sample_new(random.Random(seed), set(), n)
    X = np.stack([config_features(task, c) for c in cfgs])
    # log2 accumulator tile, log2 unrolled extent, log2 trip count: they vary on every ISA's space
    secs = 1e-4 * (1 + 0.3 * X[:, ACC] + 0.15 * X[:, UNROLLED] + 0.1 * X[:, TRIP])
    return X, list(1e-8 / secs if invert else secs)


@pytest.fixture(scope="module")
def training() -> Dataset:
    data = Dataset()
    data.add(*logged(MATMUL, 40, 1), MATMUL.key())
    # under the unlike task's key, rows that look like the matmul's but time the other way, and
    # more of them: unweighted they win, and only the task weights can tell the two apart
    data.add(*logged(MATMUL, 120, 2, invert=True), CONV.key())
    return data


def test_the_task_most_like_the_target_weighs_most(training: Dataset) -> None:
    w = similarity_weights(training, TARGET)
    assert w[MATMUL.key()] == 1.0 and w[CONV.key()] < 0.5
    assert similarity_weights(training, CONV)[CONV.key()] == 1.0


def test_a_training_task_unknown_here_trains_at_the_least_weight(training: Dataset) -> None:
    data = Dataset()
    data.add(training.X[:40], training.seconds[:40], MATMUL.key())
    data.add(training.X[40:], training.seconds[40:], CONV.key())
    data.add(training.X[:5], training.seconds[:5], "never_defined_op|X0=256,W0=64,X1=64|float32|threads=2")  # a user op
    w = similarity_weights(data, TARGET)
    assert w["never_defined_op|X0=256,W0=64,X1=64|float32|threads=2"] == min(w.values()) == w[CONV.key()]
    only_unknown = Dataset()
    only_unknown.add(training.X[:5], training.seconds[:5], "never_defined_op|X0=256|float32|threads=2")
    with pytest.raises(ModelError, match="none of the prior's training tasks can be rebuilt here"):
        similarity_weights(only_unknown, TARGET)


def test_a_prior_keeps_its_training_set_and_is_refitted_for_each_task(training: Dataset, tmp_path: Path) -> None:
    model = make_model("xgb")
    model.fit(training)
    save_prior(model, training, tmp_path / "prior.json")
    X, secs = logged(TARGET, 60, 3)
    as_saved = load_model(tmp_path / "prior.json").predict(X)
    np.testing.assert_array_equal(as_saved, model.predict(X))
    # every task weighing alike, the refit is the saved model itself: the training set round-trips
    np.testing.assert_array_equal(prior_for(tmp_path / "prior.json", TARGET, temperature=math.inf).predict(X),
                                  as_saved)
    # refitted for a matmul, the prior leans on the matmul it learnt from, not on the conv2d
    # whose times ran the other way: it stops ranking the target backwards
    refitted = prior_for(tmp_path / "prior.json", TARGET).predict(X)
    assert kendall_tau(as_saved, secs) < -0.2 and kendall_tau(refitted, secs) > kendall_tau(as_saved, secs) + 0.3


def test_a_prior_without_a_training_set_is_used_as_saved(training: Dataset, tmp_path: Path) -> None:
    model = make_model("lgbm")
    model.fit(training)
    model.save(tmp_path / "plain.json")
    X, _ = logged(TARGET, 10, 4)
    np.testing.assert_array_equal(prior_for(tmp_path / "plain.json", TARGET).predict(X), model.predict(X))
    strategy, updater = guided_search(TARGET, pretrained=tmp_path / "plain.json")
    assert updater.scorer.prior is not None and strategy.propose(4)


def test_a_damaged_training_set_or_temperature_is_a_clear_error(training: Dataset, tmp_path: Path) -> None:
    model = make_model("xgb")
    model.fit(training)
    path = tmp_path / "prior.json"
    save_prior(model, training, path)
    body = json.loads(path.read_text())
    body["training"]["features"] = body["training"]["features"][:40]
    path.write_text(json.dumps(body))
    with pytest.raises(ModelError, match="training set is damaged.*train-model"):
        prior_for(path, TARGET)
    with pytest.raises(ModelError, match="temperature must be > 0"):
        similarity_weights(training, TARGET, temperature=0)
