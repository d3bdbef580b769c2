"""Search strategies, one per module, behind the batch ask/tell Strategy interface.

    >>> from autotune.search import make_strategy
    >>> from autotune.space import ConfigSpace, ChoiceKnob
    >>> make_strategy("random", ConfigSpace([ChoiceKnob("a", [1, 2])]), seed=0).name
    'random'
"""
from __future__ import annotations

from typing import Callable

from autotune.errors import AutotuneError
from autotune.search.annealing import SimulatedAnnealing
from autotune.search.base import Strategy
from autotune.search.evolutionary import EvolutionarySearch
from autotune.search.grid import GridSearch
from autotune.search.islands import IslandSearch
from autotune.search.optuna_search import OptunaSearch
from autotune.search.random_search import RandomSearch
from autotune.space import ConfigSpace

# name -> factory(space, seed): the one list of strategies (the CLI's --strategy choices come from it)
REGISTRY: dict[str, Callable[[ConfigSpace, int], Strategy]] = {
    "random": RandomSearch,
    "grid": GridSearch,
    "annealing": SimulatedAnnealing,
    "evolutionary": EvolutionarySearch,
    "islands": IslandSearch,
    "tpe": lambda space, seed: OptunaSearch(space, seed, sampler="tpe"),
    "cmaes": lambda space, seed: OptunaSearch(space, seed, sampler="cmaes"),
}
STRATEGIES = tuple(REGISTRY)


def make_strategy(name: str | Strategy, space: ConfigSpace, seed: int = 0) -> Strategy:
    """A strategy by name (or the strategy itself): one of STRATEGIES."""
    if not isinstance(name, str):
        return name
    factory = REGISTRY.get(name)
    if factory is None:
        raise AutotuneError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return factory(space, seed)


__all__ = ["REGISTRY", "STRATEGIES", "EvolutionarySearch", "GridSearch", "IslandSearch", "OptunaSearch", "RandomSearch", "SimulatedAnnealing",
           "Strategy", "make_strategy"]
