"""Claims beside a log: a config held by a live tuner or already logged is not claimed again;
claims of dead processes (or stale ones of other hosts) expire; two tuners on one log measure
every config once."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from autotune.claims import Claims
from autotune.records import RecordLog, load_records
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner

TASK = "matmul|M=8|threads=1"


def test_a_held_or_logged_config_is_not_claimed_again(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    a, b = Claims(log), Claims(log)
    assert a.claim(TASK, ["x", "y"], logged=set) == ["x", "y"]
    assert b.claim(TASK, ["x", "y", "z", "w"], logged=lambda: {"w"}) == ["z"]
    assert b.claim("other|task", ["x"], logged=set) == ["x"]  # claims are per task
    a.release(TASK, ["x"])
    assert b.claim(TASK, ["x", "y"], logged=set) == ["x"]
    assert {(c["task"], c["config"]) for c in a.held()} == {(TASK, "y"), (TASK, "z"), (TASK, "x"), ("other|task", "x")}


def test_claims_of_a_killed_process_expire(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    code = (f"from autotune.claims import Claims; Claims({str(log)!r}).claim({TASK!r}, ['x'], logged=set); "
            "print('held', flush=True); import time; time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        assert Claims(log).claim(TASK, ["x"], logged=set) == []  # it lives: its claim holds
    finally:
        p.kill()
        p.wait()
    assert Claims(log).claim(TASK, ["x"], logged=set) == ["x"]


def test_stale_claims_of_another_host_expire_and_garbage_is_ignored(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    old = {"task": TASK, "config": "x", "pid": 1, "host": "elsewhere", "start": None, "owner": "o", "time": time.time() - 7200}
    new = dict(old, config="y", time=time.time())
    Path(str(log) + ".claims").write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n{torn\n[1]\n")
    assert Claims(log).claim(TASK, ["x", "y"], logged=set) == ["x"]


def test_two_tuners_on_one_log_measure_each_config_once(tmp_path: Path, pin_target) -> None:  # type: ignore[no-untyped-def]
    pin_target("avx2")  # the kernels of a 16x16 matrix: fewer with 16-lane vectors
    task = Task.create("matmul", "16x16x16", threads=1)
    log = tmp_path / "tune.jsonl"

    def slow(_task: Task, cfg: object) -> float:
        time.sleep(0.02)  # long enough for the two tuners to interleave
        return 1e-4 + hash(cfg) % 1000 * 1e-7
    results = []

    def one() -> None:  # both walk the same grid in the same order: every proposal collides
        results.append(Tuner(task, make_strategy("grid", task.space()), ReplayRunner([], fallback=slow),
                             RecordLog(log, fsync=False)).run(TuneOptions(trials=12, batch=3)))
    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    keys = [r.config_key() for r in load_records(log)]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} configs measured twice"
    # 12 trials each, unless the grid runs out of kernels first (configs of a kernel measured
    # before are not measured: the tiny matrix's space has few)
    assert len(keys) == sum(r.measured for r in results) and len(keys) >= 16
    assert Claims(log).held() == []  # every claim released
