"""Rough edges of the command line a new user hits: every flag has help text, a malformed shape
is a one-line error naming the expected form, `report --plot` makes its folders as `tune --log` does,
and keys are shown readable (the stored ones unchanged)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from autotune.cli import _parser, main
from autotune.display import readable_key
from autotune.records import Record, RecordLog, load_records

ELSEWHERE: set[str] = set()  # subcommands left out of the help check (none)


def test_every_flag_of_every_subcommand_has_help_text() -> None:
    missing = []
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        if name in ELSEWHERE:
            continue
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


@pytest.mark.parametrize("shape", ["64,64,64", "64*64*64", "64 by 64", "M=64"])
def test_a_malformed_shape_is_a_one_line_error_naming_the_form(shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "matmul", "--shape", shape]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autotune: error: argument --shape: bad shape")
    assert "expected integers joined by 'x', like 64x64x64" in err


def test_report_plot_makes_its_folders_like_tune_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "l.jsonl"
    from autotune.task import Task
    cfg = Task.create("matmul", "8x8x8", threads=1).default_config().to_json()
    RecordLog(log).append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
                                 config=cfg, costs=[1e-6], timestamp=100.0, strategy="random"))
    png = tmp_path / "missing" / "dir" / "x.png"
    assert main(["report", str(log), "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000 and f"wrote {png}" in capsys.readouterr().out


def test_keys_are_shown_readable_and_stored_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stored = "dense_relu|X0=256,X1=256,W0=256,W1=256,b0=256|float32|threads=2"
    assert readable_key(stored) == "dense_relu X[256,256] W[256,256] b[256] float32 threads=2"
    assert readable_key("conv2d|N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1|float32|threads=2") == \
        "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 float32 threads=2"
    log = tmp_path / "l.jsonl"
    from autotune.task import Task
    cfg = Task.create("matmul", "8x8x8", threads=1).default_config().to_json()
    RecordLog(log).append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
                                 config=cfg, costs=[1e-6], timestamp=100.0, strategy="random"))
    assert main(["report", str(log)]) == 0
    out = capsys.readouterr().out
    assert "matmul M=8 N=8 K=8 float32 threads=1" in out and "matmul|M=8" not in out
    assert load_records(log)[0].key == "matmul|M=8,N=8,K=8|float32|threads=1"
