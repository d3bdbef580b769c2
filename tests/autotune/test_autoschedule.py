"""The template-free space: random configs of the derived space compile and match NumPy."""
from __future__ import annotations

import random

import numpy as np
import pytest

from autotune.autoschedule import AutoScheduler, auto_schedule
from autotune.codegen import build
from autotune.ir import te


def matmul(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C"), lambda a, b: a @ b


def bias_relu(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((M, N), name="A")
    b = te.placeholder((N,), name="b")
    t = te.compute((M, N), lambda i, j: A[i, j] + b[j], name="t")
    return te.compute((M, N), lambda i, j: te.max(t[i, j], 0.0), name="out"), lambda a, bb: np.maximum(a + bb, 0)


@pytest.mark.parametrize("make", [matmul, bias_relu])
@pytest.mark.parametrize("shape", [(37, 50, 29), (1, 7, 127)])
def test_random_configs_of_the_derived_space_are_correct(make, shape) -> None:  # type: ignore[no-untyped-def]
    out, ref = make(*shape)
    auto = AutoScheduler(out, threads=2)
    assert len(auto.space) > 1
    rng = random.Random(hash(shape) & 0xFFFF)
    ins = [np.random.default_rng(0).uniform(-1, 1, t.shape).astype("float32")
           for t in te.input_tensors(out) if t.is_placeholder]
    for _ in range(3):
        cfg = auto.space.sample(rng)
        k = build(auto_schedule(out, cfg, threads=2), threads=2)
        np.testing.assert_allclose(k(*ins), ref(*ins), rtol=1e-4, atol=1e-4)


def test_rules_derive_tiling_packing_cache_and_parallel_knobs() -> None:
    out, _ = matmul(64, 64, 64)
    names = set(AutoScheduler(out, threads=2).space.by_name)
    assert {"tile_i", "tile_j", "tile_k", "cache", "pack_A", "pack_B", "vectorize", "unroll", "parallel"} <= names
    out2, _ = bias_relu(8, 8, 8)
    assert "inline_t" in AutoScheduler(out2, threads=1).space.by_name
