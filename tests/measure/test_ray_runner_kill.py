"""A tuner measuring with the Ray runner, killed with SIGKILL mid-batch: every measurement an
actor completed is in the log, and the resumed tuner measures none of them again.

The tuner (the driver) runs in a subprocess connected to a Ray this test starts (Ray's own
`ray.cluster_utils.Cluster`, on this machine), so the Ray and its actors outlive the kill as a
cluster does. It tunes the `held` template (tests.measure.held_templates): its presets k = 0..7
are the first batch, all on the one node's actor, whose timing worker measures them in turn and
marks each one it starts in a file; k = 7 is held (asleep) in the timing worker until the test
releases it. When k = 7's mark is there, k = 0..6 have been measured: the batch is in flight with
seven measurements completed. Then the driver is killed, and the log must hold all seven.

Before (the actor sent its share back only when all of it was measured): 7 measured, 0 logged.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

from autotune.records import load_records
from tests.measure.held_templates import MARKS_ENV, RELEASE_ENV

ROOT = Path(__file__).resolve().parents[2]
HOLD = 7  # the preset held mid-batch: the presets before it are measured first
SHAPE = {"N": 64, "hold": HOLD}


def _drive(address: str, log: str, trials: int) -> None:
    """The driver: tune `held` with the Ray runner on the cluster at `address` into `log`."""
    import tests.measure.held_templates  # noqa: F401 (registers the template; the actors import it too)
    from autotune.tuning import tune
    from autotune.measure.local import LocalRunnerOptions
    from autotune.measure.ray_runner import RayRunner
    from autotune.measure.timing import TimingProtocol
    runner = RayRunner(address=address, options=LocalRunnerOptions(
        compile_workers=1, protocol=TimingProtocol(warmup=1, number=1, repeat=2, min_repeat_ms=1)))
    try:
        res = tune(op="held", shape=SHAPE, threads=1, trials=trials, batch=8, log=log, runner=runner,
                   strategy="random", progress=False)
        print(json.dumps({"measured": res.measured, "resumed": res.resumed}), flush=True)
    finally:
        runner.close()


def _start(address: str, log: Path, trials: int, env: dict[str, str]) -> subprocess.Popen:  # type: ignore[type-arg]
    return subprocess.Popen([sys.executable, "-m", "tests.measure.test_ray_runner_kill", address, str(log),
                             str(trials)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _marks(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _measurements(log: Path) -> list:  # type: ignore[type-arg]
    """The log's measurements (not re-timings, not infrastructure faults), each as its record."""
    if not log.exists():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [r for r in load_records(log) if not r.retimed and r.error != "infrastructure"]


@pytest.fixture
def ray_head():  # type: ignore[no-untyped-def]
    """A one-node Ray on this machine that outlives the drivers the test kills."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_a_ray_tuner_killed_mid_batch_has_logged_every_completed_measurement(ray_head, tmp_path: Path) -> None:
    log, marks, release = tmp_path / "tune.jsonl", tmp_path / "marks.jsonl", tmp_path / "release"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **{MARKS_ENV: str(marks), RELEASE_ENV: str(release)})
    t0 = time.monotonic()
    driver = _start(ray_head.address, log, trials=16, env=env)
    try:
        deadline = time.monotonic() + 300
        while (not any(m["k"] == HOLD and m["by"] == "measure" for m in _marks(marks))
               and driver.poll() is None and time.monotonic() < deadline):
            time.sleep(0.1)
        got = _marks(marks)
        held = [m for m in got if m["k"] == HOLD and m["by"] == "measure"]
        assert held and driver.poll() is None, (got, driver.poll())
        # every config the timing worker began before the held one is measured, in order
        completed = [m["k"] for m in got[:got.index(held[0])] if m["by"] == "measure" and m["pid"] == held[0]["pid"]]
        assert completed == list(range(HOLD)), got
        wait_until = time.monotonic() + 15  # each result's way to the log: milliseconds; on a busy machine, seconds
        while len(_measurements(log)) < len(completed) and time.monotonic() < wait_until:
            time.sleep(0.1)
        os.kill(driver.pid, signal.SIGKILL)  # mid-batch: k = 7 is in the timing worker
    finally:
        if driver.poll() is None:
            driver.kill()
        out = driver.communicate()[0].decode(errors="replace")
        release.touch()  # the held timing worker, its driver and actor gone, ends
    assert driver.returncode == -signal.SIGKILL, out[-3000:]
    logged = _measurements(log)
    before_resume = len(_marks(marks))
    figures = {"measured before the kill": len(completed), "logged": len(logged),
               "lost": len(set(completed) - {r.config["k"] for r in logged})}

    resumed = _start(ray_head.address, log, trials=4, env=env)  # the resumed tuner runs to its end
    out = resumed.communicate(timeout=600)[0].decode(errors="replace")
    assert resumed.returncode == 0, out[-3000:]
    again = [m["k"] for m in _marks(marks)[before_resume:] if m["by"] == "measure"]
    recs = _measurements(log)
    per_config = Counter(r.config["k"] for r in recs)
    figures.update({"measured by the resumed run": len(again), "re-measured": len(set(again) & set(completed)),
                    "records": len(recs), "duplicate configs": sum(n > 1 for n in per_config.values()),
                    "wall s": round(time.monotonic() - t0, 1)})
    print("ray runner killed mid-batch: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert figures["lost"] == 0 and len(logged) == len(completed), (figures, [r.config for r in logged])
    assert json.loads(out.strip().splitlines()[-1]) == {"measured": 4, "resumed": len(completed)}, out[-3000:]
    assert figures["re-measured"] == 0 and figures["duplicate configs"] == 0, figures
    assert len(again) == 4 and len(recs) == len(completed) + 4, (figures, again)


if __name__ == "__main__":  # the driver the test starts and kills
    _drive(sys.argv[1], sys.argv[2], int(sys.argv[3]))
