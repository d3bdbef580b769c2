"""Task: keys name a task and rebuild it."""
from __future__ import annotations

import pytest

from autotune.errors import AutotuneError, ShapeError
from autotune.task import Task


@pytest.mark.parametrize("op,shape", [("matmul", "64x48x32"), ("conv2d", "1x8x10x10x8x3x3x1x1")])
def test_a_key_rebuilds_its_task(op: str, shape: str) -> None:
    task = Task.create(op, shape, "float32", 2)
    assert task.key().endswith("|threads=2")
    assert Task.from_key(task.key()) == task
    old = task.key().rpartition("|")[0]  # a key written before keys held the thread count
    assert Task.from_key(old, threads=2) == task


def test_tasks_differing_only_in_threads_have_different_keys() -> None:
    assert Task.create("matmul", "8x8x8", threads=1).key() != Task.create("matmul", "8x8x8", threads=2).key()


def test_presets_and_the_default_config_have_one_meaning() -> None:
    task = Task.create("matmul", "64x48x32", threads=1)
    presets = task.presets()
    assert presets and len(set(presets)) == len(presets)
    assert task.default_config() == presets[0]
    assert all(task.space().validate(p) == p for p in presets)


def test_a_bad_key_says_what_a_key_looks_like() -> None:
    with pytest.raises(ShapeError, match="not a task key.*op\\|dim=value"):
        Task.from_key("matmul|M=64")
    with pytest.raises(ShapeError, match="not a task key"):
        Task.from_key("matmul|M=sixty|float32")
    with pytest.raises(AutotuneError, match="unknown operator"):
        Task.from_key("gemm|M=64,N=48,K=32|float32")
