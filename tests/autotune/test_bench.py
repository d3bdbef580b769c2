"""bench: the best candidate is chosen after the finalists are timed again in alternating rounds."""
from __future__ import annotations

from autotune.bench import BenchOptions, Candidate, _final_pick
from autotune.task import Task


def test_a_lucky_tuning_time_does_not_pick_the_slower_kernel():
    task = Task.create("matmul", "192x192x192", "float32", threads=1)
    sp = task.space()
    good = task.presets()[0]
    slow = sp.validate({**good, "mr": min(sp.by_name["mr"].values()), "nr": min(sp.by_name["nr"].values()),
                        "kc": min(sp.by_name["kc"].values()), "pack_a": False})
    # the slow kernel was timed in a quiet spell (a fast time), the good one in a busy one
    cands = [Candidate(slow, seconds=1.0e-4), Candidate(good, seconds=1.2e-4), Candidate(slow, seconds=5e-4)]
    best, run = _final_pick(task, cands, task.inputs(seed=1), BenchOptions(rounds=3))
    assert best.config == good
    assert run().shape == (192, 192)


def test_only_candidates_near_the_fastest_are_finalists():
    task = Task.create("matmul", "64x64x64", "float32", threads=1)
    good = task.presets()[0]
    far = task.space().validate({**good, "pack_a": not good["pack_a"]})
    best, _ = _final_pick(task, [Candidate(good, seconds=1e-5), Candidate(far, seconds=1e-3)], task.inputs(),
                          BenchOptions())
    assert best.config == good  # the far one (100x slower when tuned) is not timed again
