"""bench: the best candidate is chosen after the finalists are timed again in alternating rounds;
a comparison timed while the machine was busy says so; a missing PyTorch names the extra that has it."""
from __future__ import annotations

import configparser
import json
import re
import sys

import pytest

from autotune.bench import BenchOptions, BenchResult, Candidate, count_noisy, format_result, run_bench
from autotune.environment import ROOT
from autotune.records import load_records
from autotune.task import Task
from autotune.measure.timing import Timing


def _logged(log, task: Task, timed: list[tuple[object, float]]) -> None:  # type: ignore[no-untyped-def]
    from autotune.records import RecordLog
    from autotune.runner import MeasureResult
    from autotune.target import current_target
    from autotune.tuner import result_to_record
    for cfg, seconds in timed:
        RecordLog(log).append(result_to_record(task, cfg, MeasureResult((seconds,) * 3), "random",
                                               current_target(task.threads)))


def test_a_lucky_tuning_time_does_not_pick_the_slower_kernel(tmp_path):  # type: ignore[no-untyped-def]
    """The finalists are timed again in alternating rounds (in the measuring worker) before the best
    is named: a slow kernel timed in a quiet spell does not beat a good one timed in a busy one."""
    task = Task.create("matmul", "192x192x192", "float32", threads=1)
    sp = task.space()
    good = task.presets()[0]
    slow = sp.validate({**good, "mr": min(sp.by_name["mr"].values()), "nr": min(sp.by_name["nr"].values()),
                        "kc": min(sp.by_name["kc"].values()), "pack_a": False})
    log = tmp_path / "log.jsonl"
    _logged(log, task, [(slow, 1.0e-4), (good, 1.2e-4)])
    r = run_bench(task, BenchOptions(trials=0, pick_rounds=3, rounds=1, progress=False, baselines=(), peak=False),
                  log=str(log))
    assert r.best.config == good
    assert len(r.candidates) == 2  # re-timings are not candidates
    retimed = [x for x in load_records(log) if x.retimed]
    assert {x.config_key() for x in retimed} == {json.dumps(dict(c), sort_keys=True, separators=(",", ":"))
                                                 for c in (slow, good)}
    costs = {x.config_key(): x.costs for x in retimed}
    good_rounds = len(costs[json.dumps(dict(good), sort_keys=True, separators=(",", ":"))])  # one median per round
    slow_rounds = len(costs[json.dumps(dict(slow), sort_keys=True, separators=(",", ":"))])
    # all 3 rounds, or the slow one stops after round 2 (every quiet round of it slower than every
    # one of good's), and good, left alone, with it
    assert good_rounds == slow_rounds in (2, 3)


def test_only_candidates_near_the_fastest_are_finalists():
    from autotune.retime import FinalistOptions, pick_finalists
    from autotune.runner import MeasureResult
    timed = [("good", MeasureResult((1e-5,))), ("near", MeasureResult((1.2e-5,))), ("far", MeasureResult((1e-3,)))]
    assert pick_finalists(timed, FinalistOptions(count=5)) == ["good", "near"]  # the far one is not timed again
    assert pick_finalists(timed, FinalistOptions(count=1)) == ["good"]


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
    extra = re.search(r"pip install '\.\[(\w+)\]' in autotune's checkout", hint)
    assert extra is not None, hint
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "torch" in cfg["options.extras_require"][extra.group(1)], hint


def test_a_memory_bound_tasks_rates_are_probed_in_the_same_run(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The shared machine's memory rate moves within minutes: bench probes the read and copy rates
    at a memory-bound task's working set between its timings, and its limit uses them."""
    import autotune.bench as bench_module
    from autotune.measure.peak import Peak, task_bytes
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    cached = Peak(cpu="example", isa="avx2", dtype="float32", threads=1, gflops=1e4, read_gbps=1.0,
                  l3_gbps=1.0, l3_bytes=1 << 30, l2_gbps=1.0, l2_bytes=1 << 10)  # far below any real rate
    monkeypatch.setattr(bench_module, "machine_peak", lambda dtype, threads: cached)
    task = Task.create("softmax", "64x1024", "float32", threads=1)
    r = run_bench(task, BenchOptions(trials=1, pick_rounds=1, rounds=2, progress=False, baselines=(), pause_s=0.0),
                  log=str(tmp_path / "log.jsonl"))
    here = r.to_json()["roofline"]["probed_here"]
    assert here["read_gbps"] > 1.0 and here["copy_gbps"] > 1.0  # really probed, not the cached 1 GB/s
    assert r.peak is not None and r.peak.here == (int(task_bytes(task)), here["read_gbps"], here["copy_gbps"])
    assert "both probed in this run" in format_result(r)
    compute_bound = Task.create("matmul", "64x64x64", "float32", threads=1)
    cached_fast = Peak(**{**cached.__dict__, "gflops": 1.0})
    monkeypatch.setattr(bench_module, "machine_peak", lambda dtype, threads: cached_fast)
    r = run_bench(compute_bound, BenchOptions(trials=1, pick_rounds=1, rounds=1, progress=False, baselines=(),
                                              pause_s=0.0), log=str(tmp_path / "mm.jsonl"))
    assert r.peak is not None and r.peak.here is None  # compute bound: nothing to probe
