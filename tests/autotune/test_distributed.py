"""Ray sweeps and the Ray runner, on a real local Ray and on Ray's own two-node test cluster.

Every Ray these tests start is on this machine and is shut down by its fixture.
"""
from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from autotune.distributed import parse_spec, run_sweep
from autotune.measure.ray_cluster import ClusterError, connect
from autotune.errors import AutotuneError
from autotune.records import load_records

# two tasks of 2 trials: one log of several tasks, each tuned on its own Ray worker (each task of a
# sweep costs a Ray worker and its compile and timing processes: seconds on a 2-core machine)
SPEC = {"defaults": {"trials": 2, "strategy": "random", "threads": 1},
        "task": [{"op": "matmul", "shapes": ["24x16x8", "32x8x16"]}]}


@pytest.mark.parametrize("data,needle", [
    ({"task": [{"op": "nope", "shapes": ["8x8x8"]}]}, "task 1: unknown operator 'nope'"),
    ({"task": [{"op": "matmul", "shapes": ["8x8"]}]}, "task 1: matmul: shape '8x8'"),
    ({"task": [{"op": "matmul", "shapes": ["8x8x8"], "colour": 1}]}, "unknown keys ['colour']"),
    ({"task": [{"op": "matmul", "shapes": ["8x8x8"], "strategy": "magic"}]}, "unknown strategy"),
    ({"task": []}, "needs a list"),
])
def test_bad_specs_are_rejected_before_anything_starts(data: dict, needle: str) -> None:
    with pytest.raises(AutotuneError) as e:
        parse_spec(data)
    assert needle in str(e.value)


def test_unreachable_address_is_a_clear_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ClusterError, match=f"cannot reach a Ray cluster at 127.0.0.1:{port}"):
        connect(f"127.0.0.1:{port}")


class _SharedRay:
    """The Ray of this module's tests: a local Ray or Ray's two-node test cluster, started when a
    test first asks for that kind (the other kind is shut down first) and kept for the next tests
    of the same kind: starting one costs seconds, and no test here needs a Ray of its own (each
    checks what its own sweep or runner did; a killed worker or actor is replaced by Ray)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.cluster = None

    def use(self, kind: str):  # type: ignore[no-untyped-def]
        import ray
        if self.kind == kind and ray.is_initialized():
            return self.cluster if kind == "two_nodes" else ray
        self.stop()
        if kind == "local":
            connect(None, num_cpus=2)
        else:
            from ray.cluster_utils import Cluster
            self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            self.cluster.add_node(num_cpus=1)
            self.cluster.wait_for_nodes()
            connect(self.cluster.address)
        self.kind = kind
        return self.cluster if kind == "two_nodes" else ray

    def stop(self) -> None:
        import ray
        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        self.kind = None


@pytest.fixture(scope="module")
def shared_ray():
    shared = _SharedRay()
    yield shared
    shared.stop()


@pytest.fixture
def local_ray(shared_ray: _SharedRay):
    return shared_ray.use("local")


def test_sweep_on_local_ray_into_one_log_and_resume(local_ray, tmp_path: Path) -> None:
    log = tmp_path / "sweep.jsonl"
    tasks = parse_spec(SPEC)
    states = run_sweep(tasks, log, progress=False)
    assert all(st.status == "done" for st in states.values())
    recs = measurements(log)  # re-timings of each task's finalists are no trials
    assert len(tasks) == 2 and len(recs) == 4 and {r.key for r in recs} == {t.key for t in tasks}
    assert all(st.timed >= 2 and 0 <= st.noisy <= st.timed for st in states.values())
    # every record carries the sweep's stamp: its id, the trials planned for its task, the sweep's tasks
    stamps = {json.dumps(dict(r.sweep or {}), sort_keys=True) for r in load_records(log)}
    [first] = stamps
    assert json.loads(first)["trials"] == 2 and json.loads(first)["tasks"] == 2
    again = run_sweep(tasks, log, progress=False)  # resumed, then `trials` more each, as `tune --trials`
    assert all(st.status == "done" and (st.resumed, st.new) == (2, 2) for st in again.values())
    recs = measurements(log)
    assert len(recs) == 8
    later = [dict(r.sweep or {}) for r in load_records(log)[-4:]]  # planned: the 2 resumed and 2 more
    assert all(s["trials"] == 4 and s["id"] != json.loads(first)["id"] for s in later)
    assert all(len({json.dumps(r.config, sort_keys=True) for r in recs if r.key == t.key}) == 4 for t in tasks)


def measurements(log: Path) -> list:  # type: ignore[type-arg]
    return [r for r in load_records(log) if not r.retimed]


def test_a_sweep_survives_its_queue_actor_dying(local_ray, tmp_path: Path) -> None:
    import ray._private.state as ray_state  # the actor table without a dashboard
    log = tmp_path / "sweep.jsonl"
    tasks = parse_spec(SPEC)
    streamed: list[str] = []
    before = set(ray_state.actors())  # the Ray is shared: the queues of earlier sweeps are not this one's

    def on_event(ev: dict) -> None:
        if ev["kind"] == "record":
            streamed.append(ev["line"])
            if len(streamed) == 1:
                (pid,) = [a["Pid"] for key, a in ray_state.actors().items() if key not in before
                          and a["ActorClassName"] == "_QueueActor" and a["State"] == "ALIVE"]
                os.kill(pid, signal.SIGKILL)
    states = run_sweep(tasks, log, progress=False, on_event=on_event)
    assert streamed, "the test must kill the queue actor mid-sweep"
    assert all(st.done >= st.task.trials for st in states.values()), {k: (s.done, s.status) for k, s in states.items()}
    recs = load_records(log)
    assert len(measurements(log)) == 4 and len({r.to_line() for r in recs}) == len(recs)  # every record once
    assert streamed[0] in {r.to_line() for r in recs}


@pytest.fixture
def two_node_cluster(shared_ray: _SharedRay):
    return shared_ray.use("two_nodes")


def test_sweep_on_two_nodes_survives_a_killed_worker(two_node_cluster, tmp_path: Path) -> None:
    log = tmp_path / "sweep.jsonl"
    spec = dict(SPEC, defaults=dict(SPEC["defaults"], trials=4))
    tasks = parse_spec(spec)
    victim: dict = {}
    seen: list[dict] = []

    def on_event(ev: dict) -> None:
        seen.append(ev)
        if ev["kind"] == "started" and not victim:
            victim.update(ev)
        elif ev["kind"] == "record" and victim and "killed" not in victim and f'"M":{victim["task"].split("M=")[1].split(",")[0]}' in ev["line"]:
            victim["killed"] = True
            victim["lines_before"] = len([e for e in seen if e["kind"] == "record"])
            os.kill(victim["pid"], signal.SIGKILL)  # a worker dies mid-sweep, after one measurement

    states = run_sweep(tasks, log, progress=False, on_event=on_event)
    assert victim.get("killed"), "the test must kill a worker mid-sweep"
    recs = load_records(log)
    assert all(st.new >= st.task.trials for st in states.values()), {k: (s.done, s.status) for k, s in states.items()}
    assert states[victim["task"]].attempts >= 2  # the killed task was resubmitted
    assert len(recs) >= victim["lines_before"]
    streamed = [e["line"] for e in seen if e["kind"] == "record"]
    logged = {r.to_line() for r in recs}
    assert all(line in logged for line in streamed), "no completed record may be lost"


@pytest.fixture(scope="module")
def ray_runner(shared_ray: _SharedRay):
    """A RayRunner on the two-node cluster (a measuring actor per node), shared by the tests that kill
    its actors: each checks the change in its counters. Replacing a killed actor is what they test;
    starting the first two (and their compile and timing workers) again for each test is not."""
    from autotune.measure.local import LocalRunnerOptions
    from autotune.measure.ray_runner import RayRunner
    from autotune.measure.timing import TimingProtocol
    shared_ray.use("two_nodes")
    runner = RayRunner(options=LocalRunnerOptions(compile_workers=1, protocol=TimingProtocol(repeat=2, min_repeat_ms=1)))
    yield runner
    runner.close()


def test_ray_runner_retries_work_of_a_dead_actor(two_node_cluster, ray_runner) -> None:
    import random

    import ray

    from autotune.task import Task
    from autotune.runner import MeasureInput
    task = Task.create("matmul", "16x16x16", threads=1)
    rng = random.Random(0)
    inputs = [MeasureInput(task, c) for c in {task.space().sample(rng) for _ in range(4)}]
    runner = ray_runner
    replaced, retried = runner.replaced, runner.retried
    assert runner.nodes == 2
    assert all(r.ok for r in runner.run(inputs))
    ray.kill(runner.actors[0])  # a node's measuring actor dies
    results = runner.run(inputs)
    assert all(r.ok for r in results) and runner.retried > retried
    assert runner.replaced == replaced + 1 and runner.nodes == 2  # replaced, on its node


def test_a_ray_tune_whose_actors_are_killed_mid_batch_measures_every_config(two_node_cluster, ray_runner,
                                                                             tmp_path: Path) -> None:
    import ray

    from autotune.records import Record, RecordLog
    from autotune.search import make_strategy
    from autotune.task import Task
    from autotune.tuner import Tuner, TuneOptions
    task = Task.create("matmul", "16x16x16", threads=1)
    runner = ray_runner
    replaced = runner.replaced
    assert runner.nodes == 2
    killed: list[int] = []

    class KillingLog(RecordLog):
        """Kills every measuring actor when the first record arrives: the other part of the batch is in flight."""

        def append(self, record: Record) -> None:
            super().append(record)
            if not killed:
                killed.extend(range(len(runner.actors)))
                for a in runner.actors:
                    ray.kill(a)
    log = KillingLog(tmp_path / "tune.jsonl")
    result = Tuner(task, make_strategy("random", task.space()), runner, log).run(TuneOptions(trials=8, batch=4))
    recs = measurements(log.path)  # and the finalists re-timed on one actor
    assert killed and runner.replaced >= replaced + 2
    assert result.measured == 8 and result.infrastructure == 0
    assert len(recs) == 8 and all(r.ok for r in recs), [(r.error, r.message) for r in recs]
    assert len({r.config_key() for r in recs}) == 8
