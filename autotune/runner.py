"""The Runner interface: a batch of MeasureInputs in, one MeasureResult per input out.

Errors are data, not exceptions: a result carries an ErrorKind and a message instead of costs.

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
from typing import Protocol, Sequence, runtime_checkable

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


@dataclass(frozen=True)
class MeasureInput:
    task: Task
    config: Config


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per run (one per timing sample) or an error, plus metadata."""
    costs: tuple[float, ...] | None
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float | None = None
    timestamp: float = field(default_factory=time.time)
    noisy: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]

    @property
    def min(self) -> float:
        return min(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]

    @property
    def spread(self) -> float:
        return max(self.costs) / min(self.costs) if self.ok else float("inf")  # type: ignore[arg-type]


@runtime_checkable
class Runner(Protocol):
    """Measures batches of candidates. Implementations live in measure/: LocalRunner, RayRunner, ReplayRunner, TpuRunner, SurrogateRunner."""

    def run(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order. Never raises for a bad candidate."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


def config_error(inp: MeasureInput) -> MeasureResult | None:
    """A compile error for a config outside its task's space (what building it would give), else
    None: for runners that answer without building a kernel."""
    try:
        inp.task.space().validate(inp.config)
    except AutotuneError as e:
        return MeasureResult(None, ErrorKind.COMPILE_ERROR, f"{type(e).__name__}: {e}")
    return None
