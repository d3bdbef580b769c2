"""LocalRunner against real misbehaving kernels and a failing machine: each kernel failure is
recorded as that kernel's, each infrastructure fault (a killed worker, a worker that cannot
start, an unwritable cache) as infrastructure, and the run finishes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune.environment import worker_env
from autotune.errors import AutotuneError
from autotune.space import Config
from autotune.task import Task
from autotune.measure.local import LocalRunner, LocalRunnerOptions, _Worker
from autotune.runner import ErrorKind, MeasureInput
from autotune.measure.timing import TimingProtocol
from autotune.measure.worker import WorkerSetup
from tests.helpers import process_state as _state
from tests.measure import faulty_templates as ft

FAST = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=1)


def inp(mode: int, split: int = 1) -> MeasureInput:
    task = Task.create("faulty", {"N": 64, "mode": mode}, threads=1)
    return MeasureInput(task, Config({"split": split}))


@pytest.fixture(scope="module")
def runner():
    # run_timeout: the hanging kernel is killed after it; the working ones check and time in well under 1 s
    r = LocalRunner(LocalRunnerOptions(compile_workers=2, compile_timeout=120, run_timeout=6, protocol=FAST))
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
    assert "killed by signal SIGSEGV" in results[1].message, results[1].message
    assert runner.workers_replaced >= 2  # the crashed and the hung worker were replaced


def test_the_runner_keeps_working_after_failures(runner: LocalRunner) -> None:
    results = runner.run([inp(ft.OK), inp(ft.OK, 4)])
    assert all(r.ok for r in results)
    assert all(len(r.costs) == FAST.repeat for r in results)


def test_a_candidate_slower_than_its_cutoff_is_timed_once(runner: LocalRunner) -> None:
    task = inp(ft.OK).task
    cut, full = runner.run([MeasureInput(task, Config({"split": 1}), cutoff_s=1e-12),
                            MeasureInput(task, Config({"split": 4}), cutoff_s=1e6)])
    assert cut.ok and len(cut.costs) == 1 and full.ok and len(full.costs) == FAST.repeat


def test_a_re_timing_checks_again_and_a_crash_in_it_is_no_verdict(runner: LocalRunner) -> None:
    """retime: each kernel checked again (a wrong answer is the kernel's, marked retimed), then the
    working ones timed in alternating rounds; a kernel that kills the timing worker while re-timed
    makes its group an infrastructure fault (which kernel did it is unknown), and the runner goes on."""
    results = runner.retime([inp(ft.OK), inp(ft.WRONG), inp(ft.OK, 4), inp(ft.SEGFAULT)], rounds=2)
    assert [r.error for r in results] == [None, ErrorKind.WRONG_ANSWER, None, ErrorKind.INFRASTRUCTURE]
    assert all(r.retimed for r in results[:3]) and [len(r.costs) for r in (results[0], results[2])] == [2, 2]
    assert "re-timing" in results[3].message
    assert all(r.ok for r in runner.run([inp(ft.OK)]))


def test_the_workers_give_the_kernel_keys_this_process_would(runner: LocalRunner) -> None:
    """kernel_keys (autotune.runner.KernelKeys): one key per config, in order, the backend's own
    (equal keys: one kernel), worked out in the compile workers; None for a config outside the space."""
    from autotune.backends import backend_of
    task = Task.create("matmul", "8x8x8", threads=1)  # its blocks clamp to the tiny matrix: twins
    configs = list(task.space().grid())[:24]
    keys = runner.kernel_keys(task, [*configs, Config({"nr": -1})])
    assert keys == [backend_of(task).kernel_key(task, c) for c in configs] + [None]
    assert all(keys[:-1]) and len(set(keys[:-1])) < len(configs)
    assert runner.kernel_keys(task, []) == []


def test_a_run_takes_more_inputs_while_it_runs(runner: LocalRunner) -> None:
    """run_refilling (autotune.runner.Refilling): refill is asked when a compile worker would wait;
    what it adds is compiled and measured in the same run and numbered after the rest; kernel keys
    asked for inside refill come from the idle workers while the others compile; after an empty
    answer the run ends once every input has its result, and a failure among the added ones is
    recorded as its own."""
    from autotune.backends import backend_of
    task = Task.create("matmul", "8x8x8", threads=1)
    more = [[inp(ft.WRONG), inp(ft.OK, 4)], [inp(ft.OK)]]
    keys: list[list[str | None]] = []

    def refill() -> list[MeasureInput]:
        keys.append(runner.kernel_keys(task, [task.default_config()]))
        return more.pop(0) if more else []
    seen: list[int] = []
    results = runner.run_refilling([inp(ft.OK), inp(ft.OK, 4)], lambda i, r: seen.append(i), refill)
    assert [r.error for r in results] == [None, None, ErrorKind.WRONG_ANSWER, None, None]
    assert sorted(seen) == [0, 1, 2, 3, 4] and not more
    assert keys and all(k == [backend_of(task).kernel_key(task, task.default_config())] for k in keys)
    assert all(r.ok for r in runner.run([inp(ft.OK)]))  # and the runner goes on as before


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
    proc = subprocess.run([sys.executable, "-m", "autotune.measure.worker"], input='{"kind": "compile"}\n',
                          capture_output=True, text=True, timeout=120, env=worker_env())
    assert json.loads(proc.stdout) == {
        "ready": False, "message": "ValueError: the first message to a worker must be its setup, got kind='compile'"}


def test_the_workers_compile_into_the_cache_dir_of_the_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = Task.create("faulty", {"N": 64, "mode": ft.OK}, threads=1)
    with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=FAST, cache_dir=str(tmp_path))) as r:
        (res,) = r.run([MeasureInput(task, Config({"split": 4}))])
    assert res.ok, res.message
    assert list((tmp_path / "kernels").glob("k_*.py"))


def test_each_result_is_reported_when_it_is_known() -> None:
    order: list[tuple[int, ErrorKind | None, float]] = []
    inputs = [inp(ft.COMPILE_ERROR), inp(ft.OK), inp(ft.OK, 4)]
    with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=FAST)) as one:
        results = one.run(inputs, on_result=lambda i, r: order.append((i, r.error, time.monotonic())))
    # the compile error at once; each candidate measured as soon as it compiled (the next compiling meanwhile)
    assert [i for i, _, _ in order] == [0, 1, 2]
    assert [results[i].error for i, _, _ in order] == [e for _, e, _ in order] == [ErrorKind.COMPILE_ERROR, None, None]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_compile_workers_on_the_timing_cores_pause_while_a_candidate_is_timed(runner: LocalRunner) -> None:
    """The timing worker stops the compile workers it is given only while it times (measure.worker.
    stopped); after each measurement the driver lets them go on in any case."""
    from autotune.measure.worker import stopped
    runner.run([inp(ft.OK), inp(ft.OK, 4)])  # both compile workers started
    pids = tuple(w.proc.pid for w in runner._compilers)
    with stopped(pids):
        deadline = time.monotonic() + 5  # a signal is delivered asynchronously
        while any(_state(p) != "T" for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [_state(p) for p in pids] == ["T"] * len(pids)
    assert "T" not in [_state(p) for p in pids]
    os.kill(pids[0], signal.SIGSTOP)  # as a timing worker that died mid-timing would leave it
    with runner._shared([0]) as shared:
        assert shared == pids[:1]
    assert _state(pids[0]) != "T"
    assert all(r.ok for r in runner.run([inp(ft.OK), inp(ft.OK, 4)]))  # they go on working
    assert "T" not in [_state(w.proc.pid) for w in runner._compilers]


def test_workers_killed_between_batches_are_replaced_not_blamed(runner: LocalRunner) -> None:
    runner.run([inp(ft.OK)])
    for w in [*runner._compilers, runner._timer]:
        os.kill(w.proc.pid, signal.SIGKILL)  # lost workers: an OOM killer, an operator
        w.proc.wait()
    before = runner.workers_replaced
    results = runner.run([inp(ft.OK), inp(ft.OK, 4)])
    assert all(r.ok for r in results), [r.message for r in results]
    assert runner.workers_replaced > before


def _timing_lock_is_held(path: str) -> bool:
    """Whether a worker holds the machine-wide timing lock, i.e. is timing a kernel right now."""
    import fcntl
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases it at once if it was had
    return False


def test_a_timing_worker_killed_mid_measurement_is_measured_again() -> None:
    slow = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=200)  # >= 0.6 s of timing
    with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=slow, retries=0)) as r:
        out: list = []
        t = threading.Thread(target=lambda: out.append(r.run([inp(ft.OK, 4)])))
        t.start()
        deadline = time.monotonic() + 120
        # killed while it times (it holds the timing lock only then), not while it starts or checks
        while not (r._timer is not None and r._timer.ready and _timing_lock_is_held(r.lock)) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(r._timer.proc.pid, signal.SIGKILL)
        t.join(300)
    (res,) = out[0]
    assert res.ok, res.message
    assert r.workers_replaced == 1


def test_a_worker_that_fails_to_start_once_is_started_again(tmp_path: Path) -> None:
    from autotune.templates import USER_MODULES
    marker = tmp_path / "started-once"
    script = tmp_path / "flaky_start.py"  # a real set-up that fails the first time only
    script.write_text(f"import pathlib\np = pathlib.Path({str(marker)!r})\n"
                      "if not p.exists():\n    p.touch()\n    raise OSError('no resources the first time')\n")
    USER_MODULES.append(f"file:{script}")
    try:
        with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=FAST)) as r:
            results = r.run([inp(ft.OK), inp(ft.OK, 4)])
    finally:
        USER_MODULES.remove(f"file:{script}")
    assert all(x.ok for x in results), [x.message for x in results]
    assert r.start_failures == 1


def test_a_worker_that_never_starts_fails_the_batch_as_infrastructure(tmp_path: Path) -> None:
    from autotune.templates import USER_MODULES
    script = tmp_path / "broken_start.py"
    script.write_text("raise OSError('the node is out of memory')\n")
    USER_MODULES.append(f"file:{script}")
    try:
        with LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=FAST, start_attempts=2)) as r:
            seen: list[int] = []
            results = r.run([inp(ft.OK), inp(ft.OK, 4)], on_result=lambda i, res: seen.append(i))
    finally:
        USER_MODULES.remove(f"file:{script}")
    assert [x.error for x in results] == [ErrorKind.INFRASTRUCTURE] * 2
    assert "compile worker could not start (2 attempts): OSError: the node is out of memory" in results[0].message
    assert sorted(seen) == [0, 1] and r.start_failures == 2


def test_an_unwritable_cache_is_an_environment_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made below a file, even by root
    bad = blocker / "cache"
    with pytest.raises(AutotuneError, match=f"the compile cache {bad} is not writable .*AUTOTUNE_CACHE_DIR"):
        LocalRunner(LocalRunnerOptions(cache_dir=str(bad)))
    w = _Worker(WorkerSetup("compile", str(bad), threads=1))  # a worker checks it too, once, at set-up
    try:
        reply = w.wait_line(180)
    finally:
        w.close()
    assert reply is not None and reply["ready"] is False and reply["environment"] is True
    assert str(bad) in reply["message"]
