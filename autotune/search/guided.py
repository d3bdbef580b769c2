"""Glue between a cost model and the search: a scorer for candidates, and a tuner callback that
refits the model on each batch of measurements.

Example::

    >>> from autotune.search.guided import guided_search     # doctest: +SKIP
    >>> strategy, callback = guided_search(task, "xgb")          # doctest: +SKIP

Runs take both through autotune.tuning (make_search, tune(cost_model=...)).
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Sequence

import numpy as np

from autotune.backends import backend_of
from autotune.cost_model import CostModel, Dataset, make_model
from autotune.backends import config_features, config_graph, feature_schema
from autotune.cost_model.metrics import kendall_tau
from autotune.search.transfer import prior_for
from autotune.errors import AutotuneError
from autotune.runner import MeasureResult
from autotune.search.evolutionary import EvolutionarySearch
from autotune.space import Config
from autotune.task import Task


class ModelScorer:
    """Scores configs of one task with a model; features are cached per config.

    With a prior (a pretrained model), scores blend the prior and the model fitted to this
    task's own measurements: each is standardised over a fixed random sample of the task's
    configs, and the prior's weight, trust * prior_samples / (prior_samples + measured), fades as
    the task's own data grow. trust is how well the prior ranks what this task has measured so
    far (Kendall tau over `trusted_tau`, clipped to [0, 1]; see judge_prior): a prior that
    transfers badly loses its say after a batch or two instead of holding the search back.

    Every informed score is on that one scale (a model's prediction standardised over the fixed
    sample: 0 a typical config of the task, 1 one standard deviation faster), whichever model
    gives it: a monotone map of each model's own, so the search ranks as it would by the raw
    predictions, and the scores logged beside the measurements (Record.predicted) compare across
    the run, from the prior's first picks to the fitted model's last."""

    def __init__(self, model: CostModel, task: Task, prior: CostModel | None = None, prior_samples: int = 16,
                 seed: int = 0, trusted_tau: float = 0.3) -> None:
        self.model, self.task, self.trained, self.prior = model, task, False, prior
        self.prior_samples, self.measured = prior_samples, 0
        self.trusted_tau, self.prior_trust = trusted_tau, 1.0
        self.cache: dict[Config, np.ndarray] = {}
        self.graph_cache: dict[Config, object] = {}
        self.seed = seed
        self._reference: list[Config] | None = None
        self._stats: dict[int, tuple[float, float]] = {}

    @property
    def informed(self) -> bool:
        """Whether the scores mean anything yet (a trusted prior, or a model fitted to this task)."""
        return self.trained or (self.prior is not None and self.prior_trust > 0)

    def judge_prior(self, configs: Sequence[Config], seconds: Sequence[float]) -> None:
        """Set prior_trust from how the prior ranks these measured configs of the task (a failed
        one, at infinite seconds, counts as slower than any that ran)."""
        if self.prior is None:
            return
        t = np.asarray(seconds, np.float64)
        finite = t[np.isfinite(t)]
        if len(configs) < 4 or len(np.unique(finite)) < 2:
            return  # too little to judge by: the prior keeps the trust it has
        t[~np.isfinite(t)] = 2 * finite.max()
        tau = kendall_tau(self.prior.predict(self.batch(configs, self.prior)), t)
        self.prior_trust = float(np.clip(tau / self.trusted_tau, 0.0, 1.0))

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        rows = []
        for c in configs:
            f = self.cache.get(c)
            if f is None:
                try:
                    f = config_features(self.task, c)
                except AutotuneError:  # an invalid schedule: score it last
                    f = np.full(feature_schema(self.task).length, np.nan, np.float32)
                self.cache[c] = f
            rows.append(f)
        return np.stack(rows) if rows else np.zeros((0, feature_schema(self.task).length), np.float32)

    def graphs(self, configs: Sequence[Config]) -> list:  # type: ignore[type-arg]
        out = []
        for c in configs:
            g = self.graph_cache.get(c)
            if g is None:
                g = self.graph_cache[c] = config_graph(self.task, c)
            out.append(g)
        return out

    def batch(self, configs: Sequence[Config], model: CostModel | None = None) -> Dataset:
        """What a model scores: features, plus program graphs for graph models."""
        X = self.features(configs)
        ds = Dataset(X=np.nan_to_num(X))
        if (model or self.model).needs_graphs:
            ok = [c for c, row in zip(configs, X) if not np.isnan(row).any()]
            gs = dict(zip(ok, self.graphs(ok)))
            ds.graphs = [gs.get(c) or gs[ok[0]] for c in configs] if ok else None
        return ds

    def refitted(self) -> None:
        """The task model changed: its standardisation is stale."""
        self._stats.pop(id(self.model), None)

    def _standard(self, model: CostModel, configs: Sequence[Config]) -> np.ndarray:
        if id(model) not in self._stats:
            if self._reference is None:
                self._reference = self.task.space().sample_new(random.Random(self.seed), set(), 128)
            ok = ~np.isnan(self.features(self._reference)).any(axis=1)
            ref = [c for c, good in zip(self._reference, ok) if good] or list(self._reference)
            p = np.asarray(model.predict(self.batch(ref, model)), np.float64)
            self._stats[id(model)] = (float(p.mean()), float(p.std()) or 1.0)
        mean, std = self._stats[id(model)]
        return (np.asarray(model.predict(self.batch(configs, model)), np.float64) - mean) / std

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        if not self.informed:  # every config alike: no features needed yet
            return np.zeros(len(configs))
        X = self.features(configs)
        prior = self.prior
        w = self.prior_trust * self.prior_samples / (self.prior_samples + self.measured)
        if prior is None or not w:
            out = self._standard(self.model, configs)
        elif not self.trained:
            out = self._standard(prior, configs)
        else:
            out = w * self._standard(prior, configs) + (1 - w) * self._standard(self.model, configs)
        out[np.isnan(X).any(axis=1)] = -math.inf
        return out


class ModelUpdater:
    """A tuner callback: add each batch to the task's dataset and refit (or warm-start) the model."""

    def __init__(self, scorer: ModelScorer, min_samples: int = 8) -> None:
        self.scorer = scorer
        self.data = Dataset()
        self.configs: list[Config] = []  # what data holds, row by row
        self.min_samples = min_samples
        self.fits = 0

    def __call__(self, task: Task, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        X = self.scorer.features(configs)
        keep = ~np.isnan(X).any(axis=1)
        secs = [r.median if r.ok else math.inf for r in results]
        kept = [c for c, k in zip(configs, keep) if k]
        graphs = self.scorer.graphs(kept) if self.scorer.model.needs_graphs else None
        self.data.add(X[keep], [s for s, k in zip(secs, keep) if k], task.key(), graphs)
        self.configs += kept
        self.scorer.measured = len(self.data)
        self.scorer.judge_prior(self.configs, self.data.seconds)
        if len(self.data) >= self.min_samples and np.isfinite(self.data.y).any() and self.data.y.max() > 0:
            self.scorer.model.update(self.data)
            self.scorer.trained = True
            self.scorer.refitted()
            self.fits += 1


def guided_search(task: Task, model: str | CostModel = "xgb", *, pretrained: str | Path | None = None,
                  roofline: bool = True, seed: int = 0,
                  epsilon: float = 0.1) -> tuple[EvolutionarySearch, ModelUpdater]:
    """A model-guided evolutionary strategy and the callback that keeps its model fitted. The
    search starts from a prior: with `pretrained`, that saved model (refitted with the training
    tasks most like this one weighing most, when the file carries its training set: see
    autotune.search.transfer); without one, the prior of the task's backend, which needs no
    logs (on a CPU the roofline estimate, RooflineModel; the TPU emulator has none);
    roofline=False: no prior, the first batches cover the space blind. A fresh
    `model` learns this task's measurements and takes over as they accumulate; a prior that ranks
    the first measurements badly loses its say."""
    prior: CostModel | None = None
    if pretrained is not None:
        prior = prior_for(pretrained, task)
    elif roofline:
        prior = backend_of(task).prior(task)
    m = make_model(model, seed=seed, task=task) if isinstance(model, str) else model
    scorer = ModelScorer(m, task, prior=prior, seed=seed)
    strategy = EvolutionarySearch(task.space(), seed=seed, score=scorer, epsilon=epsilon,
                                  score_informed=scorer.informed)
    origin = "pretrained" if pretrained is not None else "prior"
    strategy.name = f"evolutionary+{m.kind}" + (f"({origin} {prior.kind})" if prior else "")  # type: ignore[misc]
    return strategy, ModelUpdater(scorer)

