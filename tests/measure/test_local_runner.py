"""LocalRunner against real misbehaving kernels: each failure is recorded, the run finishes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.environment import worker_env
from autotune.space import Config
from autotune.task import Task
from measure.local import LocalRunner, LocalRunnerOptions, _Worker
from autotune.runner import ErrorKind, MeasureInput
from measure.timing import TimingProtocol
from measure.worker import WorkerSetup
from tests.measure import faulty_templates as ft

FAST = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=1)


def inp(mode: int, split: int = 1) -> MeasureInput:
    task = Task.create("faulty", {"N": 64, "mode": mode}, threads=1)
    return MeasureInput(task, Config({"split": split}))


@pytest.fixture(scope="module")
def runner():
    r = LocalRunner(LocalRunnerOptions(compile_workers=2, compile_timeout=120, run_timeout=20, protocol=FAST))
    yield r
    r.close()


def test_every_failure_is_recorded_and_the_run_finishes(runner: LocalRunner) -> None:
    inputs = [inp(ft.OK), inp(ft.SEGFAULT), inp(ft.HANG), inp(ft.WRONG), inp(ft.COMPILE_ERROR), inp(ft.OK, 4)]
    results = runner.run(inputs)
    kinds = [r.error for r in results]
    assert kinds == [None, ErrorKind.WORKER_CRASHED, ErrorKind.RUN_TIMEOUT, ErrorKind.WRONG_ANSWER,
                     ErrorKind.COMPILE_ERROR, None], [(r.error, r.message) for r in results]
    assert results[0].ok and results[0].median > 0 and results[5].ok
    assert "no_such_function" in results[4].message or "Numba" in results[4].message
    assert runner.workers_replaced >= 2  # the crashed and the hung worker were replaced


def test_the_runner_keeps_working_after_failures(runner: LocalRunner) -> None:
    results = runner.run([inp(ft.OK), inp(ft.OK, 4)])
    assert all(r.ok for r in results)
    assert all(len(r.costs) == FAST.repeat for r in results)


def test_compile_timeout_is_recorded() -> None:
    task = Task.create("faulty", {"N": 71, "mode": ft.OK}, threads=1)  # a kernel no other test compiles
    with LocalRunner(LocalRunnerOptions(compile_workers=1, compile_timeout=0.01, protocol=FAST)) as r:
        (res,) = r.run([MeasureInput(task, Config({"split": 4}))])
    assert res.error is ErrorKind.COMPILE_TIMEOUT


def test_a_worker_takes_its_settings_from_its_first_message(tmp_path: Path, cache_dir: str) -> None:
    setup = WorkerSetup("compile", str(tmp_path), threads=1,  # not the AUTOTUNE_CACHE_DIR it inherits
                        template_modules=("tests.measure.faulty_templates",))
    w = _Worker(setup)
    try:
        assert w.wait_line(180) == {"ready": True}
        w.send({"kind": "compile", "op": "faulty", "shape": {"N": 67, "mode": ft.OK}, "dtype": "float32",
                "threads": 1, "config": {"split": 4}})
        reply = w.wait_line(120)
    finally:
        w.close()
    assert reply is not None and reply["ok"], reply
    assert list((tmp_path / "kernels").glob("k_*.py")), "the kernel belongs in the cache_dir of the setup"
    assert str(tmp_path) != cache_dir


def test_a_worker_refuses_work_before_its_setup() -> None:
    proc = subprocess.run([sys.executable, "-m", "measure.worker"], input='{"kind": "compile"}\n',
                          capture_output=True, text=True, timeout=120, env=worker_env())
    assert json.loads(proc.stdout) == {
        "ready": False, "message": "ValueError: the first message to a worker must be its setup, got kind='compile'"}


def test_the_workers_compile_into_the_cache_dir_of_the_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = Task.create("faulty", {"N": 64, "mode": ft.OK}, threads=1)
    with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=FAST, cache_dir=str(tmp_path))) as r:
        (res,) = r.run([MeasureInput(task, Config({"split": 4}))])
    assert res.ok, res.message
    assert list((tmp_path / "kernels").glob("k_*.py"))
