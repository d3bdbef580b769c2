"""Simulated annealing over the neighbour graph of the space, in batches."""
from __future__ import annotations

import math
import random
from typing import Sequence

from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult


class SimulatedAnnealing:
    """Walks from the current config to neighbours; accepts a slower one with probability
    exp(-(log t_new - log t_cur) / T), T decaying geometrically per measurement.

    Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> sa = SimulatedAnnealing(ConfigSpace([ChoiceKnob("a", list(range(10)))]), seed=1)
        >>> len(sa.propose(3))
        3
    """
    name = "annealing"

    def __init__(self, space: ConfigSpace, seed: int = 0, temperature: float = 0.3, cooling: float = 0.97) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.t = temperature
        self.cooling = cooling
        self.seen: set[Config] = set()
        self.current: Config | None = None
        self.current_cost = math.inf

    def _fresh(self) -> Config | None:
        got = self.space.sample_new(self.rng, self.seen, 1)
        return got[0] if got else None

    def propose(self, n: int) -> list[Config] | None:
        out: list[Config] = []
        frontier = [c for c in (self.space.neighbours(self.current) if self.current else []) if c not in self.seen]
        self.rng.shuffle(frontier)
        while len(out) < n and len(self.seen) < len(self.space):
            c = frontier.pop() if frontier else self._fresh()
            if c is None:
                break
            if c in self.seen:
                continue
            self.seen.add(c)
            out.append(c)
            if not frontier and out and self.current is not None:
                # walk on from a fresh neighbour so a batch explores a path, not one point
                frontier = [x for x in self.space.neighbours(out[-1]) if x not in self.seen]
                self.rng.shuffle(frontier)
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            self.seen.add(c)
            cost = math.log(r.median) if r.ok else math.inf
            if self.current is None or cost < self.current_cost:
                self.current, self.current_cost = c, cost
            elif math.isfinite(cost) and self.rng.random() < math.exp(-(cost - self.current_cost) / max(self.t, 1e-9)):
                self.current, self.current_cost = c, cost
            self.t *= self.cooling
