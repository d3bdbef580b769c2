"""Evolutionary search: a population of measured configs; children by crossover and mutation of
knobs; elitism; a config is never measured twice.

`score` (optional) ranks candidate children before they are proposed: it is where a cost
model plugs in (model-guided search); without it children are proposed as bred.
"""
from __future__ import annotations

import math
import random
from typing import Callable, Sequence

from autotune.space import Config, ConfigSpace
from measure.runner import MeasureResult

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
                 candidates_per_slot: int = 8) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.population, self.elite = population, elite
        self.mutation_rate, self.crossover_rate = mutation_rate, crossover_rate
        self.score = score
        self.candidates_per_slot = candidates_per_slot
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
        if self.rng.random() < self.mutation_rate or c in self.seen:
            c = self.space.mutate(c, self.rng)
        return c

    def propose(self, n: int) -> list[Config] | None:
        parents = self._parents()
        want = n * (self.candidates_per_slot if self.score else 1)
        pool: list[Config] = []
        pool_set: set[Config] = set()
        tries = 0
        while len(pool) < want and tries < 50 * want + 100 and len(self.seen) + len(pool) < len(self.space):
            tries += 1
            explore = not parents or self.rng.random() < 0.1
            c = self.space.sample(self.rng) if explore else self._child(parents)
            if c not in self.seen and c not in pool_set:
                pool.append(c)
                pool_set.add(c)
        if self.score and pool:
            scores = list(self.score(pool))
            order = sorted(range(len(pool)), key=lambda i: -scores[i])
            pool = [pool[i] for i in order]
        out = pool[:n]
        self.seen.update(out)
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            self.seen.add(c)
            self.measured[c] = r.median if r.ok else math.inf
