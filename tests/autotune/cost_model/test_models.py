"""Cost models: one contract over every implementation, metrics, and model-guided search."""
from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import MODELS, Dataset, ModelError, load_model, make_model
from autotune.cost_model.features import FEATURE_VERSION, config_features, feature_length
from autotune.cost_model.graph import config_graph
from autotune.cost_model.guided import guided_search, make_search
from autotune.cost_model.metrics import ape, kendall_tau, mape, top_k_score
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from measure.replay import ReplayRunner
from autotune.runner import MeasureResult

TASK = Task.create("matmul", "96x80x64", threads=2)


def synthetic(n: int = 60, seed: int = 0) -> tuple[Dataset, list]:
    """Real features of real configs, with a runtime that depends on the features."""
    rng = random.Random(seed)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(n)}, key=lambda c: c.key())
    graphs = [config_graph(TASK, c) for c in cfgs]
    X = np.stack([g.config_feat for g in graphs])
    secs = list(1e-4 * (1 + X[:, 4] + 0.5 * X[:, 10] + 0.1 * X[:, 0]))
    ds = Dataset()
    ds.add(X, secs, TASK.key(), graphs)
    return ds, secs


def test_features_have_a_fixed_versioned_schema() -> None:
    f = config_features(TASK, TASK.space().sample(random.Random(0)))
    assert f.shape == (feature_length(),) and f.dtype == np.float32 and FEATURE_VERSION == 1
    conv = Task.create("conv2d", "1x8x9x9x8x3x3x1x1", threads=1)
    assert config_features(conv, conv.space().sample(random.Random(0))).shape == f.shape


@pytest.mark.parametrize("kind", MODELS)
def test_model_contract(kind: str, tmp_path: Path) -> None:
    ds, secs = synthetic()
    m = make_model(kind)
    m.fit(ds)
    p = m.predict(ds)
    assert p.shape == (len(ds),) and np.isfinite(p).all()
    m.save(tmp_path / "m.json")
    back = load_model(tmp_path / "m.json")
    if kind != "random":
        np.testing.assert_array_equal(back.predict(ds), p)  # save/load round-trips predictions exactly
    if kind in ("xgb", "lgbm", "gnn"):
        assert kendall_tau(p, secs) > 0.5, "a learned model must rank its own training data"


@pytest.mark.parametrize("kind", ["xgb", "lgbm", "gnn"])
def test_regression_objective(kind: str) -> None:
    ds, secs = synthetic()
    m = make_model(kind, objective="regression")
    m.fit(ds)
    assert kendall_tau(m.predict(ds), secs) > 0.5


@pytest.mark.parametrize("kind", ["xgb", "lgbm", "gnn"])
@pytest.mark.parametrize("objective", ["rank", "regression"])
def test_training_follows_the_task_weights(kind: str, objective: str) -> None:
    """Task B holds the same configs as task A with the opposite times: the model learns the
    task that weighs 1 and ignores the one that weighs 0.001."""
    ds, secs = synthetic()
    both = Dataset()
    both.add(ds.X, secs, "A", ds.graphs)
    both.add(ds.X, [1e-8 / s for s in secs], "B", ds.graphs)
    for light, sign in (("B", 1), ("A", -1)):
        both.task_weights = {light: 1e-3}
        m = make_model(kind, objective=objective)
        m.fit(both)
        assert sign * kendall_tau(m.predict(ds), secs) > 0.5


def test_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not been trained"):
        make_model("xgb").predict(np.zeros((1, feature_length())))
    with pytest.raises(ModelError, match="unknown cost model"):
        make_model("svm")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ModelError, match="not an autotune model"):
        load_model(tmp_path / "bad.json")


def test_metrics() -> None:
    secs = [1.0, 2.0, 4.0, math.inf]
    perfect = [4.0, 3.0, 2.0, 1.0]
    assert kendall_tau(perfect, secs) == pytest.approx(1.0)
    assert top_k_score(perfect, secs, 1) == 1.0
    assert top_k_score([0, 3, 2, 1], secs, 1) == 0.5
    assert ape([0, 3, 2, 1], secs) == pytest.approx(100.0)
    assert mape([1.1, 2.2], [1.0, 2.0]) == pytest.approx(10.0)


def landscape(task, cfg) -> float:  # type: ignore[no-untyped-def]
    f = config_features(task, cfg)
    return float(1e-4 * (1 + f[4] + 0.5 * f[10] + 0.1 * f[0]))


@pytest.mark.parametrize("kind", ["xgb", "lgbm", "gnn"])
def test_guided_search_is_valid_and_refits(kind: str, tmp_path: Path) -> None:
    strategy, updater = guided_search(TASK, kind, seed=0)
    proposed = []
    res = Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
                callbacks=[updater, lambda t, c, r: proposed.extend(c)]).run(TuneOptions(trials=16, batch=8))
    assert res.measured == 16 and len(set(proposed)) == 16
    assert updater.fits >= 2
    updater.scorer.model.save(tmp_path / "m.json")
    warm, up2 = guided_search(TASK, pretrained=tmp_path / "m.json", seed=1)
    res2 = Tuner(TASK, warm, ReplayRunner([], fallback=landscape), callbacks=[up2]).run(TuneOptions(trials=8, batch=8))
    assert res2.measured == 8 and up2.fits >= 1


def test_a_pretrained_model_steers_the_first_round(tmp_path: Path) -> None:
    rng = random.Random(3)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    secs = [landscape(TASK, c) for c in cfgs]
    ds = Dataset()
    ds.add(np.stack([config_features(TASK, c) for c in cfgs]), secs, TASK.key())
    model = make_model("xgb")
    model.fit(ds)
    model.save(tmp_path / "pre.json")
    strategy, _ = guided_search(TASK, pretrained=tmp_path / "pre.json", seed=5)
    first = strategy.propose(8)
    assert first and len(set(first)) == 8
    got = sorted(landscape(TASK, c) for c in first)
    # half of the batch in the best 5% of the 200 samples: a random batch of 8 does that ~0.04% of the time
    assert got[3] <= sorted(secs)[len(secs) // 20]


def test_a_prior_that_ranks_the_task_well_keeps_its_say(tmp_path: Path) -> None:
    rng = random.Random(6)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    ds = Dataset()
    ds.add(np.stack([config_features(TASK, c) for c in cfgs]), [landscape(TASK, c) for c in cfgs], TASK.key())
    model = make_model("xgb")
    model.fit(ds)
    model.save(tmp_path / "good.json")
    strategy, updater = guided_search(TASK, pretrained=tmp_path / "good.json", seed=7)
    trust: list = []
    Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
          callbacks=[updater, lambda t, c, r: trust.append(updater.scorer.prior_trust)]).run(
        TuneOptions(trials=16, batch=8))
    assert trust[0] > 0.5 and trust[-1] > 0.5


def test_a_misleading_prior_fades_as_the_task_is_measured(tmp_path: Path) -> None:
    """A prior trained on the opposite landscape steers its half of the first round to bad
    configs; the first measurements show it ranks them backwards, it loses its say, and the search
    recovers."""
    rng = random.Random(4)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    secs = sorted(landscape(TASK, c) for c in cfgs)
    ds = Dataset()
    ds.add(np.stack([config_features(TASK, c) for c in cfgs]), [1.0 / landscape(TASK, c) for c in cfgs], TASK.key())
    model = make_model("xgb")
    model.fit(ds)  # fitted to the inverse times: it ranks the slowest configs first
    model.save(tmp_path / "wrong.json")
    strategy, updater = guided_search(TASK, pretrained=tmp_path / "wrong.json", seed=3)
    seen: list = []
    trust: list = []
    Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
          callbacks=[updater, lambda t, c, r: seen.append([landscape(TASK, x) for x in c]),
                     lambda t, c, r: trust.append(updater.scorer.prior_trust)]).run(TuneOptions(trials=40, batch=8))
    assert min(seen[0][:4]) > secs[len(secs) // 2]   # the prior's first picks: all in the slower half
    assert trust[0] == 0.0 and set(trust) == {0.0}  # judged by the first batch, and never trusted again
    assert min(min(b) for b in seen[1:3]) <= secs[len(secs) // 20]  # within two more batches: the best 5%


def test_an_untrained_model_gets_space_filling_batches() -> None:
    """With no prior, before the model can tell configs apart, each batch covers the space: its configs lie
    farther from their nearest neighbour (in knobs that differ; the first batch counts as a
    neighbour of the second) than in random batches."""
    def spacing(batch: list, others: list) -> float:
        pts = batch + others
        return sum(min(sum(a[k] != b[k] for k in a) for b in pts if b is not a) for a in batch) / len(batch)

    space = TASK.space()
    strategy, _ = guided_search(TASK, "xgb", roofline=False, seed=2)
    first = strategy.propose(6)
    strategy.update(first, [MeasureResult(costs=(1e-3,))] * 6)  # too few to fit: still uninformed
    second = strategy.propose(6)
    rng = random.Random(0)
    for got, size in ((spacing(first, []), 6), (spacing(second, first), 12)):
        randoms = sorted(spacing(space.sample_new(rng, set(), size), []) for _ in range(50))
        assert got > randoms[-3]  # farther apart than 48 random batches of 50


def test_make_search_picks_the_guided_search_for_a_cost_model() -> None:
    strategy, callbacks = make_search(TASK, cost_model="xgb", seed=0)
    assert strategy.name == "evolutionary+xgb(prior roofline)" and len(callbacks) == 1
    strategy, callbacks = make_search(TASK, strategy="random", seed=0)
    assert strategy.name == "random" and callbacks == []
