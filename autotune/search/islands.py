"""An island model: several evolutionary sub-populations, each proposing a share of every batch
(so a round's measurements spread over a cluster), with the best configs migrating between
islands every few rounds."""
from __future__ import annotations

import math
from typing import Sequence

from autotune.search.evolutionary import EvolutionarySearch
from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult


class IslandSearch:
    """Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> s = IslandSearch(ConfigSpace([ChoiceKnob("a", list(range(50)))]), islands=3)
        >>> len(s.propose(6))
        6
    """
    name = "islands"

    def __init__(self, space: ConfigSpace, seed: int = 0, islands: int = 4, migrate_every: int = 2,
                 migrants: int = 2) -> None:
        self.space = space
        self.islands = [EvolutionarySearch(space, seed=seed * 1000 + i) for i in range(islands)]
        self.migrate_every, self.migrants = migrate_every, migrants
        self.owner: dict[Config, int] = {}
        self.seen: set[Config] = set()
        self.rounds = 0

    def propose(self, n: int) -> list[Config] | None:
        out: list[Config] = []
        share = [n // len(self.islands) + (i < n % len(self.islands)) for i in range(len(self.islands))]
        for i, (isl, k) in enumerate(zip(self.islands, share)):
            if k == 0:
                continue
            isl.seen |= self.seen  # islands never propose what another already measured
            for c in isl.propose(k) or []:
                if c not in self.seen:
                    self.seen.add(c)
                    self.owner[c] = i
                    out.append(c)
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        by_island: dict[int, tuple[list[Config], list[MeasureResult]]] = {}
        for c, r in zip(configs, results):
            self.seen.add(c)
            i = self.owner.get(c, 0)
            by_island.setdefault(i, ([], []))[0].append(c)
            by_island[i][1].append(r)
        for i, (cs, rs) in by_island.items():
            self.islands[i].update(cs, rs)
        self.rounds += 1
        if self.rounds % self.migrate_every == 0:
            self._migrate()

    def _migrate(self) -> None:
        """Each island sends its best configs (with their results) to the next island (a ring)."""
        for i, isl in enumerate(self.islands):
            best = sorted((c for c, v in isl.measured.items() if math.isfinite(v)), key=isl.measured.__getitem__)
            dest = self.islands[(i + 1) % len(self.islands)]
            for c in best[:self.migrants]:
                dest.measured.setdefault(c, isl.measured[c])
                dest.seen.add(c)
