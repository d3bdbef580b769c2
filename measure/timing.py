"""Timing a callable: warm-up, then `repeat` samples of `number` calls each, median and spread.

Example::

    >>> from measure.timing import TimingProtocol, time_callable
    >>> t = time_callable(lambda: sum(range(100)), TimingProtocol(repeat=3, min_repeat_ms=1))
    >>> t.median > 0
    True
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class TimingProtocol:
    """How to time one kernel.

    warmup: calls before timing; number: calls per sample (raised until a sample lasts at least
    min_repeat_ms); repeat: samples; flush_cache: overwrite a buffer larger than the last-level
    cache before each sample.
    """
    warmup: int = 1
    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 50.0
    flush_cache: bool = False
    flush_bytes: int = 64 << 20
    pause_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in ("warmup", "number", "repeat"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "warmup" else 1):
                raise ValueError(f"TimingProtocol.{name} must be a {'non-negative' if name == 'warmup' else 'positive'} "
                                 f"integer, got {v!r}")
        for name in ("min_repeat_ms", "pause_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"TimingProtocol.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: every sample, and their median, min and spread (max/min)."""
    samples: tuple[float, ...] = field(default_factory=tuple)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def spread(self) -> float:
        return max(self.samples) / min(self.samples)


def _flusher(nbytes: int) -> Callable[[], None]:
    import numpy as np
    buf = np.zeros(nbytes // 8)

    def flush() -> None:
        np.add(buf, 1.0, out=buf)  # in place (`buf += 1.0` would make buf a local: UnboundLocalError)
    return flush


def time_callable(fn: Callable[[], object], protocol: TimingProtocol = TimingProtocol()) -> Timing:
    """Time fn (which takes no arguments) following the protocol."""
    for _ in range(protocol.warmup):
        fn()
    number = protocol.number
    if protocol.min_repeat_ms > 0:
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            el = time.perf_counter() - t0
            if el * 1000 >= protocol.min_repeat_ms or number >= 1 << 20:
                break
            number = max(number * 2, int(number * protocol.min_repeat_ms / max(el * 1000, 1e-3) * 1.1))
    flush = _flusher(protocol.flush_bytes) if protocol.flush_cache else None
    samples = []
    for i in range(protocol.repeat):
        if protocol.pause_ms and i:
            time.sleep(protocol.pause_ms / 1000)
        if flush:
            flush()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return Timing(tuple(samples))
