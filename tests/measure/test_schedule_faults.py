"""A template's schedule() that segfaults or hangs, tuned through autotune.tuning.tune with the
local runner: the tuner works out which configs build the same kernel (their kernel keys) in
the runner's workers, never in its own process, so the run finishes, the faulty configs are logged
with the kinds their workers report, and the others are measured.

The tune runs in a subprocess (`python -m tests.measure.test_schedule_faults LOG`), so that a
tuner that does run a schedule() itself fails this test instead of taking pytest down.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from autotune.records import load_records

ROOT = Path(__file__).resolve().parents[2]


def test_a_schedule_that_segfaults_or_hangs_is_the_configs_fault_not_the_tuners(tmp_path: Path) -> None:
    from tests.measure.faulty_templates import SCHEDULE_HANG, SCHEDULE_SEGFAULT
    log = tmp_path / "tune.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run([sys.executable, "-m", "tests.measure.test_schedule_faults", str(log)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired:
        raise AssertionError("the tuning run hung (a schedule() that hangs ran in the tuner's process)") from None
    assert p.returncode == 0, f"the tuner exited with {p.returncode}: {p.stderr[-1500:]}"
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = {r.config["split"]: r for r in load_records(log)}
    assert sorted(records) == [1, SCHEDULE_SEGFAULT, SCHEDULE_HANG, 8], records
    crashed, hung = records[SCHEDULE_SEGFAULT], records[SCHEDULE_HANG]
    assert crashed.error == "worker_crashed" and "SIGSEGV" in crashed.message, crashed.message
    assert hung.error == "compile_timeout", (hung.error, hung.message)
    for split in (1, 8):  # measured, each with its kernel's key, worked out in a worker
        assert records[split].ok and records[split].kernel, records[split]
    assert summary["measured"] == 4 and summary["errors"] == 2 and summary["best"] in (1, 8), summary
    assert summary["scheduled_in_the_tuner"] == [], "the tuner's process ran the template's schedule()"
    assert summary["key_requests"] == [4], "the batch's kernel keys were not asked for in one request"


def _tune(log: str) -> None:
    """Tune faulty_schedule's four configs (grid order: 1, the segfault, the hang, 8) in one batch."""
    from autotune.retime import FinalistOptions
    from autotune.tuning import tune
    from autotune.measure.local import LocalRunner, LocalRunnerOptions
    from autotune.measure.timing import TimingProtocol
    from tests.measure import faulty_templates  # registers faulty_schedule
    requests: list[int] = []  # the number of configs of each kernel-key request to the runner
    real = getattr(LocalRunner, "kernel_keys", None)

    def kernel_keys(self, task, configs):  # type: ignore[no-untyped-def]
        requests.append(len(configs))
        return real(self, task, configs)
    if real is not None:
        LocalRunner.kernel_keys = kernel_keys  # type: ignore[method-assign]
    # the hang is killed after key_timeout (its key), then after compile_timeout (its compile)
    options = LocalRunnerOptions(compile_workers=2, compile_timeout=6, key_timeout=2, run_timeout=30,
                                 protocol=TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=1))
    r = tune(op="faulty_schedule", shape={"N": 16}, threads=1, trials=4, log=log, strategy="grid", progress=False,
             runner_options=options, finalists=FinalistOptions(count=0, noisy_count=0))
    best = r.best_config["split"] if r.best_config is not None else None
    print(json.dumps({"measured": r.measured, "errors": r.errors, "best": best, "key_requests": requests,
                      "scheduled_in_the_tuner": faulty_templates.SCHEDULED}))


if __name__ == "__main__":
    _tune(sys.argv[1])
