"""Search strategies, one per module, behind the batch ask/tell Strategy interface.

    >>> from autotune.search import make_strategy
    >>> from autotune.space import ConfigSpace, ChoiceKnob
    >>> make_strategy("random", ConfigSpace([ChoiceKnob("a", [1, 2])]), seed=0).name
    'random'
"""
from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.search.annealing import SimulatedAnnealing
from autotune.search.base import Strategy
from autotune.search.evolutionary import EvolutionarySearch
from autotune.search.grid import GridSearch
from autotune.search.islands import IslandSearch
from autotune.search.optuna_search import OptunaSearch
from autotune.search.random_search import RandomSearch
from autotune.space import ConfigSpace

STRATEGIES = ("random", "grid", "annealing", "evolutionary", "islands", "tpe", "cmaes")


def make_strategy(name: str | Strategy, space: ConfigSpace, seed: int = 0) -> Strategy:
    """A strategy by name (or the strategy itself): one of STRATEGIES."""
    if not isinstance(name, str):
        return name
    if name == "random":
        return RandomSearch(space, seed)
    if name == "grid":
        return GridSearch(space, seed)
    if name == "annealing":
        return SimulatedAnnealing(space, seed)
    if name == "evolutionary":
        return EvolutionarySearch(space, seed)
    if name == "islands":
        return IslandSearch(space, seed)
    if name in ("tpe", "cmaes"):
        return OptunaSearch(space, seed, sampler=name)
    raise AutotuneError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


__all__ = ["STRATEGIES", "EvolutionarySearch", "GridSearch", "IslandSearch", "OptunaSearch", "RandomSearch", "SimulatedAnnealing",
           "Strategy", "make_strategy"]
