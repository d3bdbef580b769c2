"""ReplayRunner: answers measurements from a recorded log, timing nothing.

It lets search strategies be tested (and compared) deterministically and fast. Configs that
the log does not hold are answered by `fallback(task, config) -> seconds` when given, else
recorded as a runtime error saying the config is not in the log.

Example::

    >>> from autotune.measure.replay import ReplayRunner
    >>> runner = ReplayRunner([], fallback=lambda task, cfg: 1e-3)
    >>> runner.replayed, runner.missing
    (0, 0)
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

from autotune.records import Record, load_records
from autotune.space import Config
from autotune.task import Task
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, OnResult, config_error, report_all


class ReplayRunner:
    """A Runner over recorded measurements (a log path or records)."""

    def __init__(self, log: str | os.PathLike[str] | Iterable[Record],
                 fallback: Callable[[Task, Config], float | None] | None = None) -> None:
        records = load_records(log) if isinstance(log, (str, os.PathLike)) else list(log)
        self.table: dict[tuple[str, str], Record] = {}
        for r in records:
            self.table.setdefault((r.key, r.config_key()), r)
        self.fallback = fallback
        self.replayed = 0
        self.missing = 0

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        return report_all(self._answer(inputs), on_result)

    def _answer(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            bad = config_error(inp)
            if bad is not None:
                out.append(bad)
                continue
            r = self.table.get((inp.task.key(), inp.config.key()))
            if r is not None:
                self.replayed += 1
                out.append(MeasureResult(tuple(r.costs) if r.ok else None,  # type: ignore[arg-type]
                                         ErrorKind(r.error) if r.error else None, r.message,
                                         r.compile_seconds, r.timestamp))
                continue
            self.missing += 1
            sec = self.fallback(inp.task, inp.config) if self.fallback else None
            if sec is None:
                out.append(MeasureResult(None, ErrorKind.RUNTIME_ERROR, "config not in the replay log"))
            else:
                out.append(MeasureResult((float(sec),), None, "", 0.0))
        return out

    def close(self) -> None:
        pass

