"""Ray sweeps: many tasks tuned over a Ray cluster (measure.ray_cluster connects) into one log.

A sweep spec (TOML or YAML) lists operators x shapes x dtypes with budgets::

    [defaults]
    trials = 32
    cost_model = "xgb"        # or strategy = "random", "tpe", ... (not both)

    [[task]]
    op = "matmul"
    shapes = ["256x256x256", "512x512x512"]
    dtypes = ["float32"]

    [[task]]
    op = "conv2d"
    shapes = ["1x64x56x56x64x3x3x1x1"]
    trials = 16

`trials` is what `autotune tune --trials` means: the trials each task makes in this run.
Records of the task already in the log are resumed (not measured again, and fed to the search
first) and are not counted, so running a spec twice measures twice the trials.

Every entry is checked before anything starts. Each task is tuned by a Ray task on some node
(compiling and timing there); its records stream back to the driver, which appends them to one
log as they arrive and shows every task's progress. A killed sweep resumes from its log; a task
whose worker or node dies is resubmitted with the records measured so far and the trials it has
left, so nothing it measured is measured again (a lost worker is no verdict on a config). The
records stream through a queue actor kept on the driver's node: a worker puts each record there
(and waits until it is in) before it measures on, so a node that dies takes with it only the
measurement in flight. The records also come back with each finished task, so when the queue
actor dies, the driver makes a new queue for the tasks it submits next and takes the records of
the running ones when they end. Templates registered at run time (templates.USER_MODULES) are
imported by the Ray workers too.

The driver stamps every record it logs with the sweep (Record.sweep: this run's id, the trials
planned for the record's task in the log, resumed ones included, and the sweep's task count), so
a reader of the log alone (`autotune dashboard`) can tell each task's trials done of planned. On a
terminal the sweep shows a live table; elsewhere (stderr piped or logged) a line every few seconds
(`ProgressOptions.interval_s`): tasks done of all, trials, the best so far of the running tasks,
elapsed; and a line as each task ends with its best.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.errors import AutotuneError
from autotune.measure.ray_cluster import connect
from autotune.progress import PeriodicLines, ProgressOptions

MAX_SPEC_BYTES = 1 << 20  # a sweep spec's text
MAX_SWEEP_TASKS = 10000   # tasks a spec may expand to
SPEC_KEYS = {"op", "shapes", "shape", "dtypes", "dtype", "trials", "strategy", "cost_model", "seed", "threads"}


# ---- sweep specs -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepTask:
    op: str
    shape: dict[str, int]
    dtype: str
    trials: int
    strategy: str | None
    seed: int
    threads: int
    cost_model: str | None = None

    @property
    def key(self) -> str:
        from autotune.task import task_key
        return task_key(self.op, self.shape.items(), self.dtype, self.threads)


def load_spec(path: str | os.PathLike[str]) -> list[SweepTask]:
    """Parse and check a sweep spec; every error names the entry and what is wrong."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
        text = raw.decode()
    except OSError as e:
        raise AutotuneError(f"cannot read sweep spec {p}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise AutotuneError(f"sweep spec {p} is not UTF-8 text") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise AutotuneError(f"sweep spec {p} is longer than {MAX_SPEC_BYTES >> 10} KiB: split it into several sweeps")
    try:
        if p.suffix in (".yaml", ".yml"):
            data = _yaml_without_aliases(text, p)
        else:
            import tomllib
            data = tomllib.loads(text)
    except AutotuneError:
        raise
    except Exception as e:
        raise AutotuneError(f"sweep spec {p} is not valid {'YAML' if p.suffix in ('.yaml', '.yml') else 'TOML'}: "
                            f"{str(e).splitlines()[0]}") from None
    return parse_spec(data, str(p))


def _yaml_without_aliases(text: str, p: Path) -> Any:
    """YAML data, refusing aliases (`*name`): a few lines of them can stand for billions of values
    (an alias bomb) that expanding the spec's tasks would then walk."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise AutotuneError(f"sweep spec {p} uses a YAML alias (*{self.peek_event().anchor}): "
                                    "write the values out")
            return super().compose_node(parent, index)
    return yaml.load(text, Loader=NoAliases)  # noqa: S506 (a SafeLoader)


def parse_spec(data: Any, where: str = "spec") -> list[SweepTask]:
    from autotune.cost_model import MODELS
    from autotune.search import STRATEGIES
    from autotune.task import Task
    from autotune.tuning import make_search
    if not isinstance(data, dict) or not isinstance(data.get("task"), list) or not data["task"]:
        raise AutotuneError(f"{where}: needs a list of [[task]] entries (op, shapes, ...)")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict) or set(defaults) - SPEC_KEYS:
        raise AutotuneError(f"{where}: [defaults] may set {sorted(SPEC_KEYS - {'op', 'shapes', 'shape'})}")
    out: list[SweepTask] = []
    for n, entry in enumerate(data["task"], 1):
        here = f"{where}: task {n}"
        if not isinstance(entry, dict):
            raise AutotuneError(f"{here}: must be a table of op, shapes, ...")
        unknown = set(entry) - SPEC_KEYS
        if unknown:
            raise AutotuneError(f"{here}: unknown keys {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
        e = {**defaults, **entry}
        if "op" not in e:
            raise AutotuneError(f"{here}: missing 'op'")
        shapes = e.get("shapes", [e["shape"]] if "shape" in e else None)
        if not shapes:
            raise AutotuneError(f"{here}: missing 'shapes'")
        dtypes = e.get("dtypes", [e.get("dtype", "float32")])
        trials, seed, threads = e.get("trials", 32), e.get("seed", 0), e.get("threads")
        strategy, cost_model = e.get("strategy"), e.get("cost_model")
        for name, value in (("trials", trials), ("threads", threads)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise AutotuneError(f"{here}: {name} must be a positive integer, got {value!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise AutotuneError(f"{here}: seed must be an integer, got {seed!r}")
        if strategy is not None and strategy not in STRATEGIES:
            raise AutotuneError(f"{here}: unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if cost_model is not None and cost_model not in MODELS:
            raise AutotuneError(f"{here}: unknown cost_model {cost_model!r}; choose one of {', '.join(MODELS)}")
        if not isinstance(shapes, list) or not isinstance(dtypes, list) \
                or len(out) + len(shapes) * len(dtypes) > MAX_SWEEP_TASKS:
            raise AutotuneError(f"{here}: shapes and dtypes must be lists, the sweep at most {MAX_SWEEP_TASKS} tasks")
        for shape in shapes:
            for dtype in dtypes:
                try:
                    t = Task.create(e["op"], shape, dtype, threads)
                    if cost_model is not None and strategy not in (None, "evolutionary"):
                        make_search(t, strategy=strategy, cost_model=cost_model)  # the one-line conflict error
                except AutotuneError as err:
                    raise AutotuneError(f"{here}: {err}") from None
                out.append(SweepTask(t.op, t.shape_dict, t.dtype, trials, strategy, seed, t.threads, cost_model))
    return out


# ---- running a sweep -------------------------------------------------------------------------

def _tune_remote(spec: dict[str, Any], previous: list[str], queue, compile_workers: int,  # type: ignore[no-untyped-def]
                 template_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """Runs on a Ray worker: tune one task (spec["trials"]: the trials left to make), pushing every
    record to the driver's queue."""
    import tempfile

    import ray

    from autotune.records import Record, RecordLog
    from autotune.task import Task
    from autotune.tuning import tune
    from autotune.measure.local import LocalRunnerOptions
    from autotune.templates import USER_MODULES
    USER_MODULES.extend(m for m in template_modules if m not in USER_MODULES)
    for m in template_modules:
        if not m.startswith("file:"):
            __import__(m)
    task = Task.create(spec["op"], spec["shape"], spec["dtype"], spec["threads"])
    streaming = [True]
    lines: list[str] = []

    def push(event: dict[str, Any]) -> None:
        if streaming[0]:
            try:
                queue.put(event, timeout=30)
            except Exception:  # the queue actor is gone: the records go back with the result
                streaming[0] = False
    push({"kind": "started", "task": task.key(), "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()})

    class StreamingLog(RecordLog):
        """The resume log of this worker; every new record also goes to the driver."""

        def append(self, record: Record) -> None:
            super().append(record)
            lines.append(record.to_line())
            push({"kind": "record", "line": lines[-1]})

    with tempfile.TemporaryDirectory() as tmp:
        log = RecordLog(Path(tmp) / "resume.jsonl")
        for line in previous:
            log.append(Record.from_json(json.loads(line)))
        try:
            res = tune(op=task, trials=spec["trials"], log=StreamingLog(log.path),
                       strategy=spec["strategy"], cost_model=spec["cost_model"], seed=spec["seed"], progress=False,
                       runner_options=LocalRunnerOptions(compile_workers=compile_workers),
                       batch=max(2, compile_workers * 2))
        except AutotuneError as e:  # no config ran correctly (NoValidConfig): measured all the same
            res = getattr(e, "result", None)
            if res is None:
                raise
    return {"task": task.key(), "measured": res.measured, "best_seconds": res.best_seconds, "lines": lines}


@dataclass
class SweepState:
    task: SweepTask
    done: int = 0  # measurements of the task in the log (re-timings of finalists are not trials)
    resumed: int = 0  # of them, those in the log before this run
    best: float = float("inf")  # the fastest re-timing, else the fastest timing (autotune.records.preference)
    status: str = "queued"
    attempts: int = 0
    pid: int | None = None
    nodes: list[str] = field(default_factory=list)  # the Ray node of each attempt that started
    lines: list[str] = field(default_factory=list)
    timed: int = 0  # timings this run logged (measurements and re-timings)
    noisy: int = 0  # of those, the ones taken while the machine was busy
    _best: tuple[int, float] = (4, float("inf"))

    def add(self, r: Any, new: bool) -> None:
        """Count one record of the task (new: logged in this run)."""
        from autotune.records import preference
        self.lines.append(r.to_line())
        self.done += not r.retimed
        if new and r.ok:
            self.timed += 1
            self.noisy += r.noisy
        if r.ok and preference(r) < self._best:
            self._best = preference(r)
            self.best = r.seconds

    @property
    def new(self) -> int:
        """Trials made in this run (what the spec's `trials` counts)."""
        return self.done - self.resumed


def run_sweep(spec: list[SweepTask], log: str | os.PathLike[str], *, address: str | None = None,
              num_cpus: int | None = None, compile_workers: int = 1, progress: bool | ProgressOptions = True,
              on_event: Callable[[dict[str, Any]], None] | None = None, max_attempts: int = 3) -> dict[str, SweepState]:
    """Tune every task of a spec over Ray into one log; resumes from the log. progress: False none,
    else a live table on a terminal and a plain line every few seconds elsewhere (a ProgressOptions:
    how often, where)."""
    from autotune.records import RecordLog, load_records
    ray = connect(address, num_cpus=num_cpus)
    from ray.util.queue import Empty, Queue
    out_log = RecordLog(log)
    states = {t.key: SweepState(t) for t in spec}
    if out_log.path.exists():
        for r in load_records(out_log.path):
            st = states.get(r.key)
            if st is not None:
                st.add(r, new=False)
    for st in states.values():
        st.resumed = st.done
    ident = secrets.token_hex(6)  # this run's stamp on its records: what a reader of the log knows of the plan
    stamps = {key: {"id": ident, "trials": st.resumed + st.task.trials, "tasks": len(states)}
              for key, st in states.items()}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from autotune.templates import USER_MODULES
    here = ray.get_runtime_context().get_node_id()  # the queue lives and dies with the driver's node

    def new_queue() -> Queue:  # not soft: Ray may then put it on another node, whose death takes the queue along
        return Queue(actor_options={"num_cpus": 0,
                                    "scheduling_strategy": NodeAffinitySchedulingStrategy(here, soft=False)})
    queue = new_queue()
    seen = {key: set(st.lines) for key, st in states.items()}
    remote = ray.remote(num_cpus=1, max_retries=0)(_tune_remote)
    modules = tuple(USER_MODULES)

    def submit(st: SweepState):  # type: ignore[no-untyped-def]
        st.attempts += 1
        st.status = "running"
        spec_d = {"op": st.task.op, "shape": st.task.shape, "dtype": st.task.dtype, "threads": st.task.threads,
                  "trials": st.task.trials - st.new, "strategy": st.task.strategy, "cost_model": st.task.cost_model,
                  "seed": st.task.seed}
        return remote.remote(spec_d, list(st.lines), queue, compile_workers, modules)

    view = _SweepView(states, progress is not False,
                      progress if isinstance(progress, ProgressOptions) else ProgressOptions())
    refs = {submit(st): st for st in states.values()}

    def record(line: str) -> str:
        """Log a streamed record with the sweep's stamp; the line as logged."""
        from autotune.records import Record
        r = Record.from_json(json.loads(line))
        st = states.get(r.key)
        if st is not None:
            r = dataclasses.replace(r, sweep=stamps[r.key])
            if line in seen[r.key]:
                return r.to_line()  # streamed already, and now back with its task's result
        out_log.append(r)
        if st is not None:
            seen[r.key].add(line)
            st.add(r, new=True)
        return r.to_line()

    def drain() -> None:
        nonlocal queue
        while True:
            try:
                items = queue.get_nowait_batch(queue.qsize()) if queue.qsize() else []
            except Empty:
                items = []
            except ray.exceptions.RayError:  # the queue actor died: new tasks stream into a new one
                queue = new_queue()
                return
            if not items:
                return
            for ev in items:
                if ev["kind"] == "record":
                    ev = {**ev, "line": record(ev["line"])}  # on_event sees the line as logged
                elif ev["kind"] == "started" and ev["task"] in states:
                    states[ev["task"]].pid = ev["pid"]
                    states[ev["task"]].nodes.append(ev.get("node", "?"))
                if on_event:
                    on_event(ev)

    with view:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.3)
            drain()
            for ref in ready:
                st = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as e:  # the worker or its node died, or the task failed: resubmit what is left
                    drain()  # every record it put in the queue, before it is resubmitted with them
                    if st.attempts < max_attempts and st.new < st.task.trials:
                        st.status = f"retrying ({type(e).__name__})"
                        refs[submit(st)] = st
                    else:
                        st.status = f"failed: {type(e).__name__}"
                    continue
                drain()  # a failure here (the log, on_event) is no task's: it is raised
                for line in result["lines"]:  # those the queue did not bring
                    record(line)
                st.status = "done"
            view.refresh()
        drain()
    return states


class _SweepView(PeriodicLines):
    """A sweep's progress: a live table of every task (rich) on a terminal; elsewhere a plain line
    every options.interval_s seconds (tasks done of all, trials, the running tasks' best so far,
    elapsed) and one as each task ends (its trials and best); nothing when not enabled."""

    def __init__(self, states: dict[str, SweepState], enabled: bool,
                 options: ProgressOptions = ProgressOptions()) -> None:
        self.states, self.options = states, options
        terminal = options.terminal
        if terminal is None:
            terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.mode = "off" if not enabled else "table" if terminal else "lines"
        self.enabled = self.mode == "table"
        self._units: dict[str, tuple[float, str]] = {}
        self._ended: set[str] = set()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def speed(self, st: SweepState) -> str:
        """The task's best so far in its unit ("-" before a successful trial)."""
        if not math.isfinite(st.best) or st.best <= 0:
            return "-"
        key = st.task.key
        if key not in self._units:
            try:
                from autotune.task import Task
                self._units[key] = Task.create(st.task.op, st.task.shape, st.task.dtype, st.task.threads).speed_unit()
            except Exception:  # noqa: BLE001 - progress never fails a sweep
                self._units[key] = (1.0, "calls/s")
        per, unit = self._units[key]
        return f"{per / st.best:.1f} {unit}"

    def table(self):  # type: ignore[no-untyped-def]
        from rich.table import Table

        from autotune.display import readable_key
        t = Table(title=f"autotune sweep: {self.summary()}")
        for col in ("task", "trials", "best so far", "status"):
            t.add_column(col)
        for key, st in self.states.items():
            t.add_row(readable_key(key), f"{st.new}/{st.task.trials}", self.speed(st), st.status)
        return t

    def summary(self) -> str:
        """N of M tasks done (running, queued, failed), trials of planned, elapsed."""
        sts = list(self.states.values())
        done = sum(st.status == "done" for st in sts)
        failed = sum(st.status.startswith("failed") for st in sts)
        queued = sum(st.status == "queued" or st.status == "running" and st.pid is None for st in sts)
        running = len(sts) - done - failed - queued
        trials = sum(min(st.new, st.task.trials) for st in sts)
        planned = sum(st.task.trials for st in sts)
        return (f"{done} of {len(sts)} tasks done ({running} running, {queued} queued, {failed} failed), "
                f"{trials} of {planned} trials, {time.monotonic() - self._t0:.0f} s")

    def status(self) -> str:
        """The plain progress line: the summary and the best so far of the running tasks."""
        from autotune.display import readable_key
        running = [st for st in self.states.values() if st.status not in ("done", "queued")
                   and not st.status.startswith("failed") and st.pid is not None]
        best = "; ".join(f"{readable_key(st.task.key)} {st.new}/{st.task.trials} best {self.speed(st)}"
                         for st in running[:3])
        more = f"; {len(running) - 3} more running" if len(running) > 3 else ""
        return f"sweep: {self.summary()}" + (f"; {best}{more}" if best else "")

    def __enter__(self) -> "_SweepView":
        self._t0 = time.monotonic()
        if self.mode == "table":
            from rich.console import Console
            from rich.live import Live
            self.live = Live(self.table(), refresh_per_second=4, console=Console(file=self.stream))
            self.live.__enter__()
        elif self.mode == "lines":
            planned = sum(st.task.trials for st in self.states.values())
            self._write(f"sweep: {len(self.states)} tasks, {planned} trials")
            self._thread = threading.Thread(target=self._tick, name="autotune-sweep-progress", daemon=True)
            self._thread.start()
        return self

    def refresh(self) -> None:
        if self.mode == "table":
            self.live.update(self.table())
        elif self.mode == "lines":
            from autotune.display import readable_key
            for key, st in self.states.items():
                if key not in self._ended and (st.status == "done" or st.status.startswith("failed")):
                    self._ended.add(key)
                    ended = len(self._ended)
                    self._write(f"sweep: {readable_key(key)} {st.status}: {st.new}/{st.task.trials} trials, best "
                                f"{self.speed(st)} ({ended} of {len(self.states)} tasks ended)")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.mode == "table":
            self.live.update(self.table())
            self.live.__exit__(None, None, None)
        elif self.mode == "lines":
            self.refresh()
            self._write(self.status())
