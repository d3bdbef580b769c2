"""The spinning thread team that runs parallel kernels: every range runs once, on the right
thread count, whether the workers are spinning or asleep, and repeated calls reuse the job."""
from __future__ import annotations

import threading

import autotune  # noqa: F401  (sets Numba up before numba is imported)
import numba
import numpy as np
import pytest

from autotune.codegen.team import Team, entry_for, team_for


@numba.njit("void(int64[::1], int64[::1], int64, int64)", nogil=True)
def _mark(out, calls, lo, hi):  # type: ignore[no-untyped-def]
    for i in range(lo, hi):
        out[i] += 1
    calls[lo] += 1


@pytest.mark.parametrize("workers,spin_us,grain", [(1, 2000.0, 1), (1, 0.0, 7), (2, 2000.0, 16), (2, 0.0, 1)])
def test_every_iteration_runs_once_per_call(workers: int, spin_us: float, grain: int) -> None:
    team = Team(workers, spin_us)
    try:
        n = 1000
        out, calls = np.zeros(n, np.int64), np.zeros(n, np.int64)
        per_thread = [(out, calls)] * (workers + 1)
        for _ in range(50):  # the same job again and again: workers rerun it without Python
            team.run(_mark, per_thread, n, grain)
        other = np.zeros(n, np.int64)
        team.run(_mark, [(other, calls)] * (workers + 1), n, grain)  # a new job after the repeated one
        assert (out == 50).all() and (other == 1).all()
        threads = workers + 1  # chunks of `grain` from the front of each thread's contiguous share
        starts = [i for b in range(threads) for i in range(b * n // threads, (b + 1) * n // threads, grain)]
        assert (calls[starts] == 51).all() and calls.sum() == 51 * len(starts)
    finally:
        team.stop()
    assert not any(t.is_alive() for t in team._threads)


def test_each_thread_runs_with_its_own_arguments() -> None:
    team = team_for(2)
    n = 64
    mine, theirs = np.zeros(n, np.int64), np.zeros(n, np.int64)
    calls = np.zeros(n, np.int64)
    for _ in range(20):
        team.run(_mark, [(mine, calls), (theirs, calls)], n, 1)
    assert ((mine + theirs) == 20).all()  # every iteration once, on one thread or the other


def test_a_worker_woken_from_sleep_runs_its_range() -> None:
    team = Team(1, spin_us=50.0)  # spins 50 us, then sleeps
    try:
        out, calls = np.zeros(10, np.int64), np.zeros(10, np.int64)
        for _ in range(5):
            team.run(_mark, [(out, calls)] * 2, 10)
            threading.Event().wait(0.01)  # long enough for the worker to fall asleep
        assert (out == 5).all()
    finally:
        team.stop()


def test_bad_arguments_are_a_clear_error() -> None:
    team = team_for(2)
    with pytest.raises(ValueError, match="needs 2 argument tuples"):
        team.run(_mark, [(np.zeros(4, np.int64), np.zeros(4, np.int64))], 4)
    with pytest.raises(ValueError, match="grain >= 1"):
        team.run(_mark, [(np.zeros(4, np.int64), np.zeros(4, np.int64))] * 2, 4, 0)


def test_calls_from_several_python_threads_do_not_mix() -> None:
    team = team_for(2)
    n = 64
    outs = [np.zeros(n, np.int64) for _ in range(4)]
    calls = [np.zeros(n, np.int64) for _ in range(4)]

    def hammer(i: int) -> None:
        for _ in range(100):
            team.run(_mark, [(outs[i], calls[i])] * 2, n)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((o == 100).all() for o in outs)


def test_the_team_entry_is_compiled_once_per_kernel() -> None:
    assert entry_for(_mark) is entry_for(_mark)


def test_a_parallel_kernel_checks_out_and_matches_on_two_threads(pin_target) -> None:  # type: ignore[no-untyped-def]
    from autotune.errors import ShapeError
    from autotune.task import Task
    pin_target("avx2", executes=True)  # its w4x16 tile
    task = Task.create("conv2d", "1x16x16x30x8x3x3x1x1x1", "float32", 2)
    k = task.build({"tile": "w4x16", "cb": 16, "red_order": "crs", "outer": "oh_k",
                    "pad_at": "blocked_thread", "parallel": "oh"})
    assert k.nest.main.parallel_extent == 2
    ins = task.inputs(seed=3)
    out = np.full(k.output_shape, np.nan, np.float32)
    run = k.bind(*ins, out=out)
    for _ in range(3):  # repeated calls reuse the per-thread scratch buffers
        assert run() is out
        np.testing.assert_allclose(out, task.reference(ins), rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError, match="out must be a C-contiguous float32 array"):
        k.bind(*ins, out=np.empty(k.output_shape, np.float64))


@numba.njit("void(int64[::1], int64[::1], int64, int64)", nogil=True)
def _who(mark, ran_by, lo, hi):  # type: ignore[no-untyped-def]
    """ran_by[i] = this thread's mark, for each iteration, after 20000 steps of work each (0.56 us
    on the Zen 5 here: a share of 32 iterations lasts about 18 us, long enough for a spinning
    worker to start on its share before the caller is through its own)."""
    for i in range(lo, hi):
        x = i
        for _ in range(20000):
            x = (x * 1103515245 + 12345) % 2147483648
        ran_by[i] = mark[0] if x != 7 else -2  # (a test on x: the work is not optimised away)


def test_each_thread_runs_its_own_contiguous_share_first() -> None:
    """Each thread runs the chunks of its own share (with one worker, its half of the range) from
    the front: the threads stream from distant parts of the inputs instead of interleaving chunks.
    (The one done first then takes what is left of the other's: it may take a chunk or two.)"""
    team = Team(1, 2000.0)
    try:
        n, grain = 64, 4
        mine, theirs = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        marks = (np.array([0]), np.array([1]))
        runs = []
        for _ in range(20):
            mine[:], theirs[:] = -1, -1
            team.run(_who, [(marks[0], mine), (marks[1], theirs)], n, grain)
            ran = np.where(mine >= 0, mine, theirs)
            assert (ran >= 0).all()  # every iteration ran
            runs.append(ran)
        # at least the first half of each share, on its own thread (a worker woken late: not all runs)
        assert any((ran[:n // 4] == 0).all() and (ran[n // 2:3 * n // 4] == 1).all() for ran in runs)
    finally:
        team.stop()
