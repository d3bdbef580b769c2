"""The one place a tuning run is assembled: task -> strategy (+ cost model) -> runner -> tuner -> log.

The CLI, `autotune.op`, `autotune.tune`, `bench`, sweeps and every experiment build their runs
here, so a strategy, a cost model and a runner mean the same thing everywhere.

Example::

    >>> from autotune.tuning import tune                                              # doctest: +SKIP
    >>> r = tune(op="matmul", shape="256x256x256", trials=16, log="mm.jsonl", cost_model="xgb")  # doctest: +SKIP
    >>> r.best_config is not None                                                     # doctest: +SKIP
    True
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from autotune.errors import AutotuneError
from autotune.progress import ProgressOptions, TuneProgress
from autotune.records import Record, RecordLog, best_per_task, from_target, load_records
from autotune.registry import Registry
from autotune.retime import FinalistOptions, retime_finalists
from autotune.runner import ErrorKind, MeasureResult, Runner
from autotune.search import Strategy, make_strategy
from autotune.space import Config
from autotune.task import Task
from autotune.target import current_target
from autotune.tuner import Callback, Tuner, TuneOptions, TuneResult, record_to_result, result_to_record


class RunnerFactory(Protocol):
    """How every runner is made by name: factory(options=..., address=...); a factory ignores what its
    runner does not use (a runner class offers it as the classmethod `from_options`)."""

    def __call__(self, *, options: Any = None, address: str | None = None) -> Runner: ...


# name -> RunnerFactory, imported on first use (the CLI's --runner choices are its names)
RUNNERS: Registry[RunnerFactory] = Registry("runner", {
    "local": "autotune.measure.local:LocalRunner.from_options",
    "ray": "autotune.measure.ray_runner:RayRunner.from_options",
    "tpu_emulator": "autotune.backends.tpu.runner:TpuRunner.from_options",
})


@dataclass(frozen=True)
class Search:
    """A strategy and the tuner callbacks it needs (a cost model's refit)."""
    strategy: Strategy
    callbacks: tuple[Callback, ...] = ()

    @property
    def name(self) -> str:
        return self.strategy.name


def make_search(task: Task, *, strategy: str | Strategy | None = None, cost_model: str | None = None,
                pretrained: str | os.PathLike[str] | None = None, roofline: bool = True, seed: int = 0,
                exploration: float | None = None) -> Search:
    """The search for a task. A cost model (or a pretrained one) steers the evolutionary strategy;
    naming another strategy beside it is an error, never silently one of the two. The guided search
    starts from the pretrained model, else from the backend's analytical prior (roofline=False: blind);
    exploration: the share of its picks made at random instead of by the model (None: its default,
    0.1; 0.0: the model's picks only), an error without a cost model.

    >>> from autotune.task import Task
    >>> make_search(Task.create("matmul", "32x32x32", threads=1), strategy="random").name
    'random'
    """
    if exploration is not None and not 0.0 <= exploration <= 1.0:
        raise AutotuneError(f"exploration must be a share between 0 and 1, got {exploration}")
    if cost_model is None and pretrained is None:
        if exploration is not None:
            raise AutotuneError("exploration is the share of a model-guided search's picks made at random: "
                                "it needs a cost model (or a pretrained one)")
        return Search(make_strategy(strategy or "evolutionary", task.space(), seed=seed))
    if strategy is not None and strategy != "evolutionary":
        name = strategy if isinstance(strategy, str) else type(strategy).__name__
        raise AutotuneError(f"a cost model steers the evolutionary search; strategy {name!r} cannot use one: "
                            "drop the strategy or the cost model")
    from autotune.cost_model import REGISTRY
    if cost_model in REGISTRY:
        REGISTRY[cost_model].check_available(cost_model)  # a missing package: an error before any measurement
    from autotune.search.guided import guided_search
    search, updater = guided_search(task, cost_model or "xgb", pretrained=pretrained, roofline=roofline, seed=seed,
                                    **({} if exploration is None else {"epsilon": exploration}))
    return Search(search, (updater,))


def make_runner(runner: str | Runner | None = None, *, task: Task | None = None, options: Any = None,
                address: str | None = None) -> Runner:
    """A runner by name (one of RUNNERS; its factory gets options and address), or the runner itself.
    None: the task's backend's runner (local worker processes for CPU kernels). options:
    LocalRunnerOptions for "local" and "ray"; address: the Ray cluster for "ray" (default: a local Ray)."""
    if runner is not None and not isinstance(runner, str):
        return runner
    return RUNNERS.get(runner or _backend_runner(task))(options=options, address=address)


def _backend_runner(task: Task | None) -> str:
    from autotune.backends import backend_of
    return backend_of(task).runner if task is not None else "local"


@contextlib.contextmanager
def _owned(runner: Runner, own: bool) -> Iterator[Runner]:
    try:
        yield runner
    finally:
        if own:
            runner.close()


def tune(*, op: str | Any, shape: str | Sequence[int] | Mapping[str, int] | None = None, dtype: str = "float32",
         threads: int | None = None, trials: int = 64, log: str | os.PathLike[str] | RecordLog | None = None,
         strategy: str | Strategy | None = None, cost_model: str | None = None,
         pretrained: str | os.PathLike[str] | None = None, roofline: bool = True, exploration: float | None = None,
         runner: str | Runner | None = None, runner_options: Any = None, seed: int = 0,
         timeout_s: float | None = None, early_stopping: int | None = None, batch: int = 8, presets: bool = True,
         progress: bool | ProgressOptions | None = None, callbacks: Sequence[Callback] = (),
         finalists: FinalistOptions | None = FinalistOptions()) -> TuneResult:
    """Tune one operator at one shape: the template's presets first (presets=False: the search's
    picks only), then the strategy's, logging every measurement; an existing log is resumed. A run
    in which no config ran correctly raises NoValidConfig (its `result` holds the run).

    op: a template name, a Template or a Task (then shape, dtype and threads come from it);
    log: a path or a RecordLog (each measurement is appended the moment it completes);
    strategy: a name from autotune.search.STRATEGIES or a Strategy; cost_model: a name from
    autotune.cost_model.MODELS, steering the evolutionary search (pretrained: a saved model to
    start from; roofline=False: no analytical prior either; exploration: the share of its picks
    made at random, see make_search); runner: a name from RUNNERS or a Runner (None: the backend's
    own, local worker processes for CPU kernels; a Runner passed in is left open for the caller);
    runner_options: LocalRunnerOptions for a runner made here; progress: False none, else a live bar
    on a terminal and a plain line every few seconds elsewhere (a ProgressOptions: how often, where);
    callbacks: called with (task, configs, results) after each measured
    batch; finalists: the fastest candidates timed again in alternating rounds at the end, and
    logged, before the best is named (autotune.retime; None: none).

    Example::

        >>> from autotune.tuning import tune                                   # doctest: +SKIP
        >>> r = tune(op="matmul", shape="512x512x512", trials=32, log="mm.jsonl", cost_model="xgb")  # doctest: +SKIP
    """
    task = as_task(op, shape, dtype, threads)
    if trials < 0 or batch < 1:
        raise AutotuneError(f"trials must be >= 0 and batch >= 1, got trials={trials}, batch={batch}")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise AutotuneError(f"timeout_s must be a finite number of seconds > 0 (or None: no limit), got {timeout_s}")
    if early_stopping is not None and early_stopping < 1:
        raise AutotuneError(f"early_stopping must be >= 1 (or None: never stop early), got {early_stopping}")
    search = make_search(task, strategy=strategy, cost_model=cost_model, pretrained=pretrained, roofline=roofline,
                         seed=seed, exploration=exploration)
    if finalists is None:
        finalists = FinalistOptions(count=0, noisy_count=0)
    show = progress is not False
    own = runner is None or isinstance(runner, str)
    failures = _Failures()
    from autotune.cache import prune_on_start
    prune_on_start()  # the kernel cache kept under its cap (AUTOTUNE_CACHE_MAX_MB)
    with _owned(make_runner(runner, task=task, options=runner_options), own) as r, \
            TuneProgress(task, trials, show, progress if isinstance(progress, ProgressOptions) else ProgressOptions()
                         ) as bar:
        records = log if isinstance(log, RecordLog) or log is None else RecordLog(log)
        tuner = Tuner(task, search.strategy, r, records,
                      callbacks=[*search.callbacks, *callbacks, bar.update, failures],
                      initial=task.presets() if presets else (), on_retime=bar.retiming)
        result = tuner.run(TuneOptions(trials=trials, timeout_s=timeout_s, early_stopping=early_stopping, batch=batch,
                                       finalists=finalists))
        if runner is None or runner == "local":  # measured here: this machine's limit applies
            result.share = limit_share(task, result.best_seconds)
        bar.finish(result.best_seconds, result.retimed, share=result.share)
    result.failures = failures.by_kind
    if result.best_config is None:
        raise NoValidConfig(result)
    return result


def limit_share(task: Task, seconds: float) -> float | None:
    """A kernel's share of this machine's limit (the roofline `bench` and `report` use) from the
    peak measured before (measure.peak's cache; never measured here), or None: no roofline for the
    task, no cached peak, no finite time."""
    from autotune.measure.peak import cached_peak, task_roof
    roof = task_roof(task) if math.isfinite(seconds) and seconds > 0 else None
    peak = cached_peak(task.dtype, task.threads) if roof is not None else None  # a damaged cache reads as empty
    if roof is None or peak is None:
        return None
    i, nbytes, written = roof
    return peak.share(task.flops() / seconds / 1e9, i, nbytes, written)


class NoValidConfig(AutotuneError):
    """No config of a run (nor any it resumed from the log) ran correctly: the message says the
    most common failure (`no_valid_config`); `result` is the run, its failures counted by kind."""

    def __init__(self, result: TuneResult) -> None:
        super().__init__(no_valid_config(result))
        self.result = result


class _Failures:
    """A tuner callback counting the failed measurements of a run by kind, keeping the first message."""

    def __init__(self) -> None:
        self.by_kind: dict[ErrorKind, tuple[int, str]] = {}

    def __call__(self, task: Task, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for res in results:
            if res.error is not None:
                count, message = self.by_kind.get(res.error, (0, res.message))
                self.by_kind[res.error] = (count + 1, message)


def no_valid_config(result: TuneResult) -> str:
    """Why a run found no config that works: the most common failure kind and one of its messages.

    >>> from autotune.tuner import TuneResult
    >>> r = TuneResult(Task.create("matmul", "8x8x8", threads=1), None, float("inf"), 2, 0, 2, 0.1,
    ...                failures={ErrorKind.COMPILE_ERROR: (2, "Numba could not compile the kernel")})
    >>> no_valid_config(r)
    'no config of matmul|M=8,N=8,K=8|float32|threads=1 ran correctly: 2 of 2 trials failed, most often compile_error (2 of them), e.g. Numba could not compile the kernel'
    """
    where = f"no config of {result.task.key()} ran correctly"
    if not result.failures:
        return f"{where}: no trial was made ({result.measured} measured, {result.resumed} resumed from the log)"
    kind, (count, message) = max(result.failures.items(), key=lambda kv: kv[1][0])
    first = next((line.strip() for line in message.splitlines() if line.strip()), "(no message)")
    return (f"{where}: {result.errors} of {result.measured} trials failed, most often {kind.value} "
            f"({count} of them), e.g. {first}")


@dataclass(frozen=True)
class RetimeRow:
    """One task of `retime`: its best record before and after, how many finalists were re-timed
    and how many of those re-timings were noisy (error: why the task could not be re-timed)."""
    key: str
    before: Record
    after: Record
    retimed: int
    noisy: int
    error: str | None = None


def retime(*, log: str | os.PathLike[str], top: int = 5, rounds: int = 5, any_target: bool = False,
           runner: str | Runner | None = None, runner_options: Any = None,
           on_task: Callable[[RetimeRow], None] | None = None,
           on_start: Callable[[str, int, int], None] | None = None) -> list[RetimeRow]:
    """Time the finalists of every task of a log again on this machine, in `rounds` alternating
    rounds, and append the re-timings to the log: `top` kernels whose quiet timings are within 25%
    of the fastest, and up to 3 * top of those timed while the machine was busy (whose order says
    little), fastest first. Records of another ISA are left out (any_target=True: re-timed here
    too). Afterwards `load_best`, `apply_history`, `replay` and ops take the re-timings first.
    on_task(row): called as each task is done; on_start(key, finalists, rounds): as its re-timing starts.

    Example::

        >>> from autotune.tuning import retime                                # doctest: +SKIP
        >>> [(r.key, r.before.seconds, r.after.seconds) for r in retime(log="tune.jsonl")]  # doctest: +SKIP
    """
    if top < 1 or rounds < 1:
        raise AutotuneError(f"top and rounds must be >= 1, got top={top}, rounds={rounds}")
    path = os.fspath(log)
    records = from_target(load_records(path), current_target(1), any_target=any_target)
    by_task: dict[str, list[Record]] = {}
    for r in records:
        by_task.setdefault(r.key, []).append(r)
    by_task = {key: rs for key, rs in by_task.items() if any(r.ok for r in rs)}
    if not by_task:
        raise AutotuneError(f"the log {path} has no successful measurement of this ISA to re-time")
    options = FinalistOptions(count=top, noisy_count=3 * top, noisy_within=math.inf, rounds=rounds, minimum=1)
    out_log = RecordLog(path)
    rows: list[RetimeRow] = []
    with _owned(make_runner(runner or "local", options=runner_options), runner is None or isinstance(runner, str)) as r:
        for key in sorted(by_task):
            rs = by_task[key]
            before = best_per_task(rs, valid=False).get(key) or next(x for x in rs if x.ok)
            try:
                task = rs[0].task()
                space = task.space()
            except AutotuneError as e:
                rows.append(RetimeRow(key, before, before, 0, 0, str(e)))
                continue
            pairs, config_of, kernels = [], {}, {}
            for x in (x for x in rs if x.ok):  # a log is untrusted: configs outside the space are left out
                try:
                    c = space.validate(x.config)
                except AutotuneError:
                    continue
                kernel = x.kernel or c  # configs of one kernel (its key) are re-timed once
                pairs.append((kernel, record_to_result(x)))
                config_of.setdefault(kernel, c)
                kernels.setdefault(kernel, x.kernel)
            start = None if on_start is None else (lambda n, rounds, key=key: on_start(key, n, rounds))
            done = retime_finalists(task, pairs, r, options, config_of=config_of.__getitem__, on_start=start)
            here = current_target(task.threads)
            new = [result_to_record(task, config_of[k], res, "retime", here, kernels[k]) for k, res in done]
            out_log.extend(new)
            after = best_per_task(rs + new).get(key, before)
            row = RetimeRow(key, before, after, len(done), sum(x.noisy for x in new))
            rows.append(row)
            if on_task is not None:
                on_task(row)
    return rows


def as_task(op: str | Any, shape: str | Sequence[int] | Mapping[str, int] | None = None, dtype: str = "float32",
            threads: int | None = None) -> Task:
    """A Task from a name (or Template) and a shape, or the Task itself."""
    if isinstance(op, Task):
        if shape is not None:
            raise AutotuneError("pass either a Task or an operator with a shape, not both")
        return op
    from autotune.templates import get_template
    t = get_template(op)
    return Task.create(t, shape if shape is not None else t.default_shape, dtype, threads)


__all__ = ["RUNNERS", "RetimeRow", "RunnerFactory", "Search", "as_task", "make_runner", "make_search", "no_valid_config", "retime",
           "tune"]
