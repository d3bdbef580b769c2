"""The kill loop: `autotune tune` killed with SIGKILL at random moments, each kill followed by a
resume, then an audit of the log: no measurement the tuner received is lost, no config is
measured twice, no torn line is accepted.

The tuner runs the real CLI (`autotune.cli.main`) in a subprocess, measuring with a LocalRunner
wrapped by JournalRunner, a runner registered for this test that writes every result it hands the
tuner to a journal first: the journal counts the measurements completed, independently of the log.
AUTOTUNE_KILL_LOOP_KILLS sets the number of kills (default 3: each costs a tuner's start, seconds; raise it
for a longer hunt); the figures are printed (pytest -s).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Sequence

from autotune.records import load_records
from autotune.runner import MeasureInput, MeasureResult, OnResult

ROOT = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("AUTOTUNE_KILL_LOOP_KILLS", "3"))
JOURNAL_ENV = "AUTOTUNE_TEST_JOURNAL"


class JournalRunner:
    """A LocalRunner whose every result is journalled (one JSON line) before the tuner gets it."""

    def __init__(self, *, options: object = None, address: str | None = None) -> None:  # a RunnerFactory
        from autotune.measure.local import LocalRunner, LocalRunnerOptions
        from autotune.measure.timing import TimingProtocol
        self.inner = LocalRunner(LocalRunnerOptions(
            compile_workers=1, protocol=TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=20)))
        self.journal = os.environ[JOURNAL_ENV]

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        def journal(i: int, r: MeasureResult) -> None:
            with open(self.journal, "a") as f:
                f.write(json.dumps({"config": inputs[i].config.key(), "error": r.error.value if r.error else None}) + "\n")
            if on_result is not None:
                on_result(i, r)
        return self.inner.run(inputs, journal)

    def close(self) -> None:
        self.inner.close()


def _tune(log: Path, journal: Path, trials: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **{JOURNAL_ENV: str(journal)})
    return subprocess.Popen([sys.executable, "-m", "tests.measure.test_kill_loop", "tune", "matmul", "--shape",
                             "24x20x16", "--threads", "1", "--trials", str(trials), "--batch", "2", "--log", str(log),
                             "--runner", "journal", "--no-progress"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _count(log: Path) -> int:
    return log.read_bytes().count(b"\n") if log.exists() else 0


def audit(log: Path, journal: Path) -> dict[str, int]:
    """The figures of a killed-and-resumed log against the journal of what the tuners received."""
    raw = [line for line in log.read_bytes().split(b"\n") if line.strip()]
    whole = 0
    for line in raw:
        try:
            whole += isinstance(json.loads(line), dict)
        except ValueError:
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(log)
    received = [json.loads(line) for line in journal.read_text().splitlines()]
    verdicts = Counter(r.config_key() for r in records if r.error != "infrastructure" and not r.retimed)
    logged = {r.config_key() for r in records}
    return {
        "measurements completed": len(received),
        "records logged": len(records),
        "records lost": sum(1 for m in received if m["config"] not in logged),
        "duplicate configs": sum(1 for n in verdicts.values() if n > 1),
        "torn lines in the file": len(raw) - whole,
        "torn lines accepted": max(0, len(records) - whole),
    }


def test_kill_loop(tmp_path: Path) -> None:
    log, journal = tmp_path / "tune.jsonl", tmp_path / "journal.jsonl"
    rng = random.Random(int(os.environ.get("AUTOTUNE_KILL_LOOP_SEED", "0")))
    kills = 0
    for _ in range(KILLS):
        p = _tune(log, journal, trials=40)  # more than it can measure before the kill
        start = _count(log)
        deadline = time.monotonic() + 300
        while _count(log) == start and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # measuring has begun
        time.sleep(rng.uniform(0.0, 2.0))  # then anywhere in a batch: compiling, timing, logging
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
        out = p.communicate()[0].decode()
        assert p.returncode in (0, -signal.SIGKILL), out[-2000:]
    final = _tune(log, journal, trials=2)  # the last resume runs to its end
    out = final.communicate(timeout=600)[0].decode()
    assert final.returncode == 0, out[-2000:]
    figures = {"kills": kills, **audit(log, journal)}
    print("kill loop: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert kills == KILLS, "every run but the last must be killed mid-tune"
    assert figures["records lost"] == 0 and figures["duplicate configs"] == 0
    assert figures["torn lines accepted"] == 0
    assert figures["records logged"] >= figures["measurements completed"]


if __name__ == "__main__":  # the CLI, with the journalling runner registered
    from autotune.cli import main
    from autotune.tuning import RUNNERS
    RUNNERS["journal"] = "tests.measure.test_kill_loop:JournalRunner"
    sys.exit(main())
