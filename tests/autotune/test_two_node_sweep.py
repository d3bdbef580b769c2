"""A sweep over a two-node Ray cluster on this machine whose second node is killed mid-sweep: the
sweep finishes with nothing lost and no config measured twice.

The cluster is Ray's own test cluster (`ray.cluster_utils.Cluster`): a head of two CPUs and a
second node of one, both on this machine (2 cores); Ray announces this machine's interface address
(not 127.0.0.1) for every node, and the test checks that every node is at that address, so nothing
reaches any other host. The sweep (autotune.distributed.run_sweep, what `autotune sweep` runs)
tunes three tasks of the `held` template (tests.measure.held_templates: real generated kernels,
whose timing worker marks each config it measures in a file, independently of the log), four
trials each: all three start at once, two on the head and one on the second node. Each task holds
its third config (k = 2) in its timing worker until released, so the task on the second node has
measured and streamed k = 0 and 1 when the test kills that node (its raylet and every process of
it, at once) while the task is measuring k = 2. The held configs are released only once that
task's Ray worker and timing worker have exited (some 0.2-0.7 s after the kill): released sooner,
its k = 2 could still complete and stream. The sweep resubmits that task, with its two records,
on the head.

Figures (printed with pytest -s): tasks, records, duplicates, the measurements the workers made
(from the marks), those lost and those made twice, the tasks each node started, seconds from the
start to the kill and from the kill to the resubmission, wall seconds.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

from autotune.distributed import parse_spec, run_sweep
from autotune.records import load_records
from tests.helpers import process_alive as _alive
from tests.measure import held_templates  # noqa: F401 (registers `held`; the Ray workers import it too)
from tests.measure.held_templates import MARKS_ENV, RELEASE_ENV

HOLD = 2  # the config each task holds: k = 0 and 1 are measured before it
TRIALS = 4
SPEC = {"defaults": {"trials": TRIALS, "strategy": "random", "threads": 1},
        "task": [{"op": "held", "shapes": [f"{n}x{HOLD}" for n in (64, 72, 80)]}]}


def _marks(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.fixture
def two_nodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """(cluster, its second node): Ray's test cluster, a head of two CPUs and a second node of
    one, with this test's marks and release files in the Ray workers' environment."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from autotune.measure.ray_cluster import connect
    monkeypatch.setenv(MARKS_ENV, str(tmp_path / "marks.jsonl"))
    monkeypatch.setenv(RELEASE_ENV, str(tmp_path / "release"))
    if ray.is_initialized():
        ray.shutdown()
    # the head finds a dead node within a second or two (Ray's default: some 30 s of missed health checks)
    fast = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_timeout_ms": 500,
            "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "_system_config": fast})
    try:
        second = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        connect(cluster.address)  # with the environment above (autotune.environment.ray_runtime_env)
        yield cluster, second
    finally:
        ray.shutdown()
        cluster.shutdown()


def _wait_gone(*pids: int, until: float) -> None:
    while any(_alive(p) for p in pids) and time.monotonic() < until:
        time.sleep(0.05)


class _NodeKiller(threading.Thread):
    """Kills the second node once a task running there holds its timing worker at k = HOLD (its
    k = 0 and 1 measured), then releases every held worker."""

    def __init__(self, cluster, node, marks: Path, release: Path,  # type: ignore[no-untyped-def]
                 started: list[dict]) -> None:  # type: ignore[type-arg]
        super().__init__(daemon=True)
        self.cluster, self.node, self.marks, self.release, self.started = cluster, node, marks, release, started
        self.victim: dict | None = None  # type: ignore[type-arg]
        self.killed_at: float | None = None
        self.gone_at: float | None = None  # when the victim's Ray worker and timing worker had exited
        self.gone = False
        self.stop = threading.Event()  # the sweep ended

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not self.stop.is_set():
                there = {ev["pid"] for ev in list(self.started) if ev.get("node") == self.node.node_id}
                held = [m for m in _marks(self.marks) if m["by"] == "measure" and m["k"] == HOLD and m["ppid"] in there]
                if held:
                    self.victim = held[0]
                    self.cluster.remove_node(self.node, allow_graceful=False)  # its raylet and workers, at once
                    self.killed_at = time.monotonic()
                    # the node's Ray worker exits a moment after its raylet: released before then, its held
                    # measurement could complete and stream after all
                    _wait_gone(self.victim["pid"], self.victim["ppid"], until=time.monotonic() + 60)
                    self.gone_at = time.monotonic()
                    self.gone = not (_alive(self.victim["pid"]) or _alive(self.victim["ppid"]))
                    return
                time.sleep(0.05)
        finally:
            self.release.touch()


def test_a_sweep_over_two_nodes_survives_losing_one_with_nothing_lost_or_measured_twice(two_nodes,
                                                                                         tmp_path: Path) -> None:
    import ray
    import ray._private.state as ray_state  # the actor table without a dashboard
    from ray._private.services import get_node_ip_address
    cluster, second = two_nodes
    t0 = time.monotonic()

    # this machine's own interface address, announced by every node: nothing reaches another host
    here = get_node_ip_address()
    assert not here.startswith("127."), here
    with socket.socket() as s:
        s.bind((here, 0))  # an address of one of this machine's interfaces
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {here}, nodes
    assert cluster.address.rpartition(":")[0] == here and second.node_ip_address == here

    log, marks, release = tmp_path / "sweep.jsonl", Path(os.environ[MARKS_ENV]), Path(os.environ[RELEASE_ENV])
    tasks = parse_spec(SPEC)
    started: list[dict] = []  # type: ignore[type-arg]
    streamed: list[str] = []
    killer = _NodeKiller(cluster, second, marks, release, started)
    queue_nodes: set[str] = set()  # where the sweep's queue actor lives

    def on_event(ev: dict) -> None:  # type: ignore[type-arg]
        if ev["kind"] == "started":
            started.append({**ev, "at": time.monotonic()})
            queue_nodes.update(a["Address"]["NodeID"] for a in ray_state.actors().values()
                               if a["ActorClassName"] == "_QueueActor" and a["State"] == "ALIVE")
        elif ev["kind"] == "record":
            streamed.append(ev["line"])
    killer.start()
    try:
        states = run_sweep(tasks, log, address=cluster.address, progress=False, on_event=on_event)
    finally:
        killer.stop.set()
        release.touch()
        killer.join(timeout=60)
    wall = time.monotonic() - t0

    assert killer.victim is not None, "the test must kill the second node while a task there is measuring"
    assert killer.gone, "the killed node's Ray worker and timing worker must exit before the held config is released"
    head = cluster.head_node.node_id
    victim = next(ev for ev in started if ev["pid"] == killer.victim["ppid"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = load_records(log)
    measured = [r for r in records if not r.retimed]
    per_config = Counter((r.key, r.config["k"]) for r in measured)
    work = [m for m in _marks(marks) if m["by"] == "measure"]
    made = Counter((m["N"], m["k"]) for m in work)
    in_flight = (killer.victim["N"], HOLD)  # begun on the killed node, never completed there
    logged = {(r.shape["N"], r.config["k"]) for r in measured}
    figures = {
        "tasks": len(tasks), "records": len(records), "measurements": len(measured),
        "duplicates": sum(n - 1 for n in per_config.values() if n > 1),
        "measured by workers": len(work), "lost": len(set(made) - logged),
        "measured twice": sum(n - 1 for c, n in made.items() if n > 1 and c != in_flight),
        "tasks started on head / second node": (sum(ev["node"] == head for ev in started),
                                                sum(ev["node"] == second.node_id for ev in started)),
        "killed after s": round(killer.killed_at - t0, 1) if killer.killed_at else None,
        "victim's processes gone s after the kill": (round(killer.gone_at - killer.killed_at, 1)
                                                     if killer.gone_at and killer.killed_at else None),
        "resubmitted s after the kill": round(max(ev["at"] for ev in started if ev["task"] == victim["task"])
                                              - (killer.killed_at or t0), 1),
        "started at s": [round(ev["at"] - t0, 1) for ev in started],
        "wall s": round(wall, 1)}
    print("two-node sweep, second node killed: " + ", ".join(f"{k} {v}" for k, v in figures.items()))

    assert all(st.status == "done" and st.new == TRIALS for st in states.values()), \
        {k: (st.status, st.done, st.new) for k, st in states.items()}
    assert queue_nodes == {head}, figures  # the records stream through the driver's node, which lives
    assert victim["node"] == second.node_id and states[victim["task"]].nodes == [second.node_id, head], figures
    assert states[victim["task"]].attempts == 2  # resubmitted once, with what it had measured
    assert {ev["node"] for ev in started} == {head, second.node_id}  # the sweep ran over both nodes
    # every task has its trials in the log, each config once: the presets k = 0 .. TRIALS - 1
    assert sorted(per_config) == sorted((t.key, k) for t in tasks for k in range(TRIALS)), sorted(per_config)
    assert figures["duplicates"] == 0 and all(r.ok for r in measured), [(r.error, r.message) for r in measured]
    # nothing lost: every measurement a worker made (but the one in flight on the killed node) and
    # every record streamed is in the log; nothing measured twice but that one
    assert figures["lost"] == 0 and set(made) - {in_flight} <= logged
    assert made[in_flight] == 2 and figures["measured twice"] == 0, made
    assert set(streamed) <= {r.to_line() for r in records}
