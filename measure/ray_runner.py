"""RayRunner: the Runner interface over a Ray cluster.

One measuring actor per node owns a LocalRunner there: compile workers sized to the node's CPUs,
and one timing worker, so timings on a node never overlap. A batch is split across the nodes'
actors. An actor's share is one Ray streaming-generator call (num_returns="streaming"): the actor
yields each result the moment its LocalRunner has it, and the driver, waiting on every share's
generator with ray.wait, reports it (on_result: the tuner logs it) at once. A driver killed
mid-batch thus loses only the measurements still in flight, never one that completed.

An actor that dies (a crashed node, a killed worker) is replaced, on its node while that node
lives, else on another live node (at most `respawns` replacements per batch), and the candidates
of its share it had not answered yet are measured again, each on its own. Only a config whose
actor dies again while measuring it alone gets the verdict worker_crashed; a candidate left
without any live actor is an INFRASTRUCTURE result, which a tuner measures again later. Ray is
the [ray] extra: without it, RayRunner() raises a one-line AutotuneError naming it (from `connect`).

    >>> from autotune.measure.ray_runner import RayRunner                # doctest: +SKIP
    >>> with RayRunner() as runner:                             # a local Ray, started on demand
    ...     results = runner.run(inputs)
    >>> RayRunner(address="auto")                               # or a running cluster
"""
from __future__ import annotations

import os
import queue
import threading
from dataclasses import asdict
from typing import Any, Iterator, Sequence

from autotune.measure.ray_cluster import connect
from autotune.measure.local import LocalRunnerOptions
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, OnResult
from autotune.space import Config
from autotune.task import Task


def _result_to_json(r: MeasureResult) -> dict[str, Any]:
    return {"costs": list(r.costs) if r.costs else None, "error": r.error.value if r.error else None,
            "message": r.message, "compile_s": r.compile_seconds, "ts": r.timestamp, "noisy": r.noisy,
            "contention": dict(r.contention) if r.contention else None, "retimed": r.retimed}


def _result_from_json(d: dict[str, Any]) -> MeasureResult:
    return MeasureResult(tuple(d["costs"]) if d["costs"] else None, ErrorKind(d["error"]) if d["error"] else None,
                         d["message"], d["compile_s"], d["ts"], d["noisy"], contention=d.get("contention"),
                         retimed=bool(d.get("retimed")))


def _inputs(items: list[dict[str, Any]]) -> list[MeasureInput]:
    """The inputs an actor was sent (configs are checked in the worker: a bad one is an error result)."""
    from autotune.space import Config
    from autotune.task import Task
    return [MeasureInput(Task.from_data(it), Config(it["config"]), it.get("cutoff_s")) for it in items]


def _make_actor_class():  # type: ignore[no-untyped-def]
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class NodeMeasurer:
        """Owns a LocalRunner on its node."""

        def __init__(self, options: dict[str, Any], template_modules: list[str]) -> None:
            from autotune.measure.local import LocalRunner
            from autotune.measure.timing import TimingProtocol
            from autotune.templates import USER_MODULES
            USER_MODULES.extend(m for m in template_modules if m not in USER_MODULES)
            for m in template_modules:
                if not m.startswith("file:"):
                    __import__(m)
            opts = dict(options)
            opts["protocol"] = TimingProtocol(**opts["protocol"])
            if opts.get("retime_protocol"):
                opts["retime_protocol"] = TimingProtocol(**opts["retime_protocol"])
            opts["timing_cores"] = tuple(opts.get("timing_cores", ()))
            self.runner = LocalRunner(LocalRunnerOptions(**opts))

        def node(self) -> tuple[str, int]:
            return ray.get_runtime_context().get_node_id(), os.getpid()

        def run(self, items: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
            """(position in items, result) of each item, yielded the moment the LocalRunner reports
            it (called with num_returns="streaming": each yield reaches the driver at once). The
            LocalRunner runs in a thread of this actor; its on_result hands each result over."""
            inputs = _inputs(items)
            got: queue.Queue[Any] = queue.Queue()
            done = object()

            def work() -> None:
                try:
                    results = self.runner.run(inputs, lambda i, r: got.put((i, r)))
                    got.put(("all", results))  # any it did not report (the contract says none)
                except BaseException as e:  # raised to the driver, as a plain call would
                    got.put(e)
                got.put(done)
            thread = threading.Thread(target=work, name="autotune-ray-measure", daemon=True)
            thread.start()
            sent: set[int] = set()
            while (m := got.get()) is not done:
                if isinstance(m, BaseException):
                    raise m
                if m[0] == "all":
                    for i, r in enumerate(m[1]):
                        if i not in sent:
                            sent.add(i)
                            yield i, _result_to_json(r)
                elif m[0] not in sent:
                    sent.add(m[0])
                    yield m[0], _result_to_json(m[1])
            thread.join()

        def retime(self, items: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
            return [_result_to_json(r) for r in self.runner.retime(_inputs(items), rounds)]

        def kernel_keys(self, task: dict[str, Any], configs: list[dict[str, Any]]) -> list[str | None]:
            from autotune.space import Config
            from autotune.task import Task
            return self.runner.kernel_keys(Task.from_data(task), [Config(c) for c in configs])

        def close(self) -> None:
            self.runner.close()

    return NodeMeasurer


class RayRunner:
    """Measures candidates across the nodes of a Ray cluster (a local one when address is None)."""

    @classmethod
    def from_options(cls, *, options: LocalRunnerOptions | None = None, address: str | None = None) -> RayRunner:
        """The runners' factory (autotune.tuning.RUNNERS): each node's LocalRunnerOptions (None: the
        defaults) and the cluster's address (None: a local Ray)."""
        return cls(address, options) if options is not None else cls(address)

    def __init__(self, address: str | None = None, options: LocalRunnerOptions = LocalRunnerOptions(),
                 num_cpus: int | None = None, respawns: int = 3) -> None:
        self.ray = connect(address, num_cpus=num_cpus)
        self.options = options
        self.respawns = respawns
        self.actors: list[Any] = []
        self.homes: list[str] = []  # the node each actor was placed on
        self.retried = 0   # candidates measured again after their actor died
        self.replaced = 0  # actors replaced
        self._spawn()

    def _actor(self, node_id: str, cpus: int, soft: bool) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from autotune.templates import USER_MODULES
        o = dict(asdict(self.options), compile_workers=self.options.compile_workers or max(1, cpus))
        return _make_actor_class().options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=soft)).remote(o, list(USER_MODULES))

    def _spawn(self) -> None:
        import ray
        for node in ray.nodes():
            if node.get("Alive"):
                self.actors.append(self._actor(node["NodeID"], int(node.get("Resources", {}).get("CPU", 1)), False))
                self.homes.append(node["NodeID"])

    def _replace(self, slot: int) -> bool:
        """A new actor at `slot`: on the dead one's node if that lives, else on a live node (Ray may
        place it elsewhere if that node is gone too). False when no node is alive."""
        import ray
        live = {n["NodeID"]: int(n.get("Resources", {}).get("CPU", 1)) for n in ray.nodes() if n.get("Alive")}
        if not live:
            return False
        home = self.homes[slot]
        if home not in live:
            spare = [n for n in live if n not in self.homes]
            home = (spare or list(live))[slot % len(spare or live)]
        try:
            ray.kill(self.actors[slot])  # it may still linger: free its resources
        except Exception:
            pass
        self.actors[slot] = self._actor(home, live[home], True)
        self.homes[slot] = home
        self.replaced += 1
        return True

    @property
    def nodes(self) -> int:
        return len(self.actors)

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        """Each actor streams back its share's results (NodeMeasurer.run); each is reported the
        moment it arrives. An actor that dies loses only its share's unanswered candidates: they
        are measured again, each alone, on its replacement."""
        import ray
        if not inputs:
            return []
        items = [{**i.task.to_data(), "config": i.config.to_json(), "cutoff_s": i.cutoff_s} for i in inputs]
        results: list[MeasureResult | None] = [None] * len(inputs)

        def report(i: int, r: MeasureResult) -> None:
            results[i] = r
            if on_result is not None:
                on_result(i, r)
        deaths = [0] * len(inputs)
        clock = 0  # counts actor deaths in this batch
        died_at = [0] * len(inputs)  # the clock at an input's last death
        born = [0] * len(self.actors)  # the clock when an actor was put in (0: before this batch)
        work: list[list[int]] = [list(range(len(inputs)))[a::len(self.actors)] for a in range(len(self.actors))]
        work = [w for w in work if w]
        idle = list(range(len(self.actors)))
        alive = [True] * len(self.actors)
        running: dict[Any, tuple[int, list[int]]] = {}  # a share's result stream -> (actor slot, its inputs)
        respawns = self.respawns
        while work or running:
            while work and idle:
                slot, idx = idle.pop(0), work.pop(0)
                stream = self.actors[slot].run.options(num_returns="streaming").remote([items[i] for i in idx])
                running[stream] = (slot, idx)
            if not running:
                break  # work left and no actor to give it to
            ready, _ = ray.wait(list(running), num_returns=1)
            for stream in ready:
                slot, idx = running[stream]
                try:
                    ref = next(stream)
                except StopIteration:  # the share is answered
                    del running[stream]
                    for i in idx:
                        if results[i] is None:  # not reached: the actor yields every input of its share
                            report(i, MeasureResult(None, ErrorKind.INFRASTRUCTURE,
                                                    "the measuring actor gave no result"))
                    idle.append(slot)
                    continue
                try:
                    pos, answer = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError) as e:
                    del running[stream]
                    why = f"the measuring actor died ({type(e).__name__})"
                    clock += 1
                    for i in idx:
                        if results[i] is not None:
                            continue  # answered before the actor died
                        deaths[i] += 1
                        if deaths[i] >= 2 and len(idx) == 1 and born[slot] >= died_at[i]:
                            # again, measuring it alone on an actor put in after its first death
                            report(i, MeasureResult(None, ErrorKind.WORKER_CRASHED, f"{why} twice while measuring it"))
                        elif deaths[i] > self.respawns + 1:
                            report(i, MeasureResult(None, ErrorKind.INFRASTRUCTURE, f"{why} {deaths[i]} times"))
                        else:
                            died_at[i] = clock
                            work.append([i])  # each alone, so a second death names its config
                            self.retried += 1
                    if respawns > 0 and self._replace(slot):
                        respawns -= 1
                        born[slot] = clock
                        idle.append(slot)
                    else:
                        alive[slot] = False
                    continue
                if results[idx[pos]] is None:
                    report(idx[pos], _result_from_json(answer))
        for i, r in enumerate(results):
            if r is None:
                report(i, MeasureResult(None, ErrorKind.INFRASTRUCTURE,
                                        f"no live measuring actor: {self.replaced} replaced, none left"))
        self.actors = [a for a, ok in zip(self.actors, alive) if ok]
        self.homes = [h for h, ok in zip(self.homes, alive) if ok]
        return results  # type: ignore[return-value]

    def retime(self, inputs: Sequence[MeasureInput], rounds: int) -> list[MeasureResult]:
        """The inputs re-timed on one node's actor (autotune.runner.Retimer): times compare only
        on one machine. An actor that dies meanwhile gives INFRASTRUCTURE results."""
        import ray
        if not inputs or not self.actors:
            return [MeasureResult(None, ErrorKind.INFRASTRUCTURE, "no live measuring actor")] * len(inputs)
        items = [{**i.task.to_data(), "config": i.config.to_json(), "cutoff_s": i.cutoff_s} for i in inputs]
        try:
            return [_result_from_json(r) for r in ray.get(self.actors[0].retime.remote(items, rounds))]
        except ray.exceptions.RayError as e:
            return [MeasureResult(None, ErrorKind.INFRASTRUCTURE, f"the measuring actor died while re-timing "
                                  f"({type(e).__name__})")] * len(inputs)

    def kernel_keys(self, task: Task, configs: Sequence[Config]) -> list[str | None]:
        """The configs' kernel keys (autotune.runner.KernelKeys), worked out in the compile workers of
        one node's actor; no key (None) for any when that actor is gone."""
        import ray
        if not configs or not self.actors:
            return [None] * len(configs)
        try:
            return list(ray.get(self.actors[0].kernel_keys.remote(task.to_data(), [c.to_json() for c in configs])))
        except ray.exceptions.RayError:
            return [None] * len(configs)

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
