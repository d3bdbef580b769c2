"""Grid search: every config of the space in order, each once."""
from __future__ import annotations

from typing import Iterator, Sequence

from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult


class GridSearch:
    """Enumerates the space (knob by knob, last knob fastest). The seed is accepted and unused.

    Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> g = GridSearch(ConfigSpace([ChoiceKnob("a", [1, 2])]))
        >>> [c["a"] for c in g.propose(5)]
        [1, 2]
    """
    name = "grid"

    def __init__(self, space: ConfigSpace, seed: int = 0) -> None:
        self.space = space
        self._it: Iterator[Config] = space.grid()
        self.seen: set[Config] = set()

    def propose(self, n: int) -> list[Config] | None:
        out: list[Config] = []
        for cfg in self._it:
            if cfg not in self.seen:
                self.seen.add(cfg)
                out.append(cfg)
                if len(out) == n:
                    break
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self.seen.update(configs)
