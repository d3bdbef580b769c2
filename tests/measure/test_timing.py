"""The timing protocol: argument validation, warm-up, sample count, the cache flush, retakes of
samples the machine disturbed (CPU time stolen, the kernel's threads waiting for a CPU)."""
from __future__ import annotations

import time

import pytest

from autotune.measure.timing import Timing, TimingProtocol, time_callable


@pytest.mark.parametrize("kw", [{"warmup": -1}, {"number": 0}, {"repeat": 0}, {"repeat": 2.0},
                                {"min_repeat_ms": -1.0}, {"number": None}, {"pause_ms": -5},
                                {"retake": -1}, {"max_wait": -0.1}])
def test_protocol_validation(kw):
    with pytest.raises(ValueError, match="TimingProtocol"):
        TimingProtocol(**kw)


def test_warmup_number_repeat_are_followed():
    calls = []
    t = time_callable(lambda: calls.append(1), TimingProtocol(warmup=2, number=3, repeat=4, min_repeat_ms=0,
                                                                      retake=0))
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
    import autotune.measure.timing as timing
    ticks = {"now": 0, "call": 0}
    stolen_calls = {2, 4}  # the 2nd and 4th timed calls lose the CPU (and run slow)

    def fn() -> None:
        ticks["call"] += 1
        if ticks["call"] in stolen_calls:
            ticks["now"] += 3
            time.sleep(0.05)

    monkeypatch.setattr(timing, "_steal_ticks", lambda cpus: ticks["now"])
    monkeypatch.setattr(timing, "_run_delay_ns", lambda: None)  # a real wait on a busy machine is not this test's
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake=5))
    assert t.retaken == 2 and t.stolen == 0 and len(t.samples) == 3 and max(t.samples) < 0.03
    ticks.update(now=0, call=0)
    stolen_calls.update(range(1, 10))  # every sample hit: the budget runs out, the kept ones say so
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake=2))
    assert t.retaken == 2 and t.stolen == 3 and len(t.samples) == 3


def test_the_steal_counter_is_read_on_linux():
    import sys
    import autotune.measure.timing as timing
    got = timing._steal_ticks(None)
    assert got is None if not sys.platform.startswith("linux") else got >= 0


def test_a_timing_is_noisy_when_its_samples_spread_or_a_sample_was_disturbed():
    assert not Timing((1.0, 1.1)).noisy(1.10) and not Timing((1.0, 1.0), retaken=4).noisy()
    assert Timing((1.0, 1.11)).noisy(1.10) and not Timing((1.0, 1.11)).noisy(1.2)
    assert Timing((1.0, 1.0), stolen=1).noisy(2.0)  # a kept sample lost CPU time: noisy at any spread
    assert Timing((1.0, 1.0), waited=1, wait=0.3).noisy(2.0)  # its threads kept waiting for a CPU


def test_samples_whose_threads_waited_for_a_cpu_are_retaken(monkeypatch):
    """A sample during which this process's threads waited for a CPU longer than max_wait of it
    (another process ran on their cores) is disturbed: retaken while the budget lasts, then kept
    and counted, which makes the timing noisy."""
    import autotune.measure.timing as timing
    delay = {"ns": 0, "call": 0}
    busy_calls = {2, 4}

    def fn() -> None:
        delay["call"] += 1
        time.sleep(0.005)
        if delay["call"] in busy_calls:
            delay["ns"] += 4_000_000  # 4 ms of a ~5 ms sample spent waiting

    monkeypatch.setattr(timing, "_run_delay_ns", lambda: delay["ns"])
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake=5))
    assert t.retaken == 2 and t.waited == 0 and not t.noisy(10.0)
    delay.update(ns=0, call=0)
    busy_calls.update(range(1, 10))
    t = time_callable(fn, TimingProtocol(warmup=0, repeat=3, min_repeat_ms=0, retake=2))
    assert t.retaken == 2 and t.waited == 3 and t.wait > 0.5 and t.noisy(10.0)
    assert t.contention()["waited"] == 3


def test_another_process_on_the_kernels_core_makes_the_timing_noisy():
    """Real contention: a busy process pinned to the core this process times on. Its threads wait
    for the CPU, the run-queue delay says so, and the timing is noisy even when its samples agree."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "sched_setaffinity") or timing_delay() is None:
        pytest.skip("no per-thread run-queue delay here (Linux schedstat)")
    core = sorted(os.sched_getaffinity(0))[0]
    mine = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.3)  # the hog is running
        busy = time_callable(lambda: sum(range(20000)), TimingProtocol(warmup=1, repeat=3, min_repeat_ms=30, retake=1))
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, mine)
    assert busy.waited >= 1 and busy.wait > 0.2 and busy.noisy(100.0), busy
    quiet = time_callable(lambda: sum(range(20000)), TimingProtocol(warmup=1, repeat=3, min_repeat_ms=30))
    assert quiet.wait < busy.wait


def timing_delay():  # type: ignore[no-untyped-def]
    import autotune.measure.timing as timing
    return timing._run_delay_ns()


def test_a_call_slower_than_the_cutoff_ends_the_timing_at_its_first_undisturbed_sample():
    slow = time_callable(lambda: time.sleep(0.003), TimingProtocol(warmup=1, repeat=5, min_repeat_ms=1, cutoff=0.001))
    assert slow.cut and len(slow.samples) == 1 and slow.samples[0] >= 0.003
    fast = time_callable(lambda: None, TimingProtocol(warmup=1, repeat=5, min_repeat_ms=1, cutoff=0.001))
    assert not fast.cut and len(fast.samples) == 5
