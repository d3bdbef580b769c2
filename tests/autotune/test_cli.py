"""The command line: one-line errors (exit 2), list, show."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main


@pytest.mark.parametrize("argv,needle", [
    (["show", "nope"], "unknown operator 'nope'"),
    (["show", "matmul", "--shape", "12x"], "shape '12x' has 1 numbers"),
    (["show", "matmul", "--shape", "axbxc"], "bad shape"),
    (["show", "matmul", "--shape", "0x4x4"], "positive integer"),
    (["show", "matmul", "--shape", "8x8x8", "--config", "{bad"], "not valid JSON"),
    (["show", "matmul", "--shape", "8x8x8", "--config", '{"mr": 5}'], "knob 'mr'"),
    (["replay", "/nonexistent/log.jsonl"], "no tuning log"),
    (["report", "/nonexistent/log.jsonl"], "no tuning log"),
    (["evaluate-model", "--model", "/nonexistent.json", "--log", "x"], "no model file"),
])
def test_errors_are_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("autotune: error:")


def test_list_shows_every_operator_and_its_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    from templates import TEMPLATES
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in TEMPLATES:
        if TEMPLATES[name].default_shape:
            assert name in out
    assert "mr" in out and "kc" in out


def test_show_prints_source_for_a_partial_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "matmul", "--shape", "40x30x20", "--config", '{"mr": 4}', "--trace"]) == 0
    out = capsys.readouterr().out
    assert "@numba.njit" in out and "def kernel(A, B, C" in out and '"op": "pack"' in out


def test_report_summarises_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.records import Record, RecordLog
    log = tmp_path / "l.jsonl"
    for i, s in enumerate([3e-3, 1e-3, 2e-3]):
        RecordLog(log).append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
                                     config={"i": i}, costs=[s], timestamp=100.0 + i, strategy="random"))
    assert main(["report", str(log), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "random" in out and (tmp_path / "c.png").stat().st_size > 1000
