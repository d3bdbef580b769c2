"""A pruned space: validate names why a config is left out; sampling, neighbours, the grid and every
search strategy stay inside it."""
from __future__ import annotations

import random

import numpy as np
import pytest

from autotune.errors import SpaceError
from autotune.runner import MeasureResult
from autotune.search import STRATEGIES, make_strategy
from autotune.search.evolutionary import EvolutionarySearch
from autotune.space import ChoiceKnob, ConfigSpace


def space() -> ConfigSpace:
    return ConfigSpace([ChoiceKnob("mr", [1, 2, 4, 8, 12]), ChoiceKnob("nv", [1, 2, 3, 4]), ChoiceKnob("x", [0, 1])],
                       prune=lambda c: None if c["mr"] * c["nv"] <= 16 else f"{c['mr']}x{c['nv']} is too big")


def test_validate_names_the_reason_and_the_space_stays_inside() -> None:
    sp = space()
    with pytest.raises(SpaceError, match="pruned from the space: 8x4 is too big"):
        sp.validate({"mr": 8, "nv": 4, "x": 0})
    rng = random.Random(0)
    assert all(sp.allows(sp.sample(rng)) for _ in range(200))
    assert all(sp.allows(n) for c in sp.grid() for n in sp.neighbours(c))
    assert len(list(sp.grid())) == 2 * sum(1 for m in (1, 2, 4, 8, 12) for v in (1, 2, 3, 4) if m * v <= 16)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_no_strategy_proposes_a_pruned_config(name: str) -> None:
    if name in ("tpe", "cmaes"):
        pytest.importorskip("optuna")
    sp = space()
    rng = np.random.default_rng(0)
    strategies = [make_strategy(name, sp, seed=0)]
    if name == "evolutionary":  # crossover of two allowed parents can make a pruned child
        strategies.append(EvolutionarySearch(sp, seed=1, population=8, crossover_rate=1.0, mutation_rate=0.0))
    for st in strategies:
        for _ in range(6):
            batch = st.propose(4)
            if not batch:
                break
            assert all(sp.allows(c) for c in batch), batch
            st.update(batch, [MeasureResult((float(rng.uniform(1, 2)),)) for _ in batch])
