"""The tuner owns the loop: propose -> measure -> record -> update, within a budget.

Resuming: records of the same task already in the log are not measured again; they are fed
to the strategy first (its update), so a killed tuner picks up where it stopped.

Resumed records must come from this machine (same CPU model and ISA, autotune.records.from_target):
a log made elsewhere is measured afresh here, not trusted. Runs are assembled by autotune.tuning.

Example::

    >>> from autotune.tuning import tune                                  # doctest: +SKIP
    >>> result = tune(op="matmul", shape="256x256x256", trials=16, log="tune.jsonl")  # doctest: +SKIP
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from autotune.errors import AutotuneError
from autotune.records import Record, RecordLog, from_target, load_records
from autotune.search.base import Strategy
from autotune.space import Config
from autotune.target import current_target
from autotune.task import Task
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, Runner


@dataclass(frozen=True)
class TuneOptions:
    """trials: measurements to make in this run (resumed ones do not count); timeout_s: wall-time
    budget; early_stopping: stop after this many trials without improvement; batch: configs per
    round."""
    trials: int = 64
    timeout_s: float | None = None
    early_stopping: int | None = None
    batch: int = 8


@dataclass
class TuneResult:
    task: Task
    best_config: Config | None
    best_seconds: float
    measured: int
    resumed: int
    errors: int
    wall_seconds: float
    history: list[tuple[float, float]] = field(default_factory=list)  # (elapsed s, best s so far)
    # the measurements of this run that failed, by kind: (count, the first one's message); set by autotune.tuning
    failures: dict[ErrorKind, tuple[int, str]] = field(default_factory=dict)

    @property
    def best_gflops(self) -> float:
        return self.task.flops() / self.best_seconds / 1e9 if math.isfinite(self.best_seconds) else 0.0


Callback = Callable[[Task, Sequence[Config], Sequence[MeasureResult]], None]


def result_to_record(task: Task, cfg: Config, res: MeasureResult, strategy: str | None,
                     target: Mapping[str, Any]) -> Record:
    return Record(op=task.op, shape=task.shape_dict, dtype=task.dtype, threads=task.threads, config=cfg.to_json(),
                  costs=list(res.costs) if res.ok else None, error=res.error.value if res.error else None,
                  message=res.message[:2000], compile_seconds=res.compile_seconds, timestamp=res.timestamp,
                  target=dict(target), strategy=strategy, noisy=res.noisy,
                  definition=task.template.definition(task.shape_dict, task.dtype) if task.template.definition else None)


def record_to_result(r: Record) -> MeasureResult:
    return MeasureResult(tuple(r.costs) if r.ok else None, ErrorKind(r.error) if r.error else None,  # type: ignore[arg-type]
                         r.message, r.compile_seconds, r.timestamp)


class Tuner:
    """Runs a strategy against a runner for one task, logging every measurement."""

    def __init__(self, task: Task, strategy: Strategy, runner: Runner, log: RecordLog | None = None,
                 callbacks: Sequence[Callback] = (), initial: Sequence[Config] = ()) -> None:
        """initial: configs to measure first (e.g. a template's presets), then the strategy's."""
        self.task, self.strategy, self.runner, self.log = task, strategy, runner, log
        self.callbacks = list(callbacks)
        self.initial = list(initial)
        self.target = current_target(task.threads)

    def resume(self) -> list[tuple[Config, MeasureResult]]:
        """Measurements of this task already in the log (configs validated against the space)."""
        if self.log is None or not self.log.path.exists():
            return []
        space = self.task.space()
        out: dict[Config, MeasureResult] = {}
        key = self.task.key()
        for r in from_target((r for r in load_records(self.log.path) if r.key == key), self.target, what="machine"):
            try:
                cfg = space.validate(r.config)
            except AutotuneError:
                continue
            out[cfg] = record_to_result(r)
        return list(out.items())

    def run(self, options: TuneOptions = TuneOptions()) -> TuneResult:
        t0 = time.perf_counter()
        best_cfg: Config | None = None
        best = math.inf
        previous = self.resume()
        if previous:
            cfgs, results = zip(*previous)
            self.strategy.update(list(cfgs), list(results))
            for c, r in previous:
                if r.ok and r.median < best:
                    best, best_cfg = r.median, c
        measured = errors = 0
        since_improvement = 0
        history: list[tuple[float, float]] = []
        while measured < options.trials:
            if options.timeout_s is not None and time.perf_counter() - t0 > options.timeout_s:
                break
            if options.early_stopping is not None and since_improvement >= options.early_stopping:
                break
            n = min(options.batch, options.trials - measured)
            done = {c for c, _ in previous}
            first = [c for c in self.initial if c not in done][:n]
            self.initial = [c for c in self.initial if c not in first and c not in done]
            configs = first + (self.strategy.propose(n - len(first)) or [] if n > len(first) else [])
            if not configs:
                break
            results = self.runner.run([MeasureInput(self.task, c) for c in configs])
            for c, r in zip(configs, results):
                if self.log is not None:
                    self.log.append(result_to_record(self.task, c, r, getattr(self.strategy, "name", None), self.target))
                measured += 1
                if r.ok and r.median < best:
                    best, best_cfg, since_improvement = r.median, c, 0
                else:
                    since_improvement += 1
                errors += r.error is not None
                history.append((time.perf_counter() - t0, best))
            self.strategy.update(configs, results)
            for cb in self.callbacks:
                cb(self.task, configs, results)
        return TuneResult(self.task, best_cfg, best, measured, len(previous), errors, time.perf_counter() - t0, history)
