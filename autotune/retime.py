"""Finalists: the fastest candidates of a task, timed again in alternating rounds before a best is named.

A single timing of a candidate can catch a busy spell of the machine (another process on its
cores, the hypervisor stealing CPU time) and make a slow kernel look fast or a fast one slow. The
tuner (autotune.tuner) re-times its finalists at the end of every run, and `autotune retime LOG`
re-times the finalists of every task of a log, on this machine: each finalist is timed once per
round, all of them in turn, so a busy spell falls on all of them alike. The re-timings are logged
as records (`retimed`), and a task's best is the fastest of the re-timings when there are any
(autotune.records.preference).

Which candidates are finalists: the `count` fastest whose quiet timings are within `within` of the
fastest quiet one, and the `noisy_count` fastest whose timings were noisy (a busy machine's times
say little about their order) within `noisy_within` of the fastest of all.

Example::

    >>> from autotune.runner import MeasureResult
    >>> measured = {"a": MeasureResult((1.0,)), "b": MeasureResult((1.1,)), "c": MeasureResult((3.0,)),
    ...             "d": MeasureResult((2.0,), noisy=True)}
    >>> pick_finalists(measured.items(), FinalistOptions(count=3, within=1.25))
    ['a', 'b', 'd']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, TypeVar

from autotune.errors import AutotuneError
from autotune.records import trust
from autotune.runner import MeasureInput, MeasureResult, Retimer, Runner
from autotune.task import Task

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class FinalistOptions:
    """count: quiet finalists (0: no re-timing), those within `within` of the fastest quiet time;
    noisy_count, noisy_within: finalists timed while the machine was busy, within noisy_within of
    the fastest time of all; rounds: alternating rounds of the re-timing; minimum: re-time only when
    there are at least this many finalists (one alone has nothing to be compared with)."""
    count: int = 3
    within: float = 1.25
    noisy_count: int = 4
    noisy_within: float = 4.0
    rounds: int = 3
    minimum: int = 2

    def __post_init__(self) -> None:
        for name in ("count", "noisy_count", "rounds", "minimum"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "rounds" else 0):
                raise AutotuneError(f"FinalistOptions.{name} must be an integer >= {1 if name == 'rounds' else 0}, "
                                    f"got {v!r}")
        for name in ("within", "noisy_within"):
            if not getattr(self, name) >= 1.0:
                raise AutotuneError(f"FinalistOptions.{name} must be a factor >= 1, got {getattr(self, name)!r}")


def most_trusted(results: Iterable[MeasureResult]) -> MeasureResult | None:
    """The result to believe among several timings of one kernel: its re-timings (the latest session
    compared it with the other finalists), else its fastest timing; of several re-timings, the fastest."""
    ok = [r for r in results if r.ok]
    return min(ok, key=lambda r: (trust(r), r.median)) if ok else None


def pick_finalists(measured: Iterable[tuple[K, MeasureResult]], options: FinalistOptions) -> list[K]:
    """The finalists among (candidate, result) pairs (a candidate may come with several results:
    its most trusted counts), fastest first: quiet ones, then noisy ones."""
    by: dict[K, list[MeasureResult]] = {}
    for k, r in measured:
        by.setdefault(k, []).append(r)
    best = {k: b for k, rs in by.items() if (b := most_trusted(rs)) is not None}
    if not best:
        return []
    quiet = sorted((r.median, i, k) for i, (k, r) in enumerate(best.items()) if not r.noisy)
    noisy = sorted((r.median, i, k) for i, (k, r) in enumerate(best.items()) if r.noisy)
    fastest = min(r.median for r in best.values())
    picks = [k for m, _, k in quiet if m <= quiet[0][0] * options.within][:options.count]
    picks += [k for m, _, k in noisy if m <= fastest * options.noisy_within][:options.noisy_count]
    return picks


def retime_finalists(task: Task, measured: Iterable[tuple[K, MeasureResult]], runner: Runner,
                     options: FinalistOptions, config_of: Callable[[K], Any] = lambda k: k,
                     on_start: Callable[[int, int], None] | None = None) -> list[tuple[K, MeasureResult]]:
    """Re-time the finalists of `measured` with the runner (a Retimer), in options.rounds
    alternating rounds: (finalist, its re-timing) for each, infrastructure faults left out. Nothing
    when the runner cannot re-time, or there are fewer finalists than options.minimum.
    on_start(finalists, rounds): called as the re-timing starts (a progress message)."""
    if not isinstance(runner, Retimer) or options.count + options.noisy_count == 0:
        return []
    picks = pick_finalists(measured, options)
    if len(picks) < max(1, options.minimum):
        return []
    if on_start is not None:
        on_start(len(picks), options.rounds)
    results = runner.retime([MeasureInput(task, config_of(k)) for k in picks], options.rounds)
    return [(k, r) for k, r in zip(picks, results) if not r.infrastructure]


def best_of(measured: Iterable[tuple[K, MeasureResult]]) -> tuple[K, MeasureResult] | None:
    """The candidate to name best: the fastest re-timing, else the fastest timing.

    >>> best_of([("a", MeasureResult((1.0,), noisy=True)), ("b", MeasureResult((2.0,), retimed=True))])[0]
    'b'
    """
    ok = [(k, r) for k, r in measured if r.ok]
    return min(ok, key=lambda kr: (trust(kr[1]), kr[1].median)) if ok else None


def busy_note(noisy: int, timed: int, log: str | None = None) -> str | None:
    """What a front end says when some of its timings were taken while the machine was busy (None
    when none was): a few (under a quarter) the finalists' re-timing absorbs; more make the best rough.

    >>> print(busy_note(3, 10, "tune.jsonl"))
    the machine was busy: 3 of 10 timings were disturbed (other work on the kernel's cores, CPU time stolen, or spread-out samples), so the best is rough; tune when the machine is quiet, or run `autotune retime tune.jsonl` then
    >>> print(busy_note(1, 21))
    1 of 21 timings was disturbed (other work on the kernel's cores, CPU time stolen, or spread-out samples): few enough for the finalists' re-timing to absorb
    """
    if noisy <= 0:
        return None
    why = "other work on the kernel's cores, CPU time stolen, or spread-out samples"
    if 4 * noisy < timed:
        return (f"{noisy} of {timed} timings {'was' if noisy == 1 else 'were'} disturbed ({why}): few enough for "
                "the finalists' re-timing to absorb")
    then = f"run `autotune retime {log}` then" if log else "keep a log and run `autotune retime LOG` then"
    return (f"the machine was busy: {noisy} of {timed} timings were disturbed ({why}), so the best is rough; tune "
            f"when the machine is quiet, or {then}")


__all__ = ["FinalistOptions", "best_of", "busy_note", "most_trusted", "pick_finalists", "retime_finalists"]
