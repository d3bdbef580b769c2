"""A runner that takes more inputs while it runs (autotune.runner.Refilling) is given the next
configs whenever it asks: the tuner records the results in by then, proposes from them, and keeps
its budget, its log, its twins and its retries exact, as in batch-by-batch runs."""
from __future__ import annotations

from typing import Sequence

from autotune.backends import backend_of
from autotune.claims import Claims
from autotune.records import RecordLog, load_records
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, OnResult, Refill, Refilling
from autotune.search import make_strategy
from autotune.space import Config
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner

TASK = Task.create("matmul", "64x64x64", threads=1)  # 20 configs of 20 kernels (16x16x16 has 12)


def seconds_of(task: Task, cfg: Config) -> float:
    return 1e-4 * (1 + hash(cfg.key()) % 7)


class Refiller(ReplayRunner):
    """A replay runner that asks for more inputs after every `every` results, the way LocalRunner
    asks when a compile worker would wait; `lost`: configs whose first measurement is lost to the
    infrastructure."""

    def __init__(self, every: int = 3, lost: int = 0) -> None:
        super().__init__([], fallback=seconds_of)
        self.every, self.lost = every, lost
        self.calls = self.refills = 0
        self.seen: list[Config] = []

    def run_refilling(self, inputs: Sequence[MeasureInput], on_result: OnResult | None,
                      refill: Refill) -> list[MeasureResult]:
        self.calls += 1
        todo, out = list(inputs), []
        while True:
            for k, inp in enumerate(todo):
                r = self._answer([inp])[0]
                if self.lost and inp.config not in self.seen:
                    self.lost -= 1
                    r = MeasureResult(None, ErrorKind.INFRASTRUCTURE, "a worker was lost")
                self.seen.append(inp.config)
                out.append(r)
                if on_result is not None:
                    on_result(len(out) - 1, r)
                if (len(out) % self.every == 0 and k + 1 < len(todo)) or k + 1 == len(todo):
                    break
            todo = todo[k + 1:]
            self.refills += 1
            todo += list(refill())
            if not todo:
                return out


def test_the_runner_is_refilled_to_exactly_the_trials(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = Refiller()
    assert isinstance(runner, Refilling)
    log = RecordLog(tmp_path / "t.jsonl")
    res = Tuner(TASK, make_strategy("random", TASK.space(), seed=0), runner, log).run(TuneOptions(trials=20, batch=4))
    records = load_records(tmp_path / "t.jsonl")
    tuned = [r for r in records if not r.retimed]
    assert runner.calls == 1 and runner.refills > 5  # one run, refilled as it went
    assert res.measured == 20 and len(tuned) == 20 and len(runner.seen) == 20
    assert len({r.config_key() for r in tuned}) == 20  # nothing measured twice
    assert res.best_seconds == min(r.seconds for r in records if r.ok)
    assert Claims(tmp_path / "t.jsonl").held() == []  # every claim released, each once it was recorded


def test_a_lost_measurement_is_measured_again_in_a_refill(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = Refiller(lost=3)
    log = RecordLog(tmp_path / "t.jsonl")  # with its claims: a config is claimed again when measured again
    res = Tuner(TASK, make_strategy("random", TASK.space(), seed=0), runner, log).run(TuneOptions(trials=12, batch=4))
    assert res.measured == 12 and res.infrastructure == 3
    assert len(runner.seen) == 15 and len(set(runner.seen)) == 12  # the 3 lost ones again, nothing else
    assert Claims(tmp_path / "t.jsonl").held() == []


def test_the_same_trials_batch_by_batch_without_refill() -> None:
    runner = Refiller()
    res = Tuner(TASK, make_strategy("random", TASK.space(), seed=0), runner).run(
        TuneOptions(trials=12, batch=4, refill=False))
    assert runner.calls == 0 and res.measured == 12


def test_twins_proposed_in_a_refill_take_their_kernel_s_result() -> None:
    task = Task.create("matmul", "9x8x8", threads=1)  # mc_panels and jc_blocks clamp to the tiny matrix
    runner = Refiller(every=2)
    res = Tuner(task, make_strategy("grid", task.space()), runner).run(TuneOptions(trials=64, batch=4))
    kernels = {backend_of(task).kernel_key(task, c) for c in task.space().grid()}
    keys = [backend_of(task).kernel_key(task, c) for c in runner.seen]
    assert res.duplicates > 0 and res.measured == len(kernels) < 64
    assert len(keys) == len(set(keys)) and set(keys) == kernels  # every kernel measured once, twins not at all
