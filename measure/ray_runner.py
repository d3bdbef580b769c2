"""RayRunner: the Runner interface over a Ray cluster.

One measuring actor per node owns a LocalRunner there: compile workers sized to the node's CPUs,
and one timing worker, so timings on a node never overlap. A batch is split across the nodes'
actors; when an actor dies (a crashed node, a killed worker) its candidates are retried on
another actor once, else recorded as worker-crashed, and the run goes on. Ray is the [ray] extra:
without it, RayRunner() raises a one-line AutotuneError naming it (from `connect`).

    >>> from measure.ray_runner import RayRunner                # doctest: +SKIP
    >>> with RayRunner() as runner:                             # a local Ray, started on demand
    ...     results = runner.run(inputs)
    >>> RayRunner(address="auto")                               # or a running cluster
"""
from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Sequence

from measure.ray_cluster import connect
from measure.local import LocalRunnerOptions
from autotune.runner import ErrorKind, MeasureInput, MeasureResult


def _result_to_json(r: MeasureResult) -> dict[str, Any]:
    return {"costs": list(r.costs) if r.costs else None, "error": r.error.value if r.error else None,
            "message": r.message, "compile_s": r.compile_seconds, "ts": r.timestamp, "noisy": r.noisy}


def _result_from_json(d: dict[str, Any]) -> MeasureResult:
    return MeasureResult(tuple(d["costs"]) if d["costs"] else None, ErrorKind(d["error"]) if d["error"] else None,
                         d["message"], d["compile_s"], d["ts"], d["noisy"])


def _make_actor_class():  # type: ignore[no-untyped-def]
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class NodeMeasurer:
        """Owns a LocalRunner on its node."""

        def __init__(self, options: dict[str, Any], template_modules: list[str]) -> None:
            from measure.local import LocalRunner
            from measure.timing import TimingProtocol
            from templates import USER_MODULES
            USER_MODULES.extend(m for m in template_modules if m not in USER_MODULES)
            for m in template_modules:
                if not m.startswith("file:"):
                    __import__(m)
            opts = dict(options)
            opts["protocol"] = TimingProtocol(**opts["protocol"])
            opts["timing_cores"] = tuple(opts.get("timing_cores", ()))
            self.runner = LocalRunner(LocalRunnerOptions(**opts))

        def node(self) -> tuple[str, int]:
            return ray.get_runtime_context().get_node_id(), os.getpid()

        def run(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            from autotune.space import Config
            from autotune.task import Task
            inputs = []
            for it in items:  # configs are checked in the worker, so a bad one is an error result
                task = Task.create(it["op"], it["shape"], it["dtype"], it["threads"])
                inputs.append(MeasureInput(task, Config(it["config"])))
            return [_result_to_json(r) for r in self.runner.run(inputs)]

        def close(self) -> None:
            self.runner.close()

    return NodeMeasurer


class RayRunner:
    """Measures candidates across the nodes of a Ray cluster (a local one when address is None)."""

    def __init__(self, address: str | None = None, options: LocalRunnerOptions = LocalRunnerOptions(),
                 num_cpus: int | None = None) -> None:
        self.ray = connect(address, num_cpus=num_cpus)
        self.options = options
        self.actors: list[Any] = []
        self.retried = 0
        self._spawn()

    def _spawn(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from templates import USER_MODULES
        cls = _make_actor_class()
        opts = asdict(self.options)
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            cpus = int(node.get("Resources", {}).get("CPU", 1))
            o = dict(opts, compile_workers=self.options.compile_workers or max(1, cpus))
            self.actors.append(cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(o, list(USER_MODULES)))

    @property
    def nodes(self) -> int:
        return len(self.actors)

    def run(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        import ray
        if not inputs:
            return []
        items = [{"op": i.task.op, "shape": i.task.shape_dict, "dtype": i.task.dtype, "threads": i.task.threads,
                  "config": i.config.to_json()} for i in inputs]
        results: list[MeasureResult | None] = [None] * len(inputs)
        pending = list(range(len(inputs)))
        attempt = 0
        while pending and self.actors:
            shards: dict[int, list[int]] = {}
            for n, idx in enumerate(pending):
                shards.setdefault(n % len(self.actors), []).append(idx)
            refs = {a: self.actors[a].run.remote([items[i] for i in idx]) for a, idx in shards.items()}
            dead: list[int] = []
            failed: list[int] = []
            for a, ref in refs.items():
                try:
                    for i, r in zip(shards[a], ray.get(ref)):
                        results[i] = _result_from_json(r)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                    dead.append(a)
                    failed += shards[a]
                    msg = f"the measuring actor died ({type(e).__name__})"
                    for i in shards[a]:
                        results[i] = MeasureResult(None, ErrorKind.WORKER_CRASHED, msg)
            self.actors = [x for k, x in enumerate(self.actors) if k not in dead]
            attempt += 1
            if attempt > 1 or not failed:
                break
            pending = failed  # retry once on the actors still alive
            self.retried += len(failed)
        return [r if r is not None else MeasureResult(None, ErrorKind.WORKER_CRASHED, "no live measuring actor")
                for r in results]

    def close(self) -> None:
        import ray
        for a in self.actors:
            try:
                ray.get(a.close.remote(), timeout=30)
            except Exception:
                pass
        self.actors = []

    def __enter__(self) -> "RayRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
