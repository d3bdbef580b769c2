"""The search-strategy interface: batch ask/tell. Strategies are pure: no I/O, no timing.

    configs = strategy.propose(n)     # up to n new configs, or None when the space is exhausted
    strategy.update(configs, results) # what they measured (MeasureResult, errors included)
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from autotune.space import Config
from autotune.runner import MeasureResult


@runtime_checkable
class Strategy(Protocol):
    name: str

    def propose(self, n: int) -> list[Config] | None:
        """Up to n configs never proposed before; None when nothing is left."""
        ...

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Learn from measurements (also called with results replayed from a log on resume)."""
        ...
