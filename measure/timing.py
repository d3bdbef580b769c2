"""Timing a callable: warm-up, then `repeat` samples of `number` calls each, median and spread.

A sample can measure the neighbours instead of the kernel: on a virtual machine the hypervisor
takes the CPU away in the middle of it (steal time, /proc/stat), and on a busy machine the
kernel's threads wait for a CPU while other processes run on its cores (their run-queue delay,
/proc/self/task/*/schedstat). Such a disturbed sample is retaken, up to `retake` times per timing,
and the result says how many kept samples were still disturbed: a timing with any is `noisy`, as
is one whose samples stayed spread out.

Example::

    >>> from autotune.measure.timing import TimingProtocol, time_callable
    >>> t = time_callable(lambda: sum(range(100)), TimingProtocol(repeat=3, min_repeat_ms=1))
    >>> t.median > 0
    True
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class TimingProtocol:
    """How to time one kernel.

    warmup: calls before timing; number: calls per sample (raised until a sample lasts at least
    min_repeat_ms); repeat: samples; flush_cache: overwrite a buffer larger than the last-level
    cache before each sample; pause_ms: sleep between samples; retake_stolen: up to this many
    extra samples replace samples during which the hypervisor stole CPU time (0 keeps every
    sample; no effect where /proc/stat has no steal counter); cutoff: seconds per call above which
    the timing stops at its first undisturbed sample (0: never; a tuner's clear loser).
    """
    warmup: int = 1
    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 50.0
    flush_cache: bool = False
    flush_bytes: int = 64 << 20
    pause_ms: float = 0.0
    retake: int = 10
    max_wait: float = 0.05
    cutoff: float = 0.0

    def __post_init__(self) -> None:
        for name in ("warmup", "number", "repeat", "retake"):
            v = getattr(self, name)
            low = 1 if name in ("number", "repeat") else 0
            if not isinstance(v, int) or v < low:
                raise ValueError(f"TimingProtocol.{name} must be a {'positive' if low else 'non-negative'} "
                                 f"integer, got {v!r}")
        for name in ("min_repeat_ms", "pause_ms", "max_wait", "cutoff"):
            if getattr(self, name) < 0:
                raise ValueError(f"TimingProtocol.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: every kept sample, and their median, min and spread (max/min);
    retaken: disturbed samples thrown away and taken again; stolen: kept samples during which the
    hypervisor stole CPU time all the same (the retake budget ran out); waited: kept samples during
    which this process's threads waited for a CPU too long (other work ran on their cores); wait:
    the largest share of a kept sample they spent waiting; cut: stopped at its first undisturbed
    sample, slower than the protocol's cutoff."""
    samples: tuple[float, ...] = field(default_factory=tuple)
    retaken: int = 0
    stolen: int = 0
    waited: int = 0
    wait: float = 0.0
    cut: bool = False

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def spread(self) -> float:
        return max(self.samples) / min(self.samples)

    def noisy(self, max_spread: float = 1.10) -> bool:
        """Whether the machine was busy during this timing: its samples stayed spread out (max/min
        over max_spread), or a kept sample was disturbed (CPU time stolen, or the kernel's threads
        kept waiting for a CPU).

        >>> Timing((1.0, 1.05)).noisy(), Timing((1.0, 1.3)).noisy(), Timing((1.0, 1.0), stolen=1).noisy()
        (False, True, True)
        >>> Timing((1.0, 1.0), waited=2, wait=0.4).noisy()
        True
        """
        return self.spread > max_spread or self.stolen > 0 or self.waited > 0

    def contention(self) -> dict[str, float | int]:
        """What a log record keeps of the machine's state during the timing.

        >>> Timing((1.0, 1.2), retaken=3, waited=1, wait=0.25).contention()
        {'spread': 1.2, 'retaken': 3, 'stolen': 0, 'waited': 1, 'wait': 0.25}
        """
        return {"spread": round(self.spread, 4), "retaken": self.retaken, "stolen": self.stolen,
                "waited": self.waited, "wait": round(self.wait, 4)}


def _flusher(nbytes: int) -> Callable[[], None]:
    import numpy as np
    buf = np.zeros(nbytes // 8)

    def flush() -> None:
        np.add(buf, 1.0, out=buf)  # in place (`buf += 1.0` would make buf a local: UnboundLocalError)
    return flush


def _steal_ticks(cpus: frozenset[int] | None) -> int | None:
    """CPU time stolen by the hypervisor so far from these CPUs (None: all), in clock ticks;
    None where there is no counter (not Linux)."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = [ln.split() for ln in f if ln.startswith(b"cpu")]
        if cpus is None:
            return int(lines[0][8])
        return sum(int(ln[8]) for ln in lines[1:] if int(ln[0][3:]) in cpus)
    except (OSError, ValueError, IndexError):
        return None


def _run_delay_ns() -> int | None:
    """Nanoseconds this process's threads have spent runnable but waiting for a CPU (the second
    field of each /proc/self/task/*/schedstat); None where Linux does not count it."""
    total, seen = 0, False
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total if seen else None


def _own_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, when it is pinned to fewer than all of them."""
    try:
        mine = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return mine if len(mine) < (os.cpu_count() or len(mine)) else None


def calls_per_sample(fn: Callable[[], object], number: int, min_ms: float) -> int:
    """How many calls of fn, starting from `number`, make a sample of at least `min_ms` (none when
    min_ms is 0). fn is called while finding out, in a probe of about 1/16 of a sample (doubling the
    calls until they last that long), whose time per call is then scaled up (with 5% to spare): a
    probe run up to a whole sample cost about two samples' time.

    >>> import time
    >>> 10 <= calls_per_sample(lambda: time.sleep(0.0005), 1, 40) <= 90  # about 84 at 0.5 ms a call
    True
    """
    if min_ms <= 0:
        return number
    probe_ms = min_ms / 16
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        el = (time.perf_counter() - t0) * 1000
        if el >= probe_ms or number >= 1 << 20:
            return min(1 << 20, max(number, math.ceil(number * min_ms * 1.05 / max(el, 1e-6))))
        number = max(number * 2, int(number * probe_ms / max(el, 1e-3) * 1.1))


def calls_from_warmup(last: float, protocol: TimingProtocol) -> int | None:
    """Calls per sample told by the last warm-up call's seconds, without calling fn again to find
    out, when that call lasted at least 1/16 of a sample: long enough for one call's time to say it
    (for a shorter call, a page fault or a timer tick would be a large part of it); None otherwise
    (calls_per_sample finds out).

    >>> calls_from_warmup(0.010, TimingProtocol(min_repeat_ms=40)), calls_from_warmup(0.050, TimingProtocol())
    (4, 1)
    >>> calls_from_warmup(0.001, TimingProtocol(min_repeat_ms=40)) is None
    True
    """
    if protocol.number != 1 or last <= 0 or last * 1000 * 16 < protocol.min_repeat_ms:
        return None
    return max(1, math.ceil(protocol.min_repeat_ms / (last * 1000)))


def time_callable(fn: Callable[[], object], protocol: TimingProtocol = TimingProtocol()) -> Timing:
    """Time fn (which takes no arguments) following the protocol.

    >>> import time
    >>> t = time_callable(lambda: time.sleep(0.002), TimingProtocol(repeat=5, min_repeat_ms=1, cutoff=0.001))
    >>> t.cut, len(t.samples)
    (True, 1)
    """
    last = 0.0
    for _ in range(protocol.warmup):
        t0 = time.perf_counter()
        fn()
        last = time.perf_counter() - t0
    number = calls_from_warmup(last, protocol) or calls_per_sample(fn, protocol.number, protocol.min_repeat_ms)
    flush = _flusher(protocol.flush_bytes) if protocol.flush_cache else None
    samples: list[tuple[int, float, float]] = []  # (ticks stolen, share of it spent waiting, seconds per call)
    cpus = _own_cpus()
    steal = protocol.retake > 0 and _steal_ticks(cpus) is not None
    delay = protocol.retake > 0 and _run_delay_ns() is not None
    clean = 0
    cut = False
    while clean < protocol.repeat and len(samples) < protocol.repeat + protocol.retake:
        if protocol.pause_ms and samples:
            time.sleep(protocol.pause_ms / 1000)
        if flush:
            flush()
        steal0 = _steal_ticks(cpus) if steal else None
        wait0 = _run_delay_ns() if delay else None
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        wall = time.perf_counter() - t0
        wait1 = _run_delay_ns() if delay else None
        steal1 = _steal_ticks(cpus) if steal else None
        hit = steal1 - steal0 if steal1 is not None and steal0 is not None else 0
        waited = (wait1 - wait0) / 1e9 / max(wall, 1e-9) if wait1 is not None and wait0 is not None else 0.0
        samples.append((hit, waited, wall / number))
        undisturbed = hit == 0 and waited <= protocol.max_wait
        clean += undisturbed
        if protocol.cutoff and undisturbed and wall / number > protocol.cutoff:
            samples = [samples[-1]]  # the one undisturbed sample says it: a clear loser
            cut = True
            break
    kept = sorted(range(len(samples)), key=lambda i: (samples[i][0] > 0 or samples[i][1] > protocol.max_wait,
                                                      samples[i][0], samples[i][1], i))[:protocol.repeat]
    return Timing(tuple(samples[i][2] for i in sorted(kept)), retaken=len(samples) - len(kept),
                  stolen=sum(samples[i][0] > 0 for i in kept),
                  waited=sum(samples[i][1] > protocol.max_wait for i in kept),
                  wait=max(samples[i][1] for i in kept), cut=cut)
