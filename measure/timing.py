"""Timing a callable: warm-up, then `repeat` samples of `number` calls each, median and spread.

On a virtual machine the hypervisor can take the CPU away in the middle of a sample (steal
time, /proc/stat). Such a sample measures the neighbours, not the kernel: it is retaken, up to
`retake_stolen` times per timing, and the result says how many kept samples were still hit.

Example::

    >>> from measure.timing import TimingProtocol, time_callable
    >>> t = time_callable(lambda: sum(range(100)), TimingProtocol(repeat=3, min_repeat_ms=1))
    >>> t.median > 0
    True
"""
from __future__ import annotations

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
    sample; no effect where /proc/stat has no steal counter).
    """
    warmup: int = 1
    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 50.0
    flush_cache: bool = False
    flush_bytes: int = 64 << 20
    pause_ms: float = 0.0
    retake_stolen: int = 10

    def __post_init__(self) -> None:
        for name in ("warmup", "number", "repeat", "retake_stolen"):
            v = getattr(self, name)
            low = 1 if name in ("number", "repeat") else 0
            if not isinstance(v, int) or v < low:
                raise ValueError(f"TimingProtocol.{name} must be a {'positive' if low else 'non-negative'} "
                                 f"integer, got {v!r}")
        for name in ("min_repeat_ms", "pause_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"TimingProtocol.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: every kept sample, and their median, min and spread (max/min);
    retaken: samples thrown away because CPU time was stolen during them; stolen: kept samples
    that were hit all the same (the retake budget ran out)."""
    samples: tuple[float, ...] = field(default_factory=tuple)
    retaken: int = 0
    stolen: int = 0

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
        over max_spread), or CPU time was stolen during a kept one.

        >>> Timing((1.0, 1.05)).noisy(), Timing((1.0, 1.3)).noisy(), Timing((1.0, 1.0), stolen=1).noisy()
        (False, True, True)
        """
        return self.spread > max_spread or self.stolen > 0


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


def _own_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, when it is pinned to fewer than all of them."""
    try:
        mine = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return mine if len(mine) < (os.cpu_count() or len(mine)) else None


def calls_per_sample(fn: Callable[[], object], number: int, min_ms: float) -> int:
    """How many calls of fn, starting from `number`, make a sample of at least `min_ms`
    (fn is called while finding out; none when min_ms is 0)."""
    if min_ms <= 0:
        return number
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        el = time.perf_counter() - t0
        if el * 1000 >= min_ms or number >= 1 << 20:
            return number
        number = max(number * 2, int(number * min_ms / max(el * 1000, 1e-3) * 1.1))


def time_callable(fn: Callable[[], object], protocol: TimingProtocol = TimingProtocol()) -> Timing:
    """Time fn (which takes no arguments) following the protocol."""
    for _ in range(protocol.warmup):
        fn()
    number = calls_per_sample(fn, protocol.number, protocol.min_repeat_ms)
    flush = _flusher(protocol.flush_bytes) if protocol.flush_cache else None
    samples: list[tuple[int, float]] = []  # (ticks stolen during the sample, seconds per call)
    cpus = _own_cpus()
    counted = protocol.retake_stolen > 0 and _steal_ticks(cpus) is not None
    clean = 0
    while clean < protocol.repeat and len(samples) < protocol.repeat + protocol.retake_stolen:
        if protocol.pause_ms and samples:
            time.sleep(protocol.pause_ms / 1000)
        if flush:
            flush()
        before = _steal_ticks(cpus) if counted else None
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        el = (time.perf_counter() - t0) / number
        after = _steal_ticks(cpus) if counted else None
        hit = after - before if after is not None and before is not None else 0
        samples.append((hit, el))
        clean += hit == 0
    kept = sorted(range(len(samples)), key=lambda i: (samples[i][0], i))[:protocol.repeat]
    return Timing(tuple(samples[i][1] for i in sorted(kept)), retaken=len(samples) - len(kept),
                  stolen=sum(samples[i][0] > 0 for i in kept))
