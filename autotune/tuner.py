"""The tuner owns the loop: propose -> measure -> record -> update, within a budget.

Resuming: records of the same task already in the log are not measured again; they are fed
to the strategy first (its update), so a killed tuner picks up where it stopped.

Resumed records must come from this machine (same CPU model and ISA, autotune.records.from_target):
a log made elsewhere is measured afresh here, not trusted. Runs are assembled by autotune.tuning.

Every result is appended to the log the moment the runner reports it (a kill loses at most the
measurements in flight); a model-guided search's prediction for the config (its `prediction`)
goes into the record too. Each config is claimed before it is measured (autotune.claims), so two
tuners on one log never measure the same config; one the other tuner logged meanwhile is taken
from the log instead. An infrastructure result (ErrorKind.INFRASTRUCTURE: a lost worker, a full
disk) is logged but is no verdict: the config is measured again (at most INFRA_RETRIES times), it
does not count as a trial, and after INFRA_BATCHES batches in a row with nothing but
infrastructure faults the run stops with an AutotuneError naming the fault.

A config that builds the same kernel as one measured (equal `Backend.kernel_key`: a knob its tile
ignores, a block clamped to the matrix) is not measured again: the strategy is given its twin's
result, nothing is logged and no trial is spent (TuneResult.duplicates counts them). After
TWIN_ROUNDS rounds in a row of nothing but such twins the run stops: the space has no other kernel
the strategy finds. Each record keeps its kernel's key, so a resumed run knows the logged kernels
without generating their sources again (records of older logs have none: theirs are generated).
Working a key out runs the template's schedule(), which may crash or hang like any of its code: a
runner that measures in isolated workers works the keys out there (autotune.runner.KernelKeys: the
local and Ray runners), a batch's in one request, so the tuner's process never runs a schedule();
a key it could not work out (the schedule crashed or hung its worker) is None, and a config without
a key is its own kernel: it is measured, and its measurement records the fault with its kind. With
other runners (replay, TPU emulator: no isolated workers; the TPU backend has no keys) the keys are
worked out in this process.

A runner that takes more inputs while it runs (autotune.runner.Refilling: the local runner) is
given the next configs the moment a compile worker of its would wait, not after the batch's last
result: the results in by then are recorded (counted, given to the strategy and the callbacks),
the next configs are proposed from them, and the configs still in flight count against the trials
and are neither proposed nor compiled twice (a twin of one takes its result once it is measured).
In a 64-trial run the compile workers otherwise waited 3.2-3.7 s each at the ends of batches.

At the end of a run its finalists (the fastest kernels measured, resumed ones included) are timed
again in alternating rounds when the runner can (autotune.retime); the re-timings are logged, and
the best is the fastest re-timing (autotune.records.preference). TuneResult says how many of the
run's timings were noisy.

Example::

    >>> from autotune.tuning import tune                                  # doctest: +SKIP
    >>> result = tune(op="matmul", shape="256x256x256", trials=16, log="tune.jsonl")  # doctest: +SKIP
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from autotune.backends import Backend, backend_of
from autotune.claims import Claims
from autotune.errors import AutotuneError
from autotune.records import MAX_PREDICTED, Log, Record, RecordLog, from_target
from autotune.retime import FinalistOptions, best_of, most_trusted, retime_finalists
from autotune.search.base import Strategy
from autotune.space import Config
from autotune.target import current_target
from autotune.task import Task
from autotune.runner import ErrorKind, KernelKeys, MeasureInput, MeasureResult, Refilling, Runner

INFRA_RETRIES = 2   # times a config is measured again after an infrastructure fault
INFRA_BATCHES = 3   # batches in a row of nothing but infrastructure faults before the run stops
IDLE_ROUNDS = 10    # rounds in a row whose every proposal another tuner holds before the run stops
TWIN_ROUNDS = 20    # rounds in a row of nothing but configs whose kernel was measured before the run stops


@dataclass(frozen=True)
class TuneOptions:
    """trials: measurements to make in this run (resumed ones do not count); timeout_s: wall-time
    budget; early_stopping: stop after this many trials without improvement; batch: configs per
    round; finalists: which candidates are timed again at the end, in how many rounds (count=0
    and noisy_count=0: none); cutoff: a candidate slower than this many times the best so far is
    timed with one undisturbed sample, not all of them (None: every candidate fully; 1.5 leaves
    out no finalist, which are within FinalistOptions.within of the fastest quiet time); refill: with a
    runner that takes more inputs while it runs (autotune.runner.Refilling), propose the next batch
    the moment a worker of its would wait, from the results in by then, instead of after the
    batch's last result."""
    trials: int = 64
    timeout_s: float | None = None
    early_stopping: int | None = None
    batch: int = 8
    finalists: FinalistOptions = FinalistOptions()
    cutoff: float | None = 1.5
    refill: bool = True


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
    infrastructure: int = 0  # results lost to infrastructure faults (measured again, not trials)
    duplicates: int = 0      # configs not measured: the same kernel as one measured (their twin's result taken)
    timed: int = 0           # timings this run made: successful measurements and finalists' re-timings
    noisy: int = 0           # of those, the ones taken while the machine was busy (MeasureResult.noisy)
    retimed: int = 0         # finalists re-timed at the end of the run
    share: float | None = None  # the best's share of this machine's limit, where measured here (autotune.tuning)

    @property
    def best_gflops(self) -> float:
        return self.task.flops() / self.best_seconds / 1e9 if math.isfinite(self.best_seconds) else 0.0


Callback = Callable[[Task, Sequence[Config], Sequence[MeasureResult]], None]


def result_to_record(task: Task, cfg: Config, res: MeasureResult, strategy: str | None,
                     target: Mapping[str, Any], kernel: str | None = None, predicted: float | None = None) -> Record:
    return Record(op=task.op, shape=task.shape_dict, dtype=task.dtype, threads=task.threads, config=cfg.to_json(),
                  costs=list(res.costs) if res.ok else None, error=res.error.value if res.error else None,
                  message=res.message[:2000], compile_seconds=res.compile_seconds, timestamp=res.timestamp,
                  target=dict(target), strategy=strategy, noisy=res.noisy,
                  definition=task.template.definition(task.shape_dict, task.dtype) if task.template.definition else None,
                  kernel=kernel, contention=res.contention, retimed=res.retimed,
                  predicted=predicted if predicted is not None and abs(predicted) <= MAX_PREDICTED else None)


def record_to_result(r: Record) -> MeasureResult:
    return MeasureResult(tuple(r.costs) if r.ok else None, ErrorKind(r.error) if r.error else None,  # type: ignore[arg-type]
                         r.message, r.compile_seconds, r.timestamp, noisy=r.noisy, kernel=r.kernel,
                         contention=r.contention, retimed=r.retimed)


@dataclass
class _RunState:
    """One run's counters (TuneResult's), its best so far, the streaks that end it early, and the
    configs to measure again after an infrastructure fault."""
    t0: float = field(default_factory=time.perf_counter)
    best: float = math.inf
    best_cfg: Config | None = None
    history: list[tuple[float, float]] = field(default_factory=list)  # (elapsed s, best s so far)
    measured: int = 0
    resumed: int = 0
    errors: int = 0
    infrastructure: int = 0
    duplicates: int = 0
    timed: int = 0
    noisy: int = 0
    since_improvement: int = 0  # trials since the best last improved
    infra_batches: int = 0      # batches in a row of nothing but infrastructure faults
    idle: int = 0               # rounds in a row whose every proposal another tuner held
    twin_rounds: int = 0        # rounds in a row of nothing but twins of measured kernels
    retry: list[Config] = field(default_factory=list)
    infra_tries: dict[Config, int] = field(default_factory=dict)

    def count(self, c: Config, r: MeasureResult) -> None:
        """Count one trial (a verdict on its config)."""
        self.measured += 1
        self.timed += r.ok
        self.noisy += r.ok and r.noisy
        if r.ok and r.median < self.best:
            self.best, self.best_cfg, self.since_improvement = r.median, c, 0
        else:
            self.since_improvement += 1
        self.errors += r.error is not None
        self.history.append((time.perf_counter() - self.t0, self.best))


class _Kernels:
    """A run's configs by kernel: each config's kernel key (None: its own kernel), each kernel's
    first measurement by key, each kernel's measurement under its first config (`own`: the
    finalists' pool), and the configs done."""

    def __init__(self, work_out: Callable[[Sequence[Config]], list[str | None]]) -> None:
        self.work_out = work_out
        self.keys: dict[Config, str | None] = {}
        self.measured: dict[str, tuple[Config, MeasureResult]] = {}
        self.own: dict[Config, MeasureResult] = {}
        self.done: set[Config] = set()

    def learn(self, cs: Iterable[Config]) -> None:
        """Work out the kernel keys of the configs not known yet, all in one request."""
        missing = [c for c in dict.fromkeys(cs) if c not in self.keys]
        if missing:
            self.keys.update(zip(missing, self.work_out(missing)))

    def key(self, c: Config) -> str | None:
        self.learn([c])
        return self.keys[c]

    def add(self, pairs: Sequence[tuple[Config, MeasureResult]]) -> None:
        """Mark measured configs done, under their kernels (a kernel's first config keeps its result)."""
        for c, r in pairs:
            if r.kernel is not None:  # read back from the log (this tuner's or another's)
                self.keys.setdefault(c, r.kernel)
        self.learn(c for c, _ in pairs)
        for c, r in pairs:
            self.done.add(c)
            k = self.key(c)
            if k is not None and k not in self.measured:
                self.measured[k] = (c, r)
            if k is None or self.measured[k][0] == c:
                self.own[c] = r if c not in self.own else most_trusted([self.own[c], r]) or r


@dataclass(frozen=True)
class _Batch:
    """Configs to measure, their twins proposed with them (twin, config), and the cutoff to time them by."""
    configs: list[Config]
    twins: list[tuple[Config, Config]]
    cutoff: float | None

    def inputs(self, task: Task) -> list[MeasureInput]:
        return [MeasureInput(task, c, self.cutoff) for c in self.configs]


class Tuner:
    """Runs a strategy against a runner for one task, logging every measurement."""

    def __init__(self, task: Task, strategy: Strategy, runner: Runner, log: RecordLog | None = None,
                 callbacks: Sequence[Callback] = (), initial: Sequence[Config] = (),
                 on_retime: Callable[[int, int], None] | None = None) -> None:
        """initial: configs to measure first (e.g. a template's presets), then the strategy's;
        on_retime(finalists, rounds): called as the finalists' re-timing starts (a progress message)."""
        self.task, self.strategy, self.runner, self.log = task, strategy, runner, log
        self.callbacks = list(callbacks)
        self.initial = list(initial)
        self.on_retime = on_retime
        self.target = current_target(task.threads)
        self._followed: Log | None = None  # this task's records of the log, followed (resume)
        self._resumed: dict[Config, MeasureResult] = {}

    def resume(self) -> list[tuple[Config, MeasureResult]]:
        """Measurements of this task already in the log (configs validated against the space);
        infrastructure results are no measurement of their config and are left out. The log is
        read once, then only the lines appended since (autotune.records.Log), holding this task's
        records only."""
        if self.log is None:
            return []
        if self._followed is None:
            key = self.task.key()
            self._followed = Log(self.log.path, keep=lambda r: r.key == key, missing_ok=True)
            new = self._followed.records
        else:
            new = self._followed.refresh()
        space = self.task.space()
        mine = (r for r in new if r.error != ErrorKind.INFRASTRUCTURE.value)
        for r in from_target(mine, self.target, what="machine"):
            try:
                cfg = space.validate(r.config)
            except AutotuneError:
                continue
            res, prev = record_to_result(r), self._resumed.get(cfg)
            self._resumed[cfg] = res if prev is None else most_trusted([prev, res]) or res  # a re-timing, say
        return list(self._resumed.items())

    def _logged_since(self, known: set[Config]) -> list[tuple[Config, MeasureResult]]:
        """Measurements in the log not in `known` (another tuner's), without repeating load warnings."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [(c, r) for c, r in self.resume() if c not in known]

    def run(self, options: TuneOptions = TuneOptions()) -> TuneResult:
        s = _RunState()
        backend = backend_of(self.task)
        kernels = _Kernels(lambda cs: self._kernel_keys(backend, cs))
        previous = self.resume()
        s.resumed = len(previous)
        self._take(previous, s, kernels)
        claims = Claims(self.log.path) if self.log is not None else None
        while (batch := self._propose(options, s, kernels, claims)) is not None:
            self._measure(batch, options, s, kernels, claims)
        return self._finish(options, s, kernels)

    def _propose(self, options: TuneOptions, s: _RunState, kernels: _Kernels, claims: Claims | None,
                 in_flight: Sequence[Config] = ()) -> _Batch | None:
        """The next configs to measure (with their twins among them and among the configs in
        flight), None when the run is over: the trials (those in flight counted) are spent, it
        stops early, or proposals ran out."""
        while s.measured + len(in_flight) < options.trials and not self._stop_early(options, s):
            n = min(options.batch, options.trials - s.measured - len(in_flight))
            configs = self._next_batch(n, s, kernels, in_flight)
            if not configs:
                return None
            configs, batch_twins = self._skip_twins(configs, s, kernels, in_flight)
            if not configs:
                if s.twin_rounds >= TWIN_ROUNDS:
                    return None
                continue
            configs = self._claim(configs, claims, s, kernels)
            if not configs:
                if s.idle >= IDLE_ROUNDS:
                    return None
                continue
            cutoff = options.cutoff * s.best if options.cutoff is not None and math.isfinite(s.best) else None
            return _Batch(configs, batch_twins, cutoff)
        return None

    @staticmethod
    def _stop_early(options: TuneOptions, s: _RunState) -> bool:
        """Out of time, or no improvement for options.early_stopping trials."""
        if options.timeout_s is not None and time.perf_counter() - s.t0 > options.timeout_s:
            return True
        return options.early_stopping is not None and s.since_improvement >= options.early_stopping

    def _next_batch(self, n: int, s: _RunState, kernels: _Kernels, in_flight: Sequence[Config] = ()) -> list[Config]:
        """Up to n configs neither done nor in flight: those to measure again first, then the
        initial ones, then the strategy's proposals."""
        configs, s.retry = s.retry[:n], s.retry[n:]
        first = [c for c in self.initial if c not in kernels.done and c not in configs][:n - len(configs)]
        self.initial = [c for c in self.initial if c not in first and c not in kernels.done]
        configs += first
        if n > len(configs):
            configs += self.strategy.propose(n - len(configs)) or []
        return [c for c in dict.fromkeys(configs) if c not in kernels.done and c not in in_flight]

    def _skip_twins(self, configs: list[Config], s: _RunState, kernels: _Kernels,
                    in_flight: Sequence[Config] = ()) -> tuple[list[Config], list[tuple[Config, Config]]]:
        """The configs to measure; twins of kernels measured before take their result now, twins of
        a config in this batch or in flight (returned with it) take its result once it is measured."""
        kernels.learn(configs)
        configs, twins, batch_twins = self._without_twins(configs, kernels.key, kernels.measured, in_flight)
        self._take(twins, s, kernels)
        s.duplicates += len(twins)
        s.twin_rounds = 0 if configs else s.twin_rounds + 1
        return configs, batch_twins

    def _claim(self, configs: list[Config], claims: Claims | None, s: _RunState, kernels: _Kernels) -> list[Config]:
        """The configs this tuner may measure; what another tuner logged meanwhile is taken from the log."""
        if claims is not None:
            granted = set(claims.claim(self.task.key(), [c.key() for c in configs],
                                       logged=lambda: {c.key() for c, _ in self._logged_since(set())}))
            if len(granted) < len(configs):  # another tuner has (or had) some: take what it logged
                late = self._logged_since(kernels.done)
                self._take(late, s, kernels)
                s.resumed += len(late)
            configs = [c for c in configs if c.key() in granted]
            if not configs:
                s.idle += 1
                return configs
        s.idle = 0
        return configs

    def _record(self, configs: Sequence[Config], results: Sequence[MeasureResult],
                batch_twins: list[tuple[Config, Config]], s: _RunState, kernels: _Kernels) -> None:
        """Count measured configs, queue their infrastructure faults to be measured again, and give
        their verdicts (and their twins among batch_twins, which are taken off it) to the strategy
        and the callbacks."""
        verdicts = [(c, r) for c, r in zip(configs, results) if not r.infrastructure]
        faults = [(c, r) for c, r in zip(configs, results) if r.infrastructure]
        for c, r in verdicts:
            s.count(c, r)
        self._retry_faults(faults, bool(verdicts), s)
        by_config = dict(verdicts)
        late_twins = [(c, by_config[t]) for c, t in batch_twins if t in by_config]
        batch_twins[:] = [(c, t) for c, t in batch_twins if t not in by_config]
        s.duplicates += len(late_twins)
        if verdicts or late_twins:
            self._take(verdicts + late_twins, s, kernels)
            vc, vr = [c for c, _ in verdicts], [r for _, r in verdicts]
            for cb in self.callbacks:
                cb(self.task, vc, vr)

    def _retry_faults(self, faults: Sequence[tuple[Config, MeasureResult]], any_verdict: bool, s: _RunState) -> None:
        """Queue configs lost to the infrastructure to be measured again (at most INFRA_RETRIES
        times each); INFRA_BATCHES batches in a row of nothing but such faults stop the run."""
        for c, _ in faults:
            s.infrastructure += 1
            s.infra_tries[c] = s.infra_tries.get(c, 0) + 1
            if s.infra_tries[c] <= INFRA_RETRIES:
                s.retry.append(c)
        s.infra_batches = s.infra_batches + 1 if faults and not any_verdict else 0
        if s.infra_batches >= INFRA_BATCHES:
            raise AutotuneError(f"tuning {self.task.key()} stopped: {INFRA_BATCHES} batches in a row failed on the "
                                f"measuring infrastructure, not on their configs: {faults[0][1].message}")

    def _take(self, pairs: Sequence[tuple[Config, MeasureResult]], s: _RunState, kernels: _Kernels) -> None:
        """Give measurements (this run's, resumed or twins') to the strategy and the bookkeeping."""
        if pairs:
            self.strategy.update([c for c, _ in pairs], [r for _, r in pairs])
        kernels.add(pairs)
        for c, r in pairs:
            if r.ok and r.median < s.best:
                s.best, s.best_cfg = r.median, c

    def _finish(self, options: TuneOptions, s: _RunState, kernels: _Kernels) -> TuneResult:
        """Re-time the finalists, log the re-timings and name the best."""
        retimed = retime_finalists(self.task, kernels.own.items(), self.runner, options.finalists,
                                   on_start=self.on_retime)
        for c, r in retimed:
            self._log(c, r, kernels.key(c))
            kernels.own[c] = most_trusted([kernels.own[c], r]) if r.ok else r  # a kernel that failed its re-check is out
        pick = best_of(kernels.own.items())
        if pick is not None:
            s.best_cfg, s.best = pick[0], pick[1].median
        return TuneResult(self.task, s.best_cfg, s.best, s.measured, s.resumed, s.errors, time.perf_counter() - s.t0,
                          s.history, infrastructure=s.infrastructure, duplicates=s.duplicates,
                          timed=s.timed + len(retimed), noisy=s.noisy + sum(r.noisy for _, r in retimed),
                          retimed=len(retimed))

    def _kernel_keys(self, backend: Backend, configs: Sequence[Config]) -> list[str | None]:
        """The kernel keys of configs (None: unknown, the config is its own kernel): the runner's
        when it works them out in its isolated workers (KernelKeys), else this process's."""
        if isinstance(self.runner, KernelKeys):
            keys = list(self.runner.kernel_keys(self.task, configs))[:len(configs)]
            return keys + [None] * (len(configs) - len(keys))
        out: list[str | None] = []
        for c in configs:
            try:
                out.append(backend.kernel_key(self.task, c))
            except Exception:  # a template's schedule may fail any way: the runner reports it
                out.append(None)
        return out

    @staticmethod
    def _without_twins(configs: Sequence[Config], kernel_key: Callable[[Config], str | None],
                       measured: Mapping[str, tuple[Config, MeasureResult]], in_flight: Sequence[Config] = ()
                       ) -> tuple[list[Config], list[tuple[Config, MeasureResult]], list[tuple[Config, Config]]]:
        """(the configs to measure, twins of kernels measured before with their results, twins of
        a config in this batch or in flight with that config)."""
        keep: list[Config] = []
        first: dict[str, Config] = {k: c for c in in_flight if (k := kernel_key(c)) is not None}
        twins: list[tuple[Config, MeasureResult]] = []
        batch_twins: list[tuple[Config, Config]] = []
        for c in configs:
            k = kernel_key(c)
            if k is not None and k in measured:
                twins.append((c, measured[k][1]))
            elif k is not None and k in first:
                batch_twins.append((c, first[k]))
            else:
                keep.append(c)
                if k is not None:
                    first[k] = c
        return keep, twins, batch_twins

    def _log(self, config: Config, result: MeasureResult, kernel: str | None) -> None:
        if self.log is not None:
            self.log.append(result_to_record(self.task, config, result, getattr(self.strategy, "name", None),
                                             self.target, kernel, None if result.retimed else self._predicted(config)))

    def _predicted(self, config: Config) -> float | None:
        """The strategy's cost-model score of the config when it proposed it (a model-guided search's
        `prediction`), kept in its record; None for other strategies and unscored configs."""
        predict = getattr(self.strategy, "prediction", None)
        if predict is None:
            return None
        try:
            p = predict(config)
        except Exception:  # a strategy's bookkeeping must not cost a measurement its record
            return None
        return float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) else None

    def _measure(self, batch: _Batch, options: TuneOptions, s: _RunState, kernels: _Kernels,
                 claims: Claims | None) -> None:
        """Measure a batch, logging each result (with its kernel's key) as the runner reports it,
        and record it; release the claims after. A runner that takes more inputs while it runs
        (Refilling, with options.refill) is given the next configs whenever it asks: the results
        in by then are recorded first, so the proposals learn from them."""
        configs, twins = list(batch.configs), list(batch.twins)
        results: dict[int, MeasureResult] = {}
        unrecorded = list(range(len(configs)))

        def log_one(i: int, r: MeasureResult) -> None:
            if i not in results:
                self._log(configs[i], r, kernels.key(configs[i]))
                results[i] = r

        def record() -> None:
            idx = [i for i in unrecorded if i in results]
            if not idx:
                return
            unrecorded[:] = [i for i in unrecorded if i not in results]
            try:
                self._record([configs[i] for i in idx], [results[i] for i in idx], twins, s, kernels)
            finally:  # logged: a config lost to the infrastructure may be proposed again
                if claims is not None:
                    claims.release(self.task.key(), [configs[i].key() for i in idx])

        def refill() -> list[MeasureInput]:
            record()
            more = self._propose(options, s, kernels, claims, in_flight=[configs[i] for i in unrecorded])
            if more is None:
                return []
            unrecorded.extend(range(len(configs), len(configs) + len(more.configs)))
            configs.extend(more.configs)
            twins.extend(more.twins)
            return more.inputs(self.task)
        try:
            if options.refill and isinstance(self.runner, Refilling):
                answers = self.runner.run_refilling(batch.inputs(self.task), log_one, refill)
            else:
                answers = self.runner.run(batch.inputs(self.task), on_result=log_one)
            for i, r in enumerate(answers):  # a runner that did not report a result: log it now
                log_one(i, r)
            record()
        finally:
            if claims is not None:  # the recorded ones were released as they were recorded
                claims.release(self.task.key(), [configs[i].key() for i in unrecorded])
