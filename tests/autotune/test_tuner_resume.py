"""A tuner killed with SIGKILL loses no completed measurement, and a resumed run skips them."""
from __future__ import annotations

import os
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
    after = load_records(log)
    assert len(after) == len(before) + 2
    new = [r.config_key() for r in after[len(before):]]
    assert not set(new) & measured, "a resumed run must not measure a config again"
