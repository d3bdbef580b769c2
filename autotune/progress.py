"""A rich progress bar for tuning: trials done, best result so far, errors. A tuner callback.

    >>> from autotune.progress import TuneProgress                  # doctest: +SKIP
    >>> with TuneProgress(task, total=64) as progress:               # doctest: +SKIP
    ...     Tuner(task, strategy, runner, log, callbacks=[progress.update]).run(options)
"""
from __future__ import annotations

from typing import Any, Sequence


class TuneProgress:
    def __init__(self, task: Any, total: int, enabled: bool = True) -> None:
        self.task, self.total, self.enabled = task, total, enabled
        self.best = float("inf")
        self.errors = 0

    def __enter__(self) -> "TuneProgress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.prog = Progress(TextColumn(f"tuning {self.task.key()}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"))
            self.prog.__enter__()
            self.tid = self.prog.add_task("tune", total=self.total, info="")
        return self

    def update(self, task: Any, configs: Sequence[Any], results: Sequence[Any]) -> None:
        for r in results:
            self.errors += r.error is not None
            if r.ok:
                self.best = min(self.best, r.median)
        if self.enabled:
            per, unit = self.task.speed_unit()
            best = f"best {per / self.best:.1f} {unit}" if self.best < float("inf") else ""
            self.prog.update(self.tid, advance=len(results), info=f"{best}  errors {self.errors}")

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.prog.__exit__(None, None, None)
