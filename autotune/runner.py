"""The Runner interface: a batch of MeasureInputs in, one MeasureResult per input out.

Errors are data, not exceptions: a result carries an ErrorKind and a message instead of costs.
A runner reports each result through `on_result(index, result)` as soon as it is known (so the
tuner logs every measurement the moment it completes), then returns them all in order.
INFRASTRUCTURE results (a lost worker or actor, a worker that could not start, a cache or disk
error) say nothing about the config: the tuner measures it again and never resumes from them.

A runner that can also time candidates again (a `Retimer`: the local and Ray runners) re-times a
tuning's finalists in alternating rounds, so that a busy spell of the machine does not pick the
best (autotune.retime).

A runner that takes more inputs while it runs a batch (a `Refilling`: the local runner) asks the
tuner for the next configs the moment a worker of its would otherwise wait: the tuner proposes them
from the results reported so far, so compiling goes on across what were the ends of batches.

A runner that measures in isolated workers also tells the tuner which configs build the same kernel
(a `KernelKeys`: the local and Ray runners): working that out runs the template's schedule(), which
may crash or hang like any of its code, so it runs in a worker too; a crash or a hang there gives
None (no twin known) and the measurement records the fault, with its kind.

Example::

    >>> from autotune.runner import ErrorKind, MeasureResult
    >>> MeasureResult(costs=None, error=ErrorKind.RUN_TIMEOUT, message="ran over 10 s").ok
    False
"""
from __future__ import annotations

import enum
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

from autotune.errors import AutotuneError
from autotune.space import Config
from autotune.task import Task


class ErrorKind(str, enum.Enum):
    """Why a candidate has no time."""
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUNTIME_ERROR = "runtime_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"
    WORKER_CRASHED = "worker_crashed"
    INFRASTRUCTURE = "infrastructure"  # not the config's fault: never its verdict


@dataclass(frozen=True)
class MeasureInput:
    """A candidate to measure. cutoff_s: seconds per run above which the runner may stop timing
    after one undisturbed sample (the tuner's best so far times TuneOptions.cutoff: a candidate
    that slow cannot be the best, and the one sample is a real measurement); None: time it fully."""
    task: Task
    config: Config
    cutoff_s: float | None = None


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per run (one per timing sample; of a re-timing, the median of each round) or an
    error, plus metadata. noisy: the machine was busy during the timing (samples spread out, CPU
    time stolen, or the kernel's threads kept waiting for a CPU); contention: what the timing saw of
    that (measure.timing.Timing.contention); retimed: a finalist's re-timing in alternating rounds."""
    costs: tuple[float, ...] | None
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float | None = None
    timestamp: float = field(default_factory=time.time)
    noisy: bool = False
    kernel: str | None = None  # the kernel's key when known (a result read back from a log)
    contention: Mapping[str, float] | None = None
    retimed: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def infrastructure(self) -> bool:
        """The measurement failed for a reason outside the config (measure it again)."""
        return self.error is ErrorKind.INFRASTRUCTURE

    @property
    def median(self) -> float:
        return statistics.median(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]

    @property
    def min(self) -> float:
        return min(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]

    @property
    def spread(self) -> float:
        return max(self.costs) / min(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]


OnResult = Callable[[int, MeasureResult], None]
Refill = Callable[[], Sequence[MeasureInput]]


@runtime_checkable
class Runner(Protocol):
    """Measures batches of candidates. Implementations live in measure/: LocalRunner, RayRunner, ReplayRunner, TpuRunner, SurrogateRunner."""

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        """One result per input, in order. Never raises for a bad candidate. on_result(index,
        result) is called exactly once per input, with the result returned for it, as soon as that
        result is known (at the latest before run returns)."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


@runtime_checkable
class Retimer(Protocol):
    """A runner that can time measured candidates again (LocalRunner, RayRunner)."""

    def retime(self, inputs: Sequence[MeasureInput], rounds: int) -> list[MeasureResult]:
        """One result per input, in order: each kernel built and checked again, then all timed in
        `rounds` alternating rounds (round 1: each kernel in turn, round 2: each again, ...), so a
        busy spell of the machine falls on all of them alike; from round 2 on, a kernel each of
        whose quiet rounds was slower than every quiet round of the fastest may stop being timed.
        A result's costs are its rounds' medians, retimed=True; noisy when at least half of its
        rounds were. Never raises for a bad candidate; INFRASTRUCTURE results when no timing could
        be made."""
        ...


@runtime_checkable
class Refilling(Protocol):
    """A runner that takes more inputs while it runs a batch (LocalRunner)."""

    def run_refilling(self, inputs: Sequence[MeasureInput], on_result: OnResult | None,
                      refill: Refill) -> list[MeasureResult]:
        """As Runner.run, for `inputs` and every input refill() adds: refill is called (in the
        caller's thread, between results) whenever the runner could start work it does not have,
        and after an empty answer only once a result was reported since. Added inputs are numbered
        after those before them (on_result's index, the returned list). A worker refill uses (say,
        for kernel keys: KernelKeys) is one with nothing of this run in hand."""
        ...


@runtime_checkable
class KernelKeys(Protocol):
    """A runner that works out kernel keys in its isolated workers (LocalRunner, RayRunner), so
    that a template's schedule() never runs in the tuner's process. A runner that wraps one of
    these should pass it on: without it, the tuner works the keys out in its own process."""

    def kernel_keys(self, task: Task, configs: Sequence[Config]) -> list[str | None]:
        """One key per config, in order (autotune.backends.Backend.kernel_key: configs with equal
        keys build the same kernel), all in one request. None where the backend has no key, the
        config does not build, or working it out crashed or hung the worker (which is replaced):
        the measurement of that config then records the fault. Never raises for a bad config."""
        ...


def report_all(results: list[MeasureResult], on_result: OnResult | None) -> list[MeasureResult]:
    """Report every result of a batch that is known only at its end; return them.

    >>> seen = []
    >>> report_all([MeasureResult((1.0,))], lambda i, r: seen.append(i))[0].ok, seen
    (True, [0])
    """
    if on_result is not None:
        for i, r in enumerate(results):
            on_result(i, r)
    return results


def config_error(inp: MeasureInput) -> MeasureResult | None:
    """A compile error for a config outside its task's space (what building it would give), else
    None: for runners that answer without building a kernel."""
    try:
        inp.task.space().validate(inp.config)
    except AutotuneError as e:
        return MeasureResult(None, ErrorKind.COMPILE_ERROR, f"{type(e).__name__}: {e}")
    return None
