"""Hostile tuning logs driven through every public reader: the CLI's report, replay and tune,
`autotune.load_best` and `autotune.apply_history`. A crafted line is one warning and skipped; the
rest of the log still works (issue 38: a 515-byte log crashed every loader with OverflowError)."""
from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.cli import main
from autotune.records import Record, load_records
from autotune.target import cpu_model, isa

SHAPE = {"M": 16, "N": 16, "K": 16}
GOOD = {"mr": 2, "nr": 16, "kc": 64, "mc_panels": 4, "jc_blocks": 1, "order": "jr_ir", "pack_a": True, "parallel": False}
HUGE = 10 ** 400  # 401 digits: float() of it raises OverflowError


def _good(**kw: object) -> Record:
    base: dict = dict(op="matmul", shape=SHAPE, dtype="float32", threads=1, config=GOOD, costs=[1e-4],
                      target={"cpu": cpu_model(), "isa": isa(), "threads": 1})
    return Record(**{**base, **kw})


def _hostile(field: str) -> str:
    d = _good().to_json()
    if field == "config":
        d["config"] = dict(GOOD, mr=HUGE)
    else:
        d[field] = [HUGE] if field == "costs" else HUGE
    return json.dumps(d, separators=(",", ":"))


@pytest.mark.parametrize("field", ["costs", "ts", "compile_s", "config", "threads"])
def test_a_huge_integer_in_a_log_is_one_warning_for_report_load_best_and_apply_history(
        tmp_path: Path, field: str, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "h.jsonl"
    log.write_text(_hostile(field) + "\n" + _good().to_line())
    assert len(log.read_bytes()) < 1200  # a small file, as found
    with _warns_of(field):
        assert main(["report", str(log)]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out
    assert float(out.splitlines()[1].split()[-1]) < 3600  # a record without a time stamp is no 56-year run
    with _warns_of(field):
        k = autotune.load_best(log, "matmul", "16x16x16", threads=1)
    a, b = np.random.default_rng(0).random((2, 16, 16), dtype=np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5)
    mm = autotune.op("matmul", policy="log", threads=1)
    with _warns_of(field):
        with autotune.apply_history(log):
            np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-5)


def test_a_huge_integer_in_a_log_is_one_warning_for_replay_and_a_resumed_tune(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "h.jsonl"
    log.write_text(_hostile("costs") + "\n" + _good().to_line())
    with pytest.warns(RuntimeWarning, match="h.jsonl:1"):
        assert main(["replay", str(log)]) == 0
    assert "matmul" in capsys.readouterr().out
    with pytest.warns(RuntimeWarning, match="h.jsonl:1"):
        assert main(["tune", "matmul", "--shape", "16x16x16", "--threads", "1", "--trials", "1",
                     "--log", str(log), "--no-progress"]) == 0
    assert len(load_records(log)) >= 2


def _warns_of(field: str) -> contextlib.AbstractContextManager[object]:
    """One warning naming the line; a time stamp too large is no time stamp (0.0), no invalid line."""
    if field != "ts":
        return pytest.warns(RuntimeWarning, match="h.jsonl:1")
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("error", RuntimeWarning)
    return stack


@pytest.mark.parametrize("liar", ["out of the space", "another ISA", "a forged speed"])
def test_report_names_as_best_the_record_replay_and_load_best_use(
        tmp_path: Path, liar: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A faster record that replay would refuse (a config outside the space, measured on another
    ISA, a speed no machine reaches) is never the best `autotune report` names."""
    from autotune.replay import replay_log
    genuine = _good()
    fake = {"out of the space": _good(costs=[1e-6], config=dict(GOOD, mr=99)),
            "another ISA": _good(costs=[1e-6], target={"cpu": "Other", "isa": "neon" if isa() != "neon" else "avx2",
                                                       "threads": 1}),
            "a forged speed": _good(costs=[1e-9])}[liar]
    log = tmp_path / "l.jsonl"
    log.write_text(genuine.to_line() + fake.to_line())
    assert main(["report", str(log)]) == 0
    out = capsys.readouterr().out
    per = 2 * 16 ** 3 / 1e9
    assert f"best {per / 1e-4:.1f} GFLOP/s" in out, out  # the genuine record's speed, not the liar's
    assert out.splitlines()[1].split()[10] == f"{per / 1e-4:.1f}"  # after the readable key, the strategy, 3 counts
    (row,) = replay_log(log)
    assert row.record.seconds == 1e-4 and row.measured_gflops is not None, row.error
    assert autotune.load_best(log, "matmul", "16x16x16", threads=1) is not None


def test_a_forged_speed_alone_is_no_usable_record_and_report_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "l.jsonl"
    log.write_text(_good(costs=[1e-9]).to_line())
    assert main(["report", str(log)]) == 0
    assert "no usable record: record for matmul" in capsys.readouterr().out
    with pytest.raises(autotune.AutotuneError, match="no successful record"):
        autotune.load_best(log, "matmul", "16x16x16", threads=1)
