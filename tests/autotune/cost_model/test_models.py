"""Cost models: one contract over every implementation, the registry, and metrics."""
from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import (CPU_MODELS, MODELS, REGISTRY, TRAINABLE_MODELS, CostModel, Dataset, ModelError,
                                 load_model, make_model)
from autotune.backends import config_features, config_graph
from autotune.backends.cpu.features import FEATURE_VERSION, feature_length
from autotune.cost_model.metrics import ape, kendall_tau, mape, top_k_score
from autotune.task import Task
from tests.helpers import cached_features

TASK = Task.create("matmul", "96x80x64", threads=2)


def synthetic(n: int = 60, seed: int = 0) -> tuple[Dataset, list]:
    """Real features of real configs, with a runtime that depends on the features."""
    rng = random.Random(seed)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(n)}, key=lambda c: c.key())
    graphs = [config_graph(TASK, c) for c in cfgs]
    X = np.stack([g.config_feat for g in graphs])
    # the columns that vary most over these configs: which ones depends on the target's space
    # (on AVX2 the innermost loop kind is the same for every sampled config)
    z = (X - X.mean(axis=0)) / np.maximum(X.std(axis=0), 1e-9)
    top = sorted(np.argsort(-X.std(axis=0), kind="stable")[:3])
    secs = list(1e-4 * np.exp(0.3 * (z[:, top[0]] + 0.5 * z[:, top[1]] + 0.1 * z[:, top[2]])))
    ds = Dataset()
    ds.add(X, secs, TASK.key(), graphs)
    return ds, secs


def test_features_have_a_fixed_versioned_schema() -> None:
    f = config_features(TASK, TASK.space().sample(random.Random(0)))
    assert f.shape == (feature_length(),) and f.dtype == np.float32 and FEATURE_VERSION == 3
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
        # learning neither task (weights ignored) ranks at tau ~0; LightGBM's ranker reaches 0.45-0.6 here
        assert sign * kendall_tau(m.predict(ds), secs) > 0.3


def test_one_registry_names_every_model() -> None:
    assert MODELS == tuple(REGISTRY) == REGISTRY.names() == ("analytical", "gnn", "lgbm", "random", "roofline", "xgb")
    assert CPU_MODELS == ("gnn", "lgbm", "random", "roofline", "xgb")  # analytical reads TPU tile features
    assert TRAINABLE_MODELS == ("gnn", "lgbm", "random", "xgb")        # nothing to learn in the estimates
    for kind in MODELS:
        m = make_model(kind)
        assert isinstance(m, CostModel) and m.kind == kind
        assert m.needs_graphs is (kind == "gnn")  # declared by every model, not probed


def test_the_extra_a_missing_package_names_installs_it() -> None:
    import configparser

    from autotune.environment import ROOT
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    needs = [(kind, module, extra) for kind, e in REGISTRY.items() for module, _, extra in e.requires]
    assert ("gnn", "torch", "gnn") in needs
    for kind, module, extra in needs:  # the hint of check_available: pip install '.[EXTRA]' in autotune's checkout
        assert module in extras[extra].split() or any(r.startswith(module + "=") for r in extras[extra].split()), \
            (kind, extra)
        assert module in extras["all"], (kind, "all")


def test_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not been trained"):
        make_model("xgb").predict(np.zeros((1, feature_length())))
    with pytest.raises(ModelError, match="unknown cost model"):
        make_model("svm")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ModelError, match="not an autotune model"):
        load_model(tmp_path / "bad.json")
    make_model("random").save(tmp_path / "svm.json")
    (tmp_path / "svm.json").write_text((tmp_path / "svm.json").read_text().replace('"random"', '"svm"'))
    with pytest.raises(ModelError, match="unknown model kind 'svm'; known kinds: analytical, gnn, "):
        load_model(tmp_path / "svm.json")


def test_metrics() -> None:
    secs = [1.0, 2.0, 4.0, math.inf]
    perfect = [4.0, 3.0, 2.0, 1.0]
    assert kendall_tau(perfect, secs) == pytest.approx(1.0)
    assert top_k_score(perfect, secs, 1) == 1.0
    assert top_k_score([0, 3, 2, 1], secs, 1) == 0.5
    assert ape([0, 3, 2, 1], secs) == pytest.approx(100.0)
    assert mape([1.1, 2.2], [1.0, 2.0]) == pytest.approx(10.0)


def landscape(task, cfg) -> float:  # type: ignore[no-untyped-def]
    """A runtime that follows the features: what a model can learn (shared with other test modules)."""
    f = cached_features(task, cfg)
    return float(1e-4 * (1 + f[4] + 0.5 * f[10] + 0.1 * f[0]))
