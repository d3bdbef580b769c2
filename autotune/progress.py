"""Progress of a tuning run, a tuner callback: trials done, the best so far, errors, elapsed time.

On a terminal a live bar (rich); elsewhere (stderr piped or logged: CI, nohup, a notebook's
captured output) a plain line every `ProgressOptions.interval_s` seconds, so a run is never silent
for long: while a batch compiles, while the finalists are timed again (`retiming`), always; the
last line says the trials, errors, seconds and the best (`finish`). On a terminal, a line after the
bar says the best only when it differs from the search's (the finalists' re-timing changed it).

    >>> from autotune.progress import TuneProgress                  # doctest: +SKIP
    >>> with TuneProgress(task, total=64) as progress:               # doctest: +SKIP
    ...     Tuner(task, strategy, runner, log, callbacks=[progress.update]).run(options)
"""
from __future__ import annotations

import math
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence, TextIO

from autotune.errors import AutotuneError


@dataclass(frozen=True)
class ProgressOptions:
    """interval_s: seconds between the plain lines written when the stream is not a terminal;
    terminal: True a live bar, False plain lines, None whichever fits the stream (a bar on a
    terminal); stream: where to write (None: sys.stderr at the time of writing)."""
    interval_s: float = 5.0
    terminal: bool | None = None
    stream: TextIO | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.interval_s, (int, float)) and math.isfinite(self.interval_s) and self.interval_s > 0):
            raise AutotuneError(f"ProgressOptions.interval_s must be a finite number of seconds > 0, "
                                f"got {self.interval_s!r}")


class PeriodicLines(ABC):
    """A line of `status()` on `stream` every options.interval_s seconds (from a thread that waits on
    `_stop`), each prefixed "autotune: ". A subclass sets options, _lock and _stop and defines status()."""
    options: ProgressOptions
    _lock: threading.Lock
    _stop: threading.Event

    @property
    def stream(self) -> TextIO:
        return self.options.stream or sys.stderr

    @abstractmethod
    def status(self) -> str:
        """The line to print now."""

    def _tick(self) -> None:
        while not self._stop.wait(self.options.interval_s):
            self._write(self.status())

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                print(f"autotune: {text}", file=self.stream, flush=True)
            except (OSError, ValueError):  # a closed or broken stream: progress is not worth failing a run
                pass


class TuneProgress(PeriodicLines):
    """enabled=False: silent (the callbacks still count). Use as a context manager."""

    def __init__(self, task: Any, total: int, enabled: bool = True,
                 options: ProgressOptions = ProgressOptions()) -> None:
        self.task, self.total, self.enabled, self.options = task, total, enabled, options
        self.best = float("inf")
        self.errors = 0
        self.done = 0
        self.phase = ""
        self.final: str | None = None
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.mode = "off"

    def _name(self) -> str:
        from autotune.display import readable_key
        return readable_key(self.task.key())

    def __enter__(self) -> "TuneProgress":
        self._t0 = time.monotonic()
        if not self.enabled:
            return self
        terminal = self.options.terminal
        if terminal is None:
            terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        if terminal:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.mode = "bar"
            self.prog = Progress(TextColumn(f"tuning {self._name()}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 console=Console(file=self.stream))
            self.prog.__enter__()
            self.tid = self.prog.add_task("tune", total=self.total, info="")
        else:
            self.mode = "lines"
            self._write(f"tuning {self._name()}: {self.total} trials")
            self._thread = threading.Thread(target=self._tick, name="autotune-progress", daemon=True)
            self._thread.start()
        return self

    def _speed(self, seconds: float) -> str:
        per, unit = self.task.speed_unit()
        return f"{per / seconds:.1f} {unit}"

    def status(self) -> str:
        """The plain progress line: trials done of the total, the best so far, errors, elapsed."""
        best = f"best {self._speed(self.best)}" if self.best < float("inf") else "no successful trial yet"
        line = (f"{self._name()}: {self.done}/{self.total} trials, {best}, {self.errors} error"
                f"{'s' * (self.errors != 1)}, {time.monotonic() - self._t0:.0f} s")
        return f"{line}; still {self.phase}" if self.phase else line  # the phase had a line of its own as it began

    def update(self, task: Any, configs: Sequence[Any], results: Sequence[Any]) -> None:
        for r in results:
            self.errors += r.error is not None
            if r.ok:
                self.best = min(self.best, r.median)
        self.done += len(results)
        if self.mode == "bar":
            best = f"best {self._speed(self.best)}" if self.best < float("inf") else ""
            self.prog.update(self.tid, advance=len(results), info=f"{best}  errors {self.errors}")

    def retiming(self, count: int, rounds: int) -> None:
        """The finalists' re-timing starts: say so at once (it may take a while)."""
        self.set_phase(f"re-timing the {count} fastest in {rounds} alternating rounds...")

    def set_phase(self, text: str) -> None:
        self.phase = text
        if self.mode == "bar":
            self.prog.update(self.tid, info=text)
        elif self.mode == "lines":
            self._write(f"{self._name()}: {text}")

    def finish(self, best_seconds: float, retimed: int = 0, share: float | None = None) -> None:
        """The run named its best. Plain lines: a closing line says how many trials, errors and
        seconds, and the best (with its share of the machine's limit where `share` is known, and
        why it differs from the search's, if it does). A bar: one line only when the best differs
        from the bar's. Both are written on exit."""
        self.phase = ""
        named = self._speed(best_seconds) if math.isfinite(best_seconds) else None
        limit = f"{100 * share:.0f}% of the limit" if share is not None else None
        said = self._speed(self.best).split()[0] if self.best < float("inf") else None
        why = None  # why the named best differs from the search's
        if named is not None and named.split()[0] != said:
            why = ("after re-timing the finalists" + (f" (the search's timing said {said})" if said else "") if retimed
                   else "a measurement resumed from the log" + (f" (this run's best: {said})" if said else ""))
        if self.mode == "lines":
            best = (f"best {named} ({best_seconds * 1e6:.1f} us{f', {limit}' if limit else ''})"
                    + (f" {why}" if why else "") if named is not None else "no successful trial")
            self.final = (f"finished {self.done} trial{'s' * (self.done != 1)} ({self.errors} error"
                          f"{'s' * (self.errors != 1)}, {time.monotonic() - self._t0:.1f} s): {best}")
        elif why is not None:
            self.final = f"best {named}{f' ({limit})' if limit else ''} {why}"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.mode == "bar":
            self.prog.__exit__(None, None, None)
        if self.mode != "off" and self.final and not exc[0]:
            self._write(f"{self._name()}: {self.final}")


__all__ = ["ProgressOptions", "TuneProgress"]
