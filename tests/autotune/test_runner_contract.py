"""The Runner contract, checked over every runner: one MeasureResult per input, in order; an
error is data (a kind and a message), never an exception; an empty batch is an empty answer;
on_result(index, result) is called exactly once per input, with the result returned for it;
close() may be called twice. Real runners: local worker processes, a local Ray, the replay and
surrogate runners and the TPU emulator."""
from __future__ import annotations

import math
import random
from typing import Callable, Iterator

import pytest

from autotune.records import Record
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, Runner
from autotune.space import Config
from autotune.task import Task
from autotune.tuning import make_runner
from autotune.measure.local import LocalRunnerOptions
from autotune.measure.timing import TimingProtocol

# the contract, not the timings, is checked here: each kernel is timed briefly (2 samples, not 5 of 40 ms)
QUICK = LocalRunnerOptions(protocol=TimingProtocol(repeat=2, min_repeat_ms=1))

CPU_TASK = Task.create("matmul", "16x16x16", threads=1)
TPU_TASK = Task.create("tpu_matmul", "1024x1024x1024", threads=1)


def _configs(task: Task, n: int) -> list[Config]:
    return [task.default_config(), *task.space().sample_new(random.Random(0), {task.default_config()}, n - 1)]


def _replay() -> Runner:
    from autotune.measure.replay import ReplayRunner
    records = [Record(op=CPU_TASK.op, shape=CPU_TASK.shape_dict, dtype=CPU_TASK.dtype, threads=CPU_TASK.threads,
                      config=c.to_json(), costs=[1e-5 * (i + 1)]) for i, c in enumerate(_configs(CPU_TASK, 3))]
    return ReplayRunner(records)


def _surrogate() -> Runner:
    from autotune.measure.replay import ReplayRunner
    from autotune.measure.experiments.surrogate import Surrogate
    configs = CPU_TASK.space().sample_new(random.Random(1), set(), 40)
    records = [Record(op=CPU_TASK.op, shape=CPU_TASK.shape_dict, dtype=CPU_TASK.dtype, threads=CPU_TASK.threads,
                      config=c.to_json(), costs=[1e-5 * (1 + CPU_TASK.space().encode(c)[0])]) for c in configs]
    runner = Surrogate.fit(CPU_TASK, records).runner(noise=0.05, seed=0)
    assert isinstance(runner, ReplayRunner)
    return runner


def _ray() -> Runner:
    import ray
    ray.shutdown()
    from autotune.measure.ray_runner import RayRunner
    return RayRunner(options=LocalRunnerOptions(compile_workers=1, protocol=QUICK.protocol), num_cpus=2)


RUNNERS: dict[str, tuple[Callable[[], Runner], Task]] = {
    "local": (lambda: make_runner("local", options=QUICK), CPU_TASK),
    "ray": (_ray, CPU_TASK),
    "replay": (_replay, CPU_TASK),
    "surrogate": (_surrogate, CPU_TASK),
    "tpu_emulator": (lambda: make_runner("tpu_emulator"), TPU_TASK),
}


@pytest.fixture(scope="module", params=sorted(RUNNERS))
def runner_and_task(request: pytest.FixtureRequest) -> Iterator[tuple[Runner, Task]]:
    make, task = RUNNERS[request.param]
    runner = make()
    yield runner, task
    runner.close()
    if request.param == "ray":
        import ray
        ray.shutdown()


def _check(results: list[MeasureResult], n: int) -> None:
    assert len(results) == n
    for r in results:
        assert isinstance(r, MeasureResult)
        assert r.ok == (r.error is None)
        if r.ok:
            assert r.costs and all(c > 0 and math.isfinite(c) for c in r.costs)
        else:
            assert isinstance(r.error, ErrorKind) and r.message


def test_it_is_a_runner(runner_and_task: tuple[Runner, Task]) -> None:
    assert isinstance(runner_and_task[0], Runner)


def test_an_empty_batch_gets_an_empty_answer(runner_and_task: tuple[Runner, Task]) -> None:
    assert runner_and_task[0].run([]) == []


def test_one_result_per_input_in_order(runner_and_task: tuple[Runner, Task]) -> None:
    runner, task = runner_and_task
    configs = _configs(task, 3)
    results = runner.run([MeasureInput(task, c) for c in configs])
    _check(results, 3)
    assert results[0].ok, results[0].message  # the default config works everywhere
    again = runner.run([MeasureInput(task, c) for c in reversed(configs)])
    _check(again, 3)
    assert [r.ok for r in again] == [r.ok for r in reversed(results)]


def test_a_bad_config_is_an_error_result_not_an_exception(runner_and_task: tuple[Runner, Task]) -> None:
    runner, task = runner_and_task
    good = task.default_config()
    bad = Config({**good, next(iter(good)): "not a value of this knob"})
    results = runner.run([MeasureInput(task, bad), MeasureInput(task, good)])
    _check(results, 2)
    assert not results[0].ok and results[1].ok


def test_each_result_is_reported_once_as_returned(runner_and_task: tuple[Runner, Task]) -> None:
    runner, task = runner_and_task
    good = task.default_config()
    bad = Config({**good, next(iter(good)): "not a value of this knob"})
    configs = [bad, *_configs(task, 3)]
    seen: list[tuple[int, MeasureResult]] = []
    results = runner.run([MeasureInput(task, c) for c in configs], on_result=lambda i, r: seen.append((i, r)))
    _check(results, len(configs))
    assert sorted(i for i, _ in seen) == list(range(len(configs)))
    assert all(r is results[i] for i, r in seen)
    assert runner.run([], on_result=lambda i, r: seen.append((i, r))) == [] and len(seen) == len(configs)


def test_close_twice_is_harmless() -> None:
    for make, _ in (RUNNERS["local"], RUNNERS["replay"], RUNNERS["tpu_emulator"]):
        r = make()
        r.close()
        r.close()


def test_a_retimer_times_every_input_in_alternating_rounds(runner_and_task: tuple[Runner, Task]) -> None:
    """Runners that re-time (Retimer: local, Ray): one result per input, in order, each checked
    again and timed once per round (its costs: the rounds' medians; a clear loser may stop after
    round 2, and then a kernel left alone stops too), marked retimed; a bad config is an error
    result, never an exception. The others are not Retimers: a tuner leaves their timings as they
    are."""
    from autotune.runner import Retimer
    runner, task = runner_and_task
    if not isinstance(runner, Retimer):
        assert type(runner).__name__ in ("ReplayRunner", "TpuRunner")
        return
    good = task.default_config()
    bad = Config({**good, next(iter(good)): "not a value of this knob"})
    configs = [*_configs(task, 2), bad]
    results = runner.retime([MeasureInput(task, c) for c in configs], rounds=3)
    _check(results, 3)
    assert all(r.retimed for r in results)
    assert results[0].ok and results[1].ok
    assert all(2 <= len(r.costs) <= 3 and r.contention["rounds"] == len(r.costs) for r in results[:2])
    # both run every round, or one is outpaced after round 2 and the other, left alone, stops with it
    assert len(results[0].costs) == len(results[1].costs)
    assert not results[2].ok and results[2].error is ErrorKind.COMPILE_ERROR
    assert runner.retime([], rounds=2) == []


def test_a_refilling_runner_numbers_what_it_is_given_after_the_rest(runner_and_task: tuple[Runner, Task]) -> None:
    """Runners that take inputs while they run (Refilling: local): what refill() adds gets results
    numbered after the inputs before it, each reported once as returned, a bad config an error
    result; refill is asked again after an empty answer only once a result came in. The others
    are not Refilling: a tuner gives them batch by batch."""
    from autotune.runner import Refilling
    runner, task = runner_and_task
    if not isinstance(runner, Refilling):
        assert type(runner).__name__ in ("ReplayRunner", "RayRunner", "TpuRunner")
        return
    good = task.default_config()
    bad = Config({**good, next(iter(good)): "not a value of this knob"})
    extra = [[MeasureInput(task, bad), MeasureInput(task, _configs(task, 3)[2])], []]
    asked: list[int] = []
    seen: list[tuple[int, MeasureResult]] = []

    def refill() -> list[MeasureInput]:
        asked.append(len(seen))
        return extra.pop(0) if extra else []
    configs = _configs(task, 2)
    results = runner.run_refilling([MeasureInput(task, c) for c in configs], lambda i, r: seen.append((i, r)), refill)
    _check(results, 4)
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3] and all(r is results[i] for i, r in seen)
    assert results[0].ok and not results[2].ok and results[3].ok
    assert not extra and asked == sorted(set(asked))  # never asked twice without a new result
