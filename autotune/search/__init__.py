"""Search strategies, one per module, behind the batch ask/tell Strategy interface.

    >>> from autotune.search import make_strategy
    >>> from autotune.space import ConfigSpace, ChoiceKnob
    >>> make_strategy("random", ConfigSpace([ChoiceKnob("a", [1, 2])]), seed=0).name
    'random'
"""
from __future__ import annotations

from typing import Callable

from autotune.registry import Registry
from autotune.search.annealing import SimulatedAnnealing
from autotune.search.base import Strategy
from autotune.search.evolutionary import EvolutionarySearch
from autotune.search.grid import GridSearch
from autotune.search.islands import IslandSearch
from autotune.search.optuna_search import OptunaSearch
from autotune.search.random_search import RandomSearch
from autotune.space import ConfigSpace

# name -> factory(space, seed): the one list of strategies (the CLI's --strategy choices are its names)
REGISTRY: Registry[Callable[[ConfigSpace, int], Strategy]] = Registry("strategy", {
    "random": RandomSearch,
    "grid": GridSearch,
    "annealing": SimulatedAnnealing,
    "evolutionary": EvolutionarySearch,
    "islands": IslandSearch,
    "tpe": lambda space, seed: OptunaSearch(space, seed, sampler="tpe"),
    "cmaes": lambda space, seed: OptunaSearch(space, seed, sampler="cmaes"),
})
STRATEGIES = REGISTRY  # the same registry, by the name callers test strategy names against


def make_strategy(name: str | Strategy, space: ConfigSpace, seed: int = 0) -> Strategy:
    """A strategy by name (or the strategy itself): one of REGISTRY's names.

    >>> from autotune.space import ChoiceKnob
    >>> make_strategy("simplex", ConfigSpace([ChoiceKnob("a", [1, 2])]))
    Traceback (most recent call last):
    ...
    autotune.errors.AutotuneError: unknown strategy 'simplex'; choose one of annealing, cmaes, evolutionary, grid, islands, random, tpe
    """
    if not isinstance(name, str):
        return name
    return REGISTRY.get(name)(space, seed)


__all__ = ["REGISTRY", "STRATEGIES", "EvolutionarySearch", "GridSearch", "IslandSearch", "OptunaSearch", "RandomSearch", "SimulatedAnnealing",
           "Strategy", "make_strategy"]
