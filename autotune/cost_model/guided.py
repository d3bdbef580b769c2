"""Glue between a cost model and the search: a scorer for candidates, and a tuner callback that
refits the model on each batch of measurements.

Example::

    >>> from autotune.cost_model.guided import guided_search     # doctest: +SKIP
    >>> strategy, callback = guided_search(task, "xgb")          # doctest: +SKIP
    >>> Tuner(task, strategy, runner, log, callbacks=[callback]).run(...)  # doctest: +SKIP
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from autotune.cost_model import CostModel, Dataset, load_model, make_model
from autotune.cost_model.features import config_features, feature_length
from autotune.errors import AutotuneError
from autotune.search.evolutionary import EvolutionarySearch
from autotune.space import Config
from autotune.task import Task
from measure.runner import MeasureResult


class ModelScorer:
    """Scores configs of one task with a model; features are cached per config."""

    def __init__(self, model: CostModel, task: Task, trained: bool) -> None:
        self.model, self.task, self.trained = model, task, trained
        self.cache: dict[Config, np.ndarray] = {}
        self.graph_cache: dict[Config, object] = {}

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        rows = []
        for c in configs:
            f = self.cache.get(c)
            if f is None:
                try:
                    f = config_features(self.task, c)
                except AutotuneError:  # an invalid schedule: score it last
                    f = np.full(feature_length(), np.nan, np.float32)
                self.cache[c] = f
            rows.append(f)
        return np.stack(rows) if rows else np.zeros((0, feature_length()), np.float32)

    def graphs(self, configs: Sequence[Config]) -> list:  # type: ignore[type-arg]
        from autotune.cost_model.graph import config_graph
        out = []
        for c in configs:
            g = self.graph_cache.get(c)
            if g is None:
                g = self.graph_cache[c] = config_graph(self.task, c)
            out.append(g)
        return out

    def batch(self, configs: Sequence[Config]) -> Dataset:
        """What the model scores: features, plus program graphs for graph models."""
        X = self.features(configs)
        ds = Dataset(X=np.nan_to_num(X))
        if getattr(self.model, "needs_graphs", False):
            ok = [c for c, row in zip(configs, X) if not np.isnan(row).any()]
            gs = dict(zip(ok, self.graphs(ok)))
            ds.graphs = [gs.get(c) or gs[ok[0]] for c in configs] if ok else None
        return ds

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        X = self.features(configs)
        if not self.trained:
            return np.zeros(len(configs))
        bad = np.isnan(X).any(axis=1)
        out = np.asarray(self.model.predict(self.batch(configs)), np.float64)
        out[bad] = -math.inf
        return out


class ModelUpdater:
    """A tuner callback: add each batch to the task's dataset and refit (or warm-start) the model."""

    def __init__(self, scorer: ModelScorer, min_samples: int = 8) -> None:
        self.scorer = scorer
        self.data = Dataset()
        self.min_samples = min_samples
        self.fits = 0

    def __call__(self, task: Task, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        X = self.scorer.features(configs)
        keep = ~np.isnan(X).any(axis=1)
        secs = [r.median if r.ok else math.inf for r in results]
        kept = [c for c, k in zip(configs, keep) if k]
        graphs = self.scorer.graphs(kept) if getattr(self.scorer.model, "needs_graphs", False) else None
        self.data.add(X[keep], [s for s, k in zip(secs, keep) if k], task.key(), graphs)
        if len(self.data) >= self.min_samples and np.isfinite(self.data.y).any() and self.data.y.max() > 0:
            self.scorer.model.update(self.data)
            self.scorer.trained = True
            self.fits += 1


def guided_search(task: Task, model: str | CostModel = "xgb", *, pretrained: str | Path | None = None,
                  seed: int = 0, epsilon: float = 0.1) -> tuple[EvolutionarySearch, ModelUpdater]:
    """A model-guided evolutionary strategy and the callback that keeps its model fitted."""
    if pretrained is not None:
        m = load_model(pretrained)
        trained = True
    else:
        m = make_model(model, seed=seed) if isinstance(model, str) else model
        trained = False
    scorer = ModelScorer(m, task, trained)
    strategy = EvolutionarySearch(task.space(), seed=seed, score=scorer, epsilon=epsilon, score_informed=trained)
    strategy.name = f"evolutionary+{m.kind}" + ("(pretrained)" if pretrained else "")  # type: ignore[misc]
    return strategy, ModelUpdater(scorer)


def make_search(task: Task, *, strategy: str = "evolutionary", cost_model: str | None = None,
                pretrained: str | Path | None = None, seed: int = 0) -> tuple[object, list]:  # type: ignore[type-arg]
    """The strategy a command asked for and the tuner callbacks it needs: a cost model (or a
    pretrained one) means model-guided evolutionary search with its refitting callback.

    Example::

        >>> strategy, callbacks = make_search(task, cost_model="xgb")   # doctest: +SKIP
    """
    if cost_model or pretrained:
        search, updater = guided_search(task, cost_model or "xgb", pretrained=pretrained, seed=seed)
        return search, [updater]
    from autotune.search import make_strategy
    return make_strategy(strategy, task.space(), seed=seed), []
