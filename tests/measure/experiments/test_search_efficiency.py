"""search-efficiency's bookkeeping (not its timings): trials-to-target counting, re-timing order,
and which logged searches are counted."""
from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import pytest

from autotune.task import Task
from autotune.measure.experiments.search_efficiency import (_alternate, _count, _count_at, _guided_log, _interleave,
                                                   _running_best, _searches_logged, _summary, _trials_to)


def test_trials_to_counts_from_one_and_gives_none_when_never_reached() -> None:
    bests = _running_best([5.0, 3.0, math.inf, 2.0, 4.0])
    assert bests == [5.0, 3.0, 3.0, 2.0, 2.0]
    assert _trials_to(3.0, bests) == 2 and _trials_to(1.0, bests) is None


def test_alternate_times_every_callable_every_round_and_keys_medians() -> None:
    calls: dict[str, int] = {"a": 0, "b": 0}

    def counting(key: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            calls[key] += 1
        return run

    medians = _alternate({"a": counting("a"), "b": counting("b")}, rounds=3)
    assert set(medians) == {"a", "b"} and all(m > 0 for m in medians.values())
    assert calls["a"] >= 3 and calls["b"] >= 3
    assert _alternate({"a": counting("a")}, rounds=0) == {}


def test_interleave_samples_every_callable_each_round_and_ranks_a_slower_one_slower() -> None:
    calls: dict[str, int] = {"fast": 0, "slow": 0}

    def spin(key: str, seconds: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            calls[key] += 1
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        return run

    medians = _interleave({"fast": spin("fast", 1e-4), "slow": spin("slow", 4e-4)}, seconds=0.0, min_rounds=5)
    assert set(medians) == {"fast", "slow"} and medians["slow"] > 2 * medians["fast"]
    # a warm-up call and calibration calls, then 5 rounds of samples (how many calls a sample takes
    # follows a calibration timing, which a loaded machine can stretch: not asserted)
    assert calls["slow"] >= 2 + 5 and calls["fast"] >= 2 + 5
    assert _interleave({}, seconds=1.0) == {}



def test_count_sets_the_target_from_a_prefix_of_the_random_search() -> None:
    fixed = {"random": [4.0, 2.0, 3.0, 1.0],  # seconds per trial; the best of the first 2 is 2.0
             "xgb seed 1": [3.0, 2.05, 1.0], "xgb seed 2": [2.0, 5.0, 5.0],
             "xgb_pretrained seed 1": [5.0, 5.0, 5.0], "xgb_pretrained seed 2": [1.0, 1.0, 1.0]}
    short = _count(fixed, 2, trials=3, flops=2e9)
    assert short["best_gflops"] == 1.0 and short["random_within"] == 1 and short["random"] == 1.5
    assert short["xgb_runs"] == [2, 1] and short["xgb"] == 1.5 and short["xgb_vs_random"] == 1.0
    assert short["xgb_pretrained_runs"] == [None, 1] and short["xgb_pretrained"] is None
    assert short["xgb_pretrained_censored"] == 2.5  # the miss counts as trials + 1
    assert "xgb_blind_runs" not in short  # a search with no runs is left out
    full = _count(fixed, 4, trials=3, flops=2e9)
    assert full["best_gflops"] == 2.0 and full["random"] == 2.5 and full["random_run"] == 4
    assert full["xgb_runs"] == [3, None]
    summary = _summary({"a": short, "b": full})
    assert summary["xgb_reached"] == "1/2" and summary["xgb_median_speedup"] is None
    assert "xgb_blind_reached" not in summary
    assert summary["xgb_median_speedup_bound"] == statistics.median([1.5 / 1.5, 2.5 / 3.5])


def test_only_the_guided_searches_with_every_run_logged_are_counted(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [Task.create("matmul", "64x64x64", threads=1), Task.create("matmul", "32x64x16", threads=1)]
    for t in tasks:
        for seed in (1, 2):
            (tmp_path / _guided_log("xgb", seed, t.key())).touch()
    assert _searches_logged(tmp_path, tasks, seeds=2) == ["xgb"]
    assert "xgb_blind: no logs" in capsys.readouterr().out  # a search not run is named, not counted
    (tmp_path / _guided_log("xgb_pretrained", 1, tasks[0].key())).touch()
    with pytest.raises(SystemExit, match="xgb_pretrained_s2_.*is missing.*--searches xgb_pretrained"):
        _searches_logged(tmp_path, tasks, seeds=2)  # some runs of a search only: the count would be skewed
    with pytest.raises(SystemExit, match="no guided search logs"):
        _searches_logged(tmp_path / "empty", tasks, seeds=2)




def test_count_at_takes_prefix_lengths_up_to_the_long_search() -> None:
    def ns(count_at: str | None, long: int = 512) -> argparse.Namespace:
        return argparse.Namespace(count_at=count_at, long=long)
    assert _count_at(ns(None)) == [512] and _count_at(ns("512,128,128")) == [128, 512]
    for bad in ("128,1024", "0", "many"):
        with pytest.raises(SystemExit, match="--count-at"):
            _count_at(ns(bad))
