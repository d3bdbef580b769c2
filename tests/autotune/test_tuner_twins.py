"""Configs that build the same kernel (a knob their tile ignores, a block clamped to the matrix)
are measured once: the strategy gets the twin's result, the log one record per kernel."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from autotune.backends import backend_of
from autotune.records import RecordLog, load_records
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

TASK = Task.create("matmul", "9x8x8", threads=1)  # mc_panels and jc_blocks clamp to the tiny matrix (M > 8: no row kernel)


class Counting:
    """The grid search, recording every config and result it is given."""

    def __init__(self, task: Task) -> None:
        self.inner = make_strategy("grid", task.space())
        self.given: dict = {}

    def propose(self, n):  # type: ignore[no-untyped-def]
        return self.inner.propose(n)

    def update(self, configs, results):  # type: ignore[no-untyped-def]
        self.given.update(zip(configs, results))
        self.inner.update(configs, results)


@functools.lru_cache(maxsize=None)
def kernel_of(cfg) -> str:  # type: ignore[no-untyped-def]
    return backend_of(TASK).kernel_key(TASK, cfg)


def seconds_of(task: Task, cfg) -> float:  # type: ignore[no-untyped-def]
    """A made-up time per kernel: equal kernels, equal times."""
    return 1e-4 * (1 + int(kernel_of(cfg)[:4], 16) / 65536)


def test_each_kernel_is_measured_once_and_its_twins_get_its_result(tmp_path: Path) -> None:
    allowed = list(TASK.space().grid())
    strategy = Counting(TASK)
    log = RecordLog(tmp_path / "tune.jsonl")
    res = Tuner(TASK, strategy, ReplayRunner([], fallback=seconds_of), log).run(TuneOptions(trials=10_000, batch=16))
    records = load_records(log.path)
    keys = [kernel_of(TASK.space().validate(r.config)) for r in records]
    assert len(keys) == len(set(keys)) == res.measured, "a kernel was measured twice"
    assert res.duplicates > len(records), "the tiny matrix's space holds more twins than kernels"
    assert len(strategy.given) == res.measured + res.duplicates == len(allowed)
    for cfg, r in strategy.given.items():  # every config, measured or not, got its kernel's time
        assert r.median == seconds_of(TASK, cfg)


def test_a_resumed_run_measures_no_twin_of_a_logged_kernel(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "tune.jsonl")
    first = Tuner(TASK, make_strategy("random", TASK.space(), seed=1), ReplayRunner([], fallback=seconds_of), log)
    first.run(TuneOptions(trials=6, batch=3))
    before = load_records(log.path)
    second = Tuner(TASK, make_strategy("grid", TASK.space()), ReplayRunner([], fallback=seconds_of), log)
    res = second.run(TuneOptions(trials=10_000, batch=16))
    after = load_records(log.path)
    keys = [kernel_of(TASK.space().validate(r.config)) for r in after]
    assert len(before) == 6 and len(keys) == len(set(keys)) and res.duplicates > 0


def test_the_log_keeps_each_kernels_key_and_a_resumed_run_reads_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    log = RecordLog(tmp_path / "tune.jsonl")
    Tuner(TASK, make_strategy("random", TASK.space(), seed=2), ReplayRunner([], fallback=seconds_of), log).run(
        TuneOptions(trials=5, batch=5))
    logged = load_records(log.path)
    assert [r.kernel for r in logged] == [kernel_of(TASK.space().validate(r.config)) for r in logged]
    backend = type(backend_of(TASK))
    real, asked = backend.kernel_key, []

    def spy(self, task, cfg):  # type: ignore[no-untyped-def]
        asked.append(cfg)
        return real(self, task, cfg)
    monkeypatch.setattr(backend, "kernel_key", spy)
    Tuner(TASK, make_strategy("random", TASK.space(), seed=3), ReplayRunner([], fallback=seconds_of), log).run(
        TuneOptions(trials=2, batch=2))
    assert not {TASK.space().validate(r.config) for r in logged} & set(asked), \
        "the resumed run generated the source of a logged kernel again"
