"""The helpers several experiments share."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.records import RecordLog
from autotune.search import make_strategy
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.experiments.common import corpus
from autotune.measure.replay import ReplayRunner
from tests.measure.experiments.landscape import landscape


def test_corpus_gives_one_dataset_per_task_and_refuses_a_benchmark_task(tmp_path: Path) -> None:
    other, tested = Task.create("matmul", "64x48x128", threads=2), Task.create("matmul", "96x80x64", threads=2)
    (tmp_path / "corpus").mkdir()
    for t, path in [(other, tmp_path / "corpus" / "a.jsonl"), (tested, tmp_path / "tested.jsonl")]:
        Tuner(t, make_strategy("random", t.space(), seed=0), ReplayRunner([], fallback=landscape),
              RecordLog(path)).run(TuneOptions(trials=6))
    parts = corpus(str(tmp_path / "corpus"), [tested])
    assert [key for key, _ in parts] == [other.key()] and len(parts[0][1]) == 6
    assert corpus(None, [tested]) == []
    with pytest.raises(SystemExit, match="one of the benchmark's tasks"):
        corpus(f"{tmp_path / 'corpus'},{tmp_path / 'tested.jsonl'}", [tested])
    with pytest.raises(SystemExit, match="neither a tuning log"):
        corpus(str(tmp_path / "missing.jsonl"), [tested])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="holds no tuning logs"):
        corpus(str(tmp_path / "empty"), [tested])
