"""The timing protocol: argument validation, warm-up, sample count, the cache flush, steal retakes."""
from __future__ import annotations

import time

import pytest

from measure.timing import Timing, TimingProtocol, time_callable


@pytest.mark.parametrize("kw", [{"warmup": -1}, {"number": 0}, {"repeat": 0}, {"repeat": 2.0},
                                {"min_repeat_ms": -1.0}, {"number": None}, {"pause_ms": -5},
                                {"retake_stolen": -1}])
def test_protocol_validation(kw):
    with pytest.raises(ValueError, match="TimingProtocol"):
        TimingProtocol(**kw)


def test_warmup_number_repeat_are_followed():
    calls = []
    t = time_callable(lambda: calls.append(1), TimingProtocol(warmup=2, number=3, repeat=4, min_repeat_ms=0,
                                                                      retake_stolen=0))
    assert len(t.samples) == 4
    assert len(calls) == 2 + 3 * 4
    assert t.min <= t.median and t.spread >= 1.0


def test_min_repeat_ms_raises_number():
    calls = []
    t = time_callable(lambda: calls.append(1), TimingProtocol(warmup=0, number=1, repeat=2, min_repeat_ms=5))
    assert len(calls) > 10  # a no-op takes far less than 5 ms: number was raised
    assert all(s > 0 for s in t.samples)


def test_flush_cache_runs():
    t = time_callable(lambda: None, TimingProtocol(warmup=0, repeat=2, min_repeat_ms=0, flush_cache=True,
                                                   flush_bytes=1 << 16))
    assert len(t.samples) == 2


def test_timing_stats():
    t = Timing((3.0, 1.0, 2.0))
    assert t.median == 2.0 and t.min == 1.0 and t.spread == 3.0


def test_pause_ms_spreads_samples_over_time():
    import time
    t0 = time.perf_counter()
    t = time_callable(lambda: None, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, pause_ms=30))
    assert len(t.samples) == 3 and time.perf_counter() - t0 >= 0.06  # two pauses, none before the first


def test_samples_the_hypervisor_stole_from_are_retaken(monkeypatch):
    """Samples during which the steal counter moved are replaced, while the budget lasts; then
    the least-stolen samples are kept and counted."""
    import measure.timing as timing
    ticks = {"now": 0, "call": 0}
    stolen_calls = {2, 4}  # the 2nd and 4th timed calls lose the CPU (and run slow)

    def fn() -> None:
        ticks["call"] += 1
        if ticks["call"] in stolen_calls:
            ticks["now"] += 3
            time.sleep(0.02)

    monkeypatch.setattr(timing, "_steal_ticks", lambda cpus: ticks["now"])
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake_stolen=5))
    assert t.retaken == 2 and t.stolen == 0 and len(t.samples) == 3 and max(t.samples) < 0.015
    ticks.update(now=0, call=0)
    stolen_calls.update(range(1, 10))  # every sample hit: the budget runs out, the kept ones say so
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake_stolen=2))
    assert t.retaken == 2 and t.stolen == 3 and len(t.samples) == 3


def test_the_steal_counter_is_read_on_linux():
    import sys
    import measure.timing as timing
    got = timing._steal_ticks(None)
    assert got is None if not sys.platform.startswith("linux") else got >= 0


def test_a_timing_is_noisy_when_its_samples_spread_or_cpu_time_was_stolen():
    assert not Timing((1.0, 1.1)).noisy(1.10) and not Timing((1.0, 1.0), retaken=4).noisy()
    assert Timing((1.0, 1.11)).noisy(1.10) and not Timing((1.0, 1.11)).noisy(1.2)
    assert Timing((1.0, 1.0), stolen=1).noisy(2.0)  # a kept sample lost CPU time: noisy at any spread
