"""A sweep spec is untrusted input: a YAML alias bomb and an oversized spec are one-line errors
before anything runs (issue 38, item 7: a 10-line alias bomb took 4 GB and died with MemoryError)."""
from __future__ import annotations

import resource
from pathlib import Path

import pytest

from autotune.cli import main

BOMB = "\n".join(['a: &a ["8x8x8", "8x8x8", "8x8x8", "8x8x8", "8x8x8", "8x8x8", "8x8x8", "8x8x8", "8x8x8"]']
                 + [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
                 + ["task:", "  - op: matmul", "    shapes: *i"]) + "\n"


def test_a_yaml_alias_bomb_is_one_line_and_takes_no_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_text(BOMB)
    assert len(BOMB.splitlines()) <= 12  # 9**9 shapes, as found
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["sweep", str(spec), "--log", str(tmp_path / "l.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error:") and "uses a YAML alias (*a)" in err and len(err.splitlines()) == 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB
    assert not (tmp_path / "l.jsonl").exists()


def test_an_oversized_spec_and_too_many_tasks_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    assert main(["sweep", str(big), "--log", str(tmp_path / "l.jsonl")]) == 2
    assert "longer than 1024 KiB" in capsys.readouterr().err
    many = tmp_path / "many.toml"
    many.write_text('[[task]]\nop = "matmul"\nshapes = [' + ", ".join(['"8x8x8"'] * 10001) + "]\n")
    assert main(["sweep", str(many), "--log", str(tmp_path / "l.jsonl")]) == 2
    assert "at most 10000 tasks" in capsys.readouterr().err
