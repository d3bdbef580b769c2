"""The assembly point: one meaning of strategy + cost model + runner for every entry point."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.errors import AutotuneError
from autotune.records import Record, RecordLog, load_records
from autotune.task import Task
from autotune.tuning import RUNNERS, make_runner, make_search, tune

TASK = Task.create("matmul", "16x16x16", threads=1)


def test_a_cost_model_steers_the_evolutionary_search() -> None:
    search = make_search(TASK, cost_model="xgb")
    assert search.name.startswith("evolutionary+xgb") and len(search.callbacks) == 1
    assert make_search(TASK, strategy="evolutionary", cost_model="lgbm").name.startswith("evolutionary+lgbm")
    assert make_search(TASK).name == "evolutionary" and make_search(TASK).callbacks == ()


def test_a_strategy_beside_a_cost_model_is_a_one_line_error_never_silently_one_of_them() -> None:
    with pytest.raises(AutotuneError, match="cost model steers the evolutionary search; strategy 'random'"):
        make_search(TASK, strategy="random", cost_model="xgb")


def test_runners_by_name_and_their_errors() -> None:
    assert {"local", "ray", "tpu_emulator"} <= set(RUNNERS)
    with pytest.raises(AutotuneError, match="unknown runner 'gpu'; choose one of local"):
        make_runner("gpu")
    tpu = make_runner(task=Task.create("tpu_matmul", "1024x1024x1024", threads=1))
    assert type(tpu).__name__ == "TpuRunner"  # the task's backend picks its runner


def test_tune_measures_presets_first_and_logs_the_strategy(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    r = tune(op="matmul", shape="16x16x16", threads=1, trials=2, log=log, strategy="random", progress=False)
    recs = [x for x in load_records(log) if not x.retimed]
    assert r.measured == 2 and [x.strategy for x in recs] == ["random", "random"]
    # the first two presets of distinct kernels (at 16x16x16 some are twins: blocks clamp to the
    # matrix), logged as each completes (two compile workers: either may finish first)
    from autotune.backends import backend_of
    kernels: dict = {}
    for c in TASK.presets():
        kernels.setdefault(backend_of(TASK).kernel_key(TASK, c), c)
    assert len(kernels) < len(TASK.presets())
    assert sorted(Record.validated_config(x).key() for x in recs) == sorted(c.key() for c in list(kernels.values())[:2])


def test_a_tuning_run_times_its_finalists_again_and_names_the_best_among_the_most_trusted(tmp_path: Path) -> None:
    from autotune.records import best_per_task
    from autotune.retime import FinalistOptions
    log = tmp_path / "f.jsonl"
    r = tune(op="matmul", shape="48x40x32", threads=1, trials=4, log=log, progress=False,
             finalists=FinalistOptions(count=3, within=10.0, rounds=2))
    recs = load_records(log)
    again = [x for x in recs if x.retimed]
    assert r.measured == 4 and r.retimed == len(again) >= 2  # the 3 fastest (and any noisy ones), re-timed
    assert all(len(x.costs) == 2 and x.contention and x.contention["rounds"] == 2 for x in again)  # a median per round
    assert r.timed == sum(x.ok for x in recs) and r.noisy == sum(x.ok and x.noisy for x in recs)
    best = best_per_task(recs)[r.task.key()]
    assert Record.validated_config(best) == r.best_config and best.seconds == r.best_seconds
    # another run re-times its finalists with the resumed ones; none: no re-timing at all
    r2 = tune(op="matmul", shape="48x40x32", threads=1, trials=1, log=log, progress=False,
              finalists=FinalistOptions(count=0, noisy_count=0))
    assert r2.retimed == 0 and len(load_records(log)) == len(recs) + 1


def test_retime_times_a_busy_logs_finalists_again_and_the_quiet_timing_wins(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A log tuned on a busy machine: every timing noisy, and a slow kernel timed in a lull looks
    fastest. `autotune retime` times the finalists again in alternating rounds; afterwards the
    log's best is the kernel that is really faster, and load_best picks it."""
    from autotune.cli import main
    from autotune.runner import MeasureResult
    from autotune.target import current_target
    from autotune.tuner import result_to_record
    task = Task.create("matmul", "96x96x96", threads=1)
    sp = task.space()
    good = task.presets()[0]
    slow = sp.validate({**good, "mr": min(sp.by_name["mr"].values()), "nr": min(sp.by_name["nr"].values()),
                        "pack_a": False})
    log = tmp_path / "busy.jsonl"
    for cfg, seconds in [(slow, 1e-5), (good, 3e-5)]:
        RecordLog(log).append(result_to_record(task, cfg, MeasureResult((seconds,) * 3, noisy=True), "random",
                                               current_target(1)))
    assert autotune.load_best(log, "matmul", "96x96x96", threads=1).source == task.build(slow).source
    assert main(["retime", str(log), "--top", "2", "--rounds", "3", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "matmul M=96 N=96 K=96 float32 threads=1: 2 re-timed" in out and "a new best config" in out, out
    again = [x for x in load_records(log) if x.retimed]
    assert len(again) == 2 and {x.strategy for x in again} == {"retime"}
    assert autotune.load_best(log, "matmul", "96x96x96", threads=1).source == task.build(good).source
    (row,) = json.loads((tmp_path / "r.json").read_text())
    assert row["retimed"] == 2 and row["after"]["config"] == dict(good)


def test_a_run_whose_timings_were_disturbed_counts_them_and_says_what_to_do(tmp_path: Path) -> None:
    """Every timing judged disturbed (a spread of 1.0 allows none): each record says noisy and what the
    timing saw, the result counts them, and the note names the log to re-time."""
    from autotune.retime import FinalistOptions, busy_note
    from autotune.measure.local import LocalRunnerOptions
    from autotune.measure.timing import TimingProtocol
    log = tmp_path / "busy.jsonl"
    r = tune(op="matmul", shape="32x32x32", threads=1, trials=2, log=log, progress=False,
             runner_options=LocalRunnerOptions(max_spread=1.0, retries=0, protocol=TimingProtocol(repeat=3, min_repeat_ms=5)),
             finalists=FinalistOptions(count=0, noisy_count=0))
    recs = load_records(log)
    assert r.timed == 2 and r.noisy == 2 and all(x.noisy and x.contention["spread"] > 1.0 for x in recs)
    note = busy_note(r.noisy, r.timed, str(log))
    assert note is not None and "2 of 2 timings were disturbed" in note and f"autotune retime {log}" in note


def test_retime_of_a_log_with_nothing_to_retime_is_a_one_line_error(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    assert main(["retime", str(log)]) == 2
    assert "no successful measurement" in capsys.readouterr().err


def test_op_with_a_cost_model_tunes_with_the_model_guided_search(tmp_path: Path) -> None:
    log = tmp_path / "op.jsonl"
    mm = autotune.op("matmul", log=log, trials=3, cost_model="xgb", threads=1)
    A = np.random.rand(16, 16).astype(np.float32)
    np.testing.assert_allclose(mm(A, A), A @ A, rtol=1e-4, atol=1e-4)
    assert {r.strategy for r in load_records(log)} == {"evolutionary+xgb(prior roofline)"}


FOREIGN = {"cpu": "Elsewhere CPU", "isa": "neon", "threads": 1}


def _foreign_log(path: Path) -> Path:
    RecordLog(path).append(Record(op="matmul", shape=TASK.shape_dict, dtype="float32", threads=1,
                                  config=TASK.default_config().to_json(), costs=[1e-6], target=FOREIGN))
    return path


def test_a_log_from_another_machine_is_measured_afresh_not_resumed(tmp_path: Path) -> None:
    r = tune(op=TASK, trials=1, log=_foreign_log(tmp_path / "l.jsonl"), strategy="random", progress=False)
    assert r.resumed == 0 and r.measured == 1


def test_a_kernel_of_another_isa_is_applied_only_when_asked_for(tmp_path: Path) -> None:
    log = _foreign_log(tmp_path / "l.jsonl")
    with pytest.raises(AutotuneError, match="any_target=True"):
        autotune.load_best(log, "matmul", "16x16x16", threads=1)
    with pytest.warns(RuntimeWarning, match="another machine: Elsewhere CPU \\(neon\\)"):
        k = autotune.load_best(log, "matmul", "16x16x16", threads=1, any_target=True)
    A = np.random.rand(16, 16).astype(np.float32)
    np.testing.assert_allclose(k(A, A), A @ A, rtol=1e-4, atol=1e-4)
    with pytest.raises(AutotuneError, match="--any-target"):
        from autotune.replay import replay_log
        replay_log(log)


def test_threads_are_part_of_what_load_best_looks_up(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    tune(op="matmul", shape="16x16x16", threads=1, trials=1, log=log, strategy="random", progress=False)
    with pytest.raises(AutotuneError, match="threads=\\[1\\]: pass threads="):
        autotune.load_best(log, "matmul", "16x16x16", threads=2)


def test_a_sweep_spec_takes_a_cost_model_and_rejects_a_conflict() -> None:
    from autotune.distributed import parse_spec
    (t,) = parse_spec({"task": [{"op": "matmul", "shapes": ["16x16x16"], "cost_model": "xgb", "threads": 1}]})
    assert t.cost_model == "xgb" and t.key == TASK.key()
    with pytest.raises(AutotuneError, match="task 1: a cost model steers"):
        parse_spec({"task": [{"op": "matmul", "shapes": ["16x16x16"], "cost_model": "xgb", "strategy": "tpe"}]})
    with pytest.raises(AutotuneError, match="unknown cost_model 'svm'"):
        parse_spec({"task": [{"op": "matmul", "shapes": ["16x16x16"], "cost_model": "svm"}]})
    for bad in ({"threads": -3}, {"seed": "abc"}):
        with pytest.raises(AutotuneError, match="task 1: (threads|seed) must be"):
            parse_spec({"task": [{"op": "matmul", "shapes": ["16x16x16"], **bad}]})
    two = parse_spec({"task": [{"op": "matmul", "shapes": ["16x16x16"], "threads": 1},
                               {"op": "matmul", "shapes": ["16x16x16"], "threads": 2}]})
    assert len({t.key for t in two}) == 2  # entries differing only in threads do not collide


def test_the_cli_choices_come_from_the_registries() -> None:
    from autotune.cli import _parser
    from autotune.cost_model import CPU_MODELS
    from autotune.search import STRATEGIES
    text = json.dumps([a.choices for a in _parser()._subparsers._group_actions[0].choices["tune"]._actions])
    assert all(m in text for m in CPU_MODELS) and all(s in text for s in STRATEGIES) and all(r in text for r in RUNNERS)


def test_load_best_checks_the_kernel_against_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.target import current_target
    log = tmp_path / "l.jsonl"
    RecordLog(log).append(Record(op="matmul", shape=TASK.shape_dict, dtype="float32", threads=1,
                                 config=TASK.default_config().to_json(), costs=[1e-6], target=current_target(1)))
    A = np.random.rand(16, 16).astype(np.float32)
    np.testing.assert_allclose(autotune.load_best(log, "matmul", "16x16x16", threads=1)(A, A), A @ A, rtol=1e-4)
    # the kernel is right; a reference that says otherwise makes it a wrong kernel for load_best
    from dataclasses import replace

    from autotune.templates import TEMPLATES
    monkeypatch.setitem(TEMPLATES, "matmul", replace(TEMPLATES["matmul"], reference=lambda a, b: a @ b + 1.0))
    with pytest.raises(AutotuneError, match="matmul.* computes a wrong answer \\(max error .*\\): retune the task"):
        autotune.load_best(log, "matmul", "16x16x16", threads=1)


@pytest.mark.parametrize("bad,needle", [({"timeout_s": float("nan")}, "timeout_s must be a finite number"),
                                        ({"timeout_s": -5.0}, "timeout_s must be a finite number"),
                                        ({"early_stopping": 0}, "early_stopping must be >= 1"),
                                        ({"trials": -1}, "trials must be >= 0")])
def test_bad_budgets_are_errors_before_anything_runs(bad: dict, needle: str, tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match=needle):
        tune(op=TASK, log=tmp_path / "l.jsonl", progress=False, **bad)
    assert not (tmp_path / "l.jsonl").exists()


def test_a_run_in_which_every_trial_failed_says_why(tmp_path: Path) -> None:
    from autotune.tuning import NoValidConfig, no_valid_config
    from tests.measure import faulty_templates as ft  # registers `faulty` here and in the workers
    with pytest.raises(NoValidConfig, match="no config of faulty.* ran correctly: 2 of 2 trials failed") as e:
        tune(op="faulty", shape={"N": 16, "mode": ft.COMPILE_ERROR}, threads=1, trials=2, log=tmp_path / "l.jsonl",
             progress=False)
    r = e.value.result
    assert r.best_config is None and sum(n for n, _ in r.failures.values()) == r.errors == 2
    assert "2 of 2 trials failed, most often compile_error (2 of them), e.g. " in no_valid_config(r)
    assert "no_such_function" in no_valid_config(r)
