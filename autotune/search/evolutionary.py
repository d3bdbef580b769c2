"""Evolutionary search: a population of measured configs; children by crossover and mutation of
knobs; elitism; a config is never measured twice.

`score` (optional) ranks candidate children before they are proposed: it is where a cost
model plugs in (model-guided search); without it children are proposed as bred. While the
scores carry no information (a model not yet trained scores every config alike), a model round
proposes a space-filling batch instead: configs as far (in knobs) from each other and from
everything measured as a random pool allows, so the model's first data cover the space.

Once the scores mean something, every config proposed keeps the score it had when it was chosen
(`prediction`, the random share too): the tuner logs it beside the measurement, so the model's
predictions can be held against what was measured (`autotune dashboard`).
"""
from __future__ import annotations

import math
import random
from typing import Callable, Sequence

from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult

Scorer = Callable[[Sequence[Config]], Sequence[float]]  # higher is better


class EvolutionarySearch:
    """Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> es = EvolutionarySearch(ConfigSpace([ChoiceKnob("a", list(range(20))), ChoiceKnob("b", [0, 1])]))
        >>> len(es.propose(4))
        4
    """
    name = "evolutionary"

    def __init__(self, space: ConfigSpace, seed: int = 0, population: int = 32, elite: int = 4,
                 mutation_rate: float = 0.3, crossover_rate: float = 0.5, score: Scorer | None = None,
                 generations: int = 3, model_population: int = 256,
                 epsilon: float = 0.1, score_informed: bool = False, prior_share: float = 0.5) -> None:
        """With `score`, each round evolves `model_population` configs for `generations` on the
        predicted scores and proposes the best unmeasured ones, plus an `epsilon` share of random
        configs (exploration the model cannot bias). score_informed: the scores mean something
        before anything is measured (a pretrained model), so the first round evolves on them too;
        it takes `prior_share` of its batch from the scores and fills the rest space-filling, so
        the first measurements can show whether the scores were right."""
        if not 0 < prior_share <= 1:
            raise ValueError(f"prior_share must be in (0, 1], got {prior_share!r}")
        self.space = space
        self.rng = random.Random(seed)
        self.population, self.elite = population, elite
        self.mutation_rate, self.crossover_rate = mutation_rate, crossover_rate
        self.score = score
        self.generations, self.model_population, self.epsilon = generations, model_population, epsilon
        self.score_informed, self.prior_share = score_informed, prior_share
        self._explore = 0.0
        self._informed = False  # the last model round's scores told configs apart
        self.predictions: dict[Config, float] = {}  # proposed configs' scores when chosen
        self.seen: set[Config] = set()
        self.measured: dict[Config, float] = {}

    def _parents(self) -> list[Config]:
        ranked = sorted((c for c, v in self.measured.items() if math.isfinite(v)), key=self.measured.__getitem__)
        return ranked[:self.population]

    def _tournament(self, parents: list[Config]) -> Config:
        a, b = self.rng.choice(parents), self.rng.choice(parents)
        return a if self.measured[a] <= self.measured[b] else b

    def _child(self, parents: list[Config]) -> Config:
        if not parents:
            return self.space.sample(self.rng)
        p = self._tournament(parents)
        child = dict(p)
        if len(parents) > 1 and self.rng.random() < self.crossover_rate:
            q = self._tournament(parents)
            for k in child:
                if self.rng.random() < 0.5:
                    child[k] = q[k]
        c = Config(child)
        if self.rng.random() < self.mutation_rate or c in self.seen or not self.space.allows(c):
            c = self.space.mutate(c, self.rng)
        return c

    def _model_round(self, n: int) -> list[Config]:
        """Evolve on predicted scores; return up to n unmeasured configs, best predicted first."""
        assert self.score is not None
        pop = self._parents()[:self.model_population // 2]
        pop_set = set(pop)
        while len(pop) < self.model_population and len(pop_set) < len(self.space):
            c = self.space.sample(self.rng)
            if c not in pop_set:
                pop.append(c)
                pop_set.add(c)
        scored: dict[Config, float] = dict(zip(pop, map(float, self.score(pop))))
        self._informed = len(set(scored.values())) > 1
        if not self._informed:  # an uninformed model: cover the space instead
            return _spread_out([c for c in pop if c not in self.seen], n, list(self.measured))
        for _ in range(self.generations):
            ranked = sorted(scored, key=lambda c: -scored[c])[:self.model_population]
            kids: list[Config] = []
            for _ in range(self.model_population):
                a, b = self.rng.choice(ranked[:max(2, len(ranked) // 2)]), self.rng.choice(ranked)
                child = {k: (a[k] if self.rng.random() < 0.5 else b[k]) for k in a}
                c = Config(child)
                if self.rng.random() < self.mutation_rate or c in scored or not self.space.allows(c):
                    c = self.space.mutate(c, self.rng)
                if c not in scored and c not in kids:
                    kids.append(c)
            if kids:
                scored.update(zip(kids, map(float, self.score(kids))))
        ranked = [c for c in sorted(scored, key=lambda c: -scored[c]) if c not in self.seen]
        out = _diverse(ranked, n)
        self._keep_predictions(out, scored)
        return out

    def _keep_predictions(self, configs: Sequence[Config], scored: dict[Config, float] | None = None) -> None:
        """Keep the scores of proposed configs (those not scored yet are scored now), while the
        scores tell configs apart; a config the model cannot score (-inf) keeps none."""
        if self.score is None or not self._informed:
            return
        configs = [c for c in configs if c not in self.predictions]
        scored = scored or {}
        rest = [c for c in configs if c not in scored]
        if rest:
            scored = {**scored, **dict(zip(rest, map(float, self.score(rest))))}
        for c in configs:
            if math.isfinite(scored[c]):
                self.predictions[c] = scored[c]

    def prediction(self, config: Config) -> float | None:
        """The model's score of a proposed config when it was chosen (higher: predicted faster);
        None when no informed model scored it."""
        return self.predictions.get(config)

    def propose(self, n: int) -> list[Config] | None:
        if self.score is not None and not (self.measured or self.score_informed):
            pool = self.space.sample_new(self.rng, self.seen, self.model_population)
            out = _spread_out(pool, n, [])
            self.seen.update(out)
            return out or None
        if self.score is not None and not self.measured:  # informed scores before any measurement
            out = self._model_round(max(1, round(n * self.prior_share)))
            pool = self.space.sample_new(self.rng, self.seen | set(out), self.model_population)
            out += _spread_out(pool, n - len(out), out)
            self._keep_predictions(out)
            self.seen.update(out)
            return out or None
        if self.score is not None:
            self._explore += self.epsilon * n  # an epsilon share over rounds, however small the batches
            n_rand = min(int(self._explore), n)
            self._explore -= n_rand
            out = self._model_round(n - n_rand)
            out += self.space.sample_new(self.rng, self.seen | set(out), n - len(out))
            self._keep_predictions(out)
            self.seen.update(out)
            return out or None
        parents = self._parents()
        pool: list[Config] = []
        pool_set: set[Config] = set()
        tries = 0
        while len(pool) < n and tries < 50 * n + 100 and len(self.seen) + len(pool) < len(self.space):
            tries += 1
            explore = not parents or self.rng.random() < 0.1
            c = self.space.sample(self.rng) if explore else self._child(parents)
            if c not in self.seen and c not in pool_set:
                pool.append(c)
                pool_set.add(c)
        out = pool[:n]
        self.seen.update(out)
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            self.seen.add(c)
            self.measured[c] = r.median if r.ok else math.inf


def _knob_distance(a: Config, b: Config) -> int:
    """How many knobs two configs of one space set differently."""
    return sum(a[k] != b[k] for k in a)


def _diverse(ranked: list[Config], n: int, min_distance: int = 2) -> list[Config]:
    """The best-ranked configs, skipping any within `min_distance` knobs of one already taken
    (a batch of near-copies of one prediction teaches the model little); topped up in rank
    order when too few differ enough."""
    out: list[Config] = []
    for c in ranked:
        if len(out) == n:
            return out
        if all(_knob_distance(c, o) >= min_distance for o in out):
            out.append(c)
    taken = set(out)
    out += [c for c in ranked if c not in taken][:n - len(out)]
    return out


def _spread_out(pool: list[Config], n: int, taken: list[Config]) -> list[Config]:
    """Greedy max-min selection: n configs of the pool, each as far (knobs that differ) from the
    configs already taken as possible; ties go to the earlier (random) pool order."""
    chosen: list[Config] = []
    near = [min((_knob_distance(c, t) for t in taken), default=len(c)) for c in pool]
    left = list(range(len(pool)))
    while left and len(chosen) < n:
        i = max(left, key=lambda j: near[j])
        left.remove(i)
        chosen.append(pool[i])
        for j in left:
            near[j] = min(near[j], _knob_distance(pool[j], pool[i]))
    return chosen
