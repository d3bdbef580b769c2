"""Random search: distinct uniform samples of the space."""
from __future__ import annotations

import random
from typing import Sequence

from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult


class RandomSearch:
    """Uniform random configs, never repeating one (seeded).

    Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> s = RandomSearch(ConfigSpace([ChoiceKnob("a", [1, 2, 3])]), seed=0)
        >>> len(s.propose(5))
        3
        >>> s.propose(1) is None
        True
    """
    name = "random"

    def __init__(self, space: ConfigSpace, seed: int = 0) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.seen: set[Config] = set()

    def propose(self, n: int) -> list[Config] | None:
        out = self.space.sample_new(self.rng, self.seen, n)
        self.seen.update(out)
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self.seen.update(configs)
