"""LocalRunner's workers live as long as the process that started them, and no longer.

A driver killed (kill -9) while a compile worker was stopped (SIGSTOP, as the timing worker
does while a kernel is timed) must leave no worker behind, stopped or not, even without job
control (a setsid'd driver: nobody sends its orphans SIGCONT). A worker started from a thread
that ends meanwhile must go on working (a parent-death signal follows the thread that started
a process).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune.runner import MeasureInput
from autotune.space import Config
from autotune.task import Task
from autotune.measure.local import LocalRunner, LocalRunnerOptions
from autotune.measure.timing import TimingProtocol
from tests.helpers import process_alive as _alive, process_state as _state
from tests.measure import faulty_templates as ft

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

TASK = Task.create("faulty", {"N": 64, "mode": ft.OK}, threads=1)
CONFIGS = [Config({"split": 1}), Config({"split": 4})]


def _wait(cond, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_killed_driver_leaves_no_worker_behind_even_a_stopped_one() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    driver = subprocess.Popen([sys.executable, "-m", "tests.measure.test_worker_lifetime"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline()  # once its workers run, the first of them stopped
        assert line, f"the driver failed: {driver.stderr.read()[-1500:] if driver.stderr else ''}"
        stopped, *running = [int(x) for x in line.split()]
        assert running and _wait(lambda: _state(stopped) == "T", 5), _state(stopped)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
        gone = _wait(lambda: not any(_alive(p) for p in [stopped, *running]), 5)
        left = {p: _state(p) for p in [stopped, *running] if _alive(p)}
    finally:
        if driver.poll() is None:
            driver.kill()
    for pid in left:  # the old behaviour: clean up what this test started
        os.kill(pid, signal.SIGKILL)
    assert gone, f"workers outlived their killed driver: pid -> state {left}"


def test_a_worker_started_from_a_thread_outlives_the_thread() -> None:
    with LocalRunner(LocalRunnerOptions(compile_workers=2)) as r:
        keys: list = []
        t = threading.Thread(target=lambda: keys.append(r.kernel_keys(TASK, CONFIGS)))
        t.start()
        t.join(300)
        pids = [w.proc.pid for w in r._compilers]
        time.sleep(0.5)  # a parent-death signal would have come by now
        assert len(pids) == 2 and all(_alive(p) for p in pids), {p: _state(p) for p in pids}
        assert r.kernel_keys(TASK, CONFIGS) == keys[0] and all(keys[0])
        assert r.workers_replaced == 0 and [w.proc.pid for w in r._compilers] == pids


def test_a_worker_told_to_stop_answers_what_it_was_asked_then_exits() -> None:
    """The driver closes a worker's stdin right after a request (LocalRunner.close after the last
    batch): the worker answers it, then exits at once (os._exit, no interpreter teardown) with 0."""
    with LocalRunner(LocalRunnerOptions(compile_workers=1)) as r:
        assert all(r.kernel_keys(TASK, CONFIGS))  # started and ready
        w = r._compilers[0]
        w.send({"kind": "keys", **TASK.to_data(), "configs": [c.to_json() for c in CONFIGS]})
        assert w.proc.stdin is not None
        w.proc.stdin.close()
        assert w.proc.wait(timeout=60) == 0
        answers = [w.read_line(), w.read_line()]
        assert all(isinstance(a, dict) and isinstance(a.get("key"), str) for a in answers), answers
        with pytest.raises(EOFError):
            w.read_line()
        r._compilers = []


def _drive() -> None:
    """The driver: measure two configs (two compile workers and the timing worker start), stop
    the first compile worker the way the timing worker does while it times a kernel, print the
    workers' pids (the stopped one first), wait to be killed."""
    fast = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=1)
    r = LocalRunner(LocalRunnerOptions(compile_workers=2, protocol=fast))
    assert all(res.ok for res in r.run([MeasureInput(TASK, c) for c in CONFIGS]))
    assert r._timer is not None
    os.kill(r._compilers[0].proc.pid, signal.SIGSTOP)
    print(*[w.proc.pid for w in [*r._compilers, r._timer]], flush=True)
    time.sleep(600)


if __name__ == "__main__":
    _drive()
