"""python -m autotune.measure.experiments: one subcommand per experiment, each with only its own flags."""
from __future__ import annotations

import pytest

from autotune.measure.experiments.__main__ import EXPERIMENTS, parser


def flags(name: str) -> set[str]:
    sub = next(a for a in parser()._actions if a.dest == "experiment")
    return {opt for action in sub.choices[name]._actions for opt in action.option_strings}  # type: ignore[attr-defined]


def test_help_lists_every_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXPERIMENTS) and len(EXPERIMENTS) >= 6


def test_each_experiment_registers_only_its_own_flags() -> None:
    assert flags("spread") >= {"--processes", "--retake", "--config", "--cache-dir", "--json"}
    assert "--searches" not in flags("spread") and "--models" not in flags("spread")
    assert flags("model-accuracy") == {"-h", "--help", "--workdir", "--long", "--models", "--seed", "--in-task",
                                       "--splits", "--plot", "--json"}
    assert "--processes" not in flags("search-efficiency") and "--cache-dir" in flags("search-efficiency")
    assert "--compare" in flags("surrogate-efficiency") and "--compare" not in flags("search-efficiency")


def test_an_unknown_experiment_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["benchmarks"])
    assert e.value.code == 2 and "invalid choice: 'benchmarks'" in capsys.readouterr().err
