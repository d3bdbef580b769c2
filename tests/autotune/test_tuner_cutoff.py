"""The tuner asks its runner to cut the timing of clear losers: from the second batch on, every
input carries the cutoff (TuneOptions.cutoff times the best so far); none without a best, none
with cutoff=None."""
from __future__ import annotations

from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner

TASK = Task.create("matmul", "16x16x16", threads=1)


def seconds_of(task, cfg):  # type: ignore[no-untyped-def]
    return 1e-4 * (1 + hash(cfg.key()) % 7)


class Recording(ReplayRunner):
    def __init__(self) -> None:
        super().__init__([], fallback=seconds_of)
        self.cutoffs: list[list[float | None]] = []

    def run(self, inputs, on_result=None):  # type: ignore[no-untyped-def]
        self.cutoffs.append([i.cutoff_s for i in inputs])
        return super().run(inputs, on_result)


def test_inputs_carry_the_cutoff_from_the_best_so_far() -> None:
    runner = Recording()
    res = Tuner(TASK, make_strategy("random", TASK.space(), seed=0), runner).run(
        TuneOptions(trials=12, batch=4, cutoff=2.0))
    first, *later = runner.cutoffs
    assert first == [None] * len(first) and later
    assert all(c is not None and c >= 2.0 * res.best_seconds for batch in later for c in batch)


def test_no_cutoff_when_asked_for_none() -> None:
    runner = Recording()
    Tuner(TASK, make_strategy("random", TASK.space(), seed=0), runner).run(TuneOptions(trials=8, batch=4, cutoff=None))
    assert all(c is None for batch in runner.cutoffs for c in batch)
