"""bench: the best candidate is chosen after the finalists are timed again in alternating rounds;
a comparison timed while the machine was busy says so; a missing PyTorch names the extra that has it."""
from __future__ import annotations

import configparser
import json
import re
import sys

import pytest

from autotune.bench import BenchOptions, BenchResult, Candidate, _final_pick, count_noisy, format_result
from autotune.environment import ROOT
from autotune.task import Task
from measure.timing import Timing


def test_a_lucky_tuning_time_does_not_pick_the_slower_kernel():
    task = Task.create("matmul", "192x192x192", "float32", threads=1)
    sp = task.space()
    good = task.presets()[0]
    slow = sp.validate({**good, "mr": min(sp.by_name["mr"].values()), "nr": min(sp.by_name["nr"].values()),
                        "kc": min(sp.by_name["kc"].values()), "pack_a": False})
    # the slow kernel was timed in a quiet spell (a fast time), the good one in a busy one
    cands = [Candidate(slow, seconds=1.0e-4), Candidate(good, seconds=1.2e-4), Candidate(slow, seconds=5e-4)]
    best, run = _final_pick(task, cands, task.inputs(seed=1), BenchOptions(pick_rounds=3))
    assert best.config == good
    assert run().shape == (192, 192)


def test_only_candidates_near_the_fastest_are_finalists():
    task = Task.create("matmul", "64x64x64", "float32", threads=1)
    good = task.presets()[0]
    far = task.space().validate({**good, "pack_a": not good["pack_a"]})
    best, _ = _final_pick(task, [Candidate(good, seconds=1e-5), Candidate(far, seconds=1e-3)], task.inputs(),
                          BenchOptions())
    assert best.config == good  # the far one (100x slower when tuned) is not timed again


def _result(**kw) -> BenchResult:  # type: ignore[no-untyped-def]
    task = Task.create("matmul", "64x64x64", "float32", threads=1)
    return BenchResult(task, Candidate(task.presets()[0], seconds=1e-4), 1e-4, {"numpy": 2e-4}, **kw)


def test_spread_samples_or_stolen_cpu_time_count_as_noisy_timings():
    quiet = [Timing((1e-3, 1.05e-3, 1.02e-3)), Timing((2e-3, 2e-3))]
    assert count_noisy(quiet, 1.10) == 0
    spread, stolen = Timing((1e-3, 1.3e-3, 1.01e-3)), Timing((1e-3, 1e-3), retaken=3, stolen=1)
    assert count_noisy([*quiet, spread, stolen], 1.10) == 2
    assert count_noisy([spread], 1.5) == 0  # the threshold is the options' max_spread


def test_a_noisy_comparison_prints_one_line_and_says_so_in_the_json():
    quiet, busy = _result(timings=9), _result(timings=9, noisy_timings=2)
    assert not quiet.noisy and "busy" not in format_result(quiet)
    said = [line for line in format_result(busy).splitlines() if "busy" in line]
    assert len(said) == 1 and "2 of 9" in said[0] and "rough" in said[0], format_result(busy)
    assert json.loads(json.dumps(quiet.to_json()))["noisy"] is False
    out = json.loads(json.dumps(busy.to_json()))
    assert out["noisy"] is True and out["noisy_timings"] == 2 and out["timings"] == 9


def test_without_torch_the_hint_names_the_extra_that_installs_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if PyTorch were not installed
    (hint,) = [line for line in format_result(_result()).splitlines() if "torch" in line]
    extra = re.search(r"pip install 'autotune\[(\w+)\]'", hint)
    assert extra is not None, hint
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "torch" in cfg["options.extras_require"][extra.group(1)], hint
