"""A tuner killed with SIGKILL (or stopped with Ctrl-C) loses no completed measurement, and a
resumed run skips them; infrastructure faults are logged but never a config's verdict."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from autotune.records import load_records

ROOT = Path(__file__).resolve().parents[2]


def tune(log: Path, trials: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "autotune", "tune", "matmul", "--shape", "24x20x16",
                             "--threads", "1", "--trials", str(trials), "--batch", "2", "--log", str(log),
                             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_sigkill_then_resume(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    p = tune(log, trials=40)
    deadline = time.monotonic() + 300
    while lines(log) < 3 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert lines(log) >= 3, p.communicate()[0].decode()[-2000:]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = load_records(log)
    assert len(before) >= 3 and all(r.ok for r in before)
    measured = {r.config_key() for r in before}

    p2 = tune(log, trials=2)
    out = p2.communicate(timeout=300)[0].decode()
    assert p2.returncode == 0, out
    assert f"{len(before)} resumed from the log" in out
    logged = load_records(log)
    after = [r for r in logged if not r.retimed]
    assert len(after) == len(before) + 2
    new = [r.config_key() for r in after[len(before):]]
    assert not set(new) & measured, "a resumed run must not measure a config again"
    retimed = [r for r in logged if r.retimed]  # its finalists, the resumed ones among them, timed again
    assert len(retimed) >= 2 and {r.config_key() for r in retimed} <= {r.config_key() for r in after}


def test_each_measurement_is_logged_the_moment_it_completes(tmp_path: Path) -> None:
    """Batches of 16: records appear one by one while the first runs, and Ctrl-C keeps those
    measured. (The tuner gets SIGINT's default action: a test run started in the background of a
    shell inherits SIGINT ignored, and the tuner then ran all its trials.)"""
    log = tmp_path / "tune.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "autotune", "tune", "matmul", "--shape", "20x24x16", "--threads", "1",
                          "--trials", "64", "--batch", "16", "--log", str(log), "--no-progress"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while lines(log) < 2 and time.monotonic() < deadline and p.poll() is None:
        seen.add(lines(log))
        time.sleep(0.02)
    seen.add(lines(log))
    os.kill(p.pid, signal.SIGINT)
    out = p.communicate(timeout=60)[0].decode()
    assert p.returncode == 130 and "interrupted" in out, out[-2000:]
    assert seen & {1, 2, 3}, f"records appeared only in whole batches: {sorted(seen)}"
    kept = load_records(log)
    assert 2 <= len(kept) < 64 and all(r.ok for r in kept)


def test_infrastructure_records_are_no_verdict_on_resume(tmp_path: Path) -> None:
    from autotune.records import Record, RecordLog
    from autotune.runner import ErrorKind
    from autotune.search import make_strategy
    from autotune.task import Task
    from autotune.tuner import Tuner, TuneOptions
    from autotune.measure.replay import ReplayRunner
    task = Task.create("matmul", "16x16x16", threads=1)
    a, b = [task.default_config(), *task.space().sample_new(random.Random(0), {task.default_config()}, 1)]
    log = RecordLog(tmp_path / "tune.jsonl")
    for cfg, costs, error in ((a, [1e-4], None), (b, None, ErrorKind.INFRASTRUCTURE.value)):
        log.append(Record(op=task.op, shape=task.shape_dict, dtype=task.dtype, threads=1, config=cfg.to_json(),
                          costs=costs, error=error, message="the measuring actor died"))
    tuner = Tuner(task, make_strategy("random", task.space()), ReplayRunner([], fallback=lambda t, c: 2e-4), log,
                  initial=[a, b])
    assert [c for c, _ in tuner.resume()] == [a]
    result = tuner.run(TuneOptions(trials=1, batch=1))
    assert result.resumed == 1 and result.measured == 1
    assert [(r.config_key(), r.ok) for r in load_records(log.path)][-1] == (b.key(), True)  # b measured again


def test_a_run_on_broken_infrastructure_stops_with_one_line_naming_it(tmp_path: Path) -> None:
    import pytest

    from autotune.errors import AutotuneError
    from autotune.search import make_strategy
    from autotune.task import Task
    from autotune.tuner import INFRA_BATCHES, Tuner, TuneOptions
    from autotune.records import RecordLog
    from autotune.measure.local import LocalRunner, LocalRunnerOptions
    from autotune.templates import USER_MODULES
    script = tmp_path / "no_workers_here.py"
    script.write_text("raise OSError('cannot allocate memory')\n")  # every worker start fails
    task = Task.create("matmul", "16x16x16", threads=1)
    log = RecordLog(tmp_path / "tune.jsonl")
    USER_MODULES.append(f"file:{script}")
    try:
        with LocalRunner(LocalRunnerOptions(compile_workers=1, start_attempts=1)) as runner:
            tuner = Tuner(task, make_strategy("random", task.space()), runner, log)
            with pytest.raises(AutotuneError, match="failed on the measuring infrastructure.*could not start.*"
                                                    "cannot allocate memory") as e:
                tuner.run(TuneOptions(trials=8, batch=2))
    finally:
        USER_MODULES.remove(f"file:{script}")
    assert "\n" not in str(e.value)
    recs = load_records(log.path)
    # reported: a record per measured config (a batch of 2 may hold a twin of the other, not measured)
    assert len(recs) >= INFRA_BATCHES and {r.error for r in recs} == {"infrastructure"}
    assert tuner.resume() == []  # and never a verdict


def test_the_tuner_reads_each_line_of_its_log_once_however_many_batches(tmp_path: Path, monkeypatch) -> None:
    """A log of other tasks' records is read once, then followed (at 98661ef a 60k-record log was
    read again every batch: 13 s of a 20 s run)."""
    from autotune.records import Record
    from autotune.retime import FinalistOptions
    from autotune.target import current_target
    from autotune.tuning import tune
    from autotune.measure.replay import ReplayRunner
    log = tmp_path / "l.jsonl"
    other = Record(op="matmul", shape={"M": 32, "N": 32, "K": 32}, dtype="float32", threads=1, config={"mr": 2},
                   costs=[1e-4], target=current_target(1))
    log.write_text(other.to_line() * 2000)
    parsed = 0
    real = Record.from_json.__func__

    def counting(cls, d, shared=None):  # type: ignore[no-untyped-def]
        nonlocal parsed
        parsed += 1
        return real(cls, d, shared)
    monkeypatch.setattr(Record, "from_json", classmethod(counting))
    r = tune(op="matmul", shape="16x16x16", threads=1, trials=8, batch=2, log=log, strategy="random",
             runner=ReplayRunner([], fallback=lambda task, cfg: 1e-4), progress=False,
             finalists=FinalistOptions(count=0, noisy_count=0))
    assert r.measured == 8
    assert parsed <= len(log.read_text().splitlines()), f"{parsed} lines parsed for a log of 2008"
