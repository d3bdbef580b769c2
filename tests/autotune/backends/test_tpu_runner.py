"""The TPU emulator's invariants, its runner, and the tile-selection evaluation on small data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.space import Config
from autotune.task import Task
from autotune.runner import ErrorKind, MeasureInput
from autotune.backends.tpu.emulator import PRESETS, Block, TiledKernel, TileError, emulate
from autotune.backends.tpu.runner import TpuRunner
from autotune.backends.tpu.templates import tiled_kernel

V4 = PRESETS["v4"]


def mm(m: int, n: int, k: int, bm: int = 128, bn: int = 256, bk: int = 256) -> float:
    t = Task.create("tpu_matmul", {"M": m, "N": n, "K": k}, threads=1)
    return emulate(tiled_kernel(t, Config({"bm": bm, "bn": bn, "bk": bk})), V4).seconds


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_runtime_is_monotone_in_problem_size(dim: int) -> None:
    sizes = [256, 512, 1024, 2048, 4096]
    times = []
    for s in sizes:
        shape = [1024, 1024, 1024]
        shape[dim] = s
        times.append(mm(*shape))
    assert all(a < b for a, b in zip(times, times[1:])), times


def test_over_vmem_tiles_are_rejected_like_a_compile_error() -> None:
    t = Task.create("tpu_matmul", "4096x4096x4096", threads=1)
    cfg = t.space().validate({"bm": 1024, "bn": 2048, "bk": 2048})
    with pytest.raises(TileError, match="VMEM"):
        emulate(tiled_kernel(t, cfg), V4)
    (r,) = TpuRunner().run([MeasureInput(t, cfg)])
    assert r.error is ErrorKind.COMPILE_ERROR and "MiB" in r.message


def test_padding_waste_shows() -> None:
    # N=129 pads to 256 lanes: nearly the cost of N=256, far more than N=128
    t128, t129, t256 = mm(1024, 128, 1024, bn=256), mm(1024, 129, 1024, bn=256), mm(1024, 256, 1024, bn=256)
    assert t129 == pytest.approx(t256) and t129 > 1.2 * t128
    # an 8-row block pays for 8 rows even when only 1 is used
    assert mm(1, 1024, 1024, bm=8) == pytest.approx(mm(8, 1024, 1024, bm=8), rel=0.05)


def test_block_reuse_skips_copies() -> None:
    a = Block("A", (1024, 1024), (128, 1024), (0, None))
    b_moving = Block("B", (1024, 4096), (1024, 512), (None, 1))
    out = Block("C", (1024, 4096), (128, 512), (0, 1))
    k = TiledKernel((8, 8), (a, b_moving), out, mxu=(128, 1024, 512))
    # same blocks, but B's index never changes: it is copied once instead of every step
    k_reuse = TiledKernel((8, 8), (a, Block("B", (1024, 4096), (1024, 512), (None, None))), out, mxu=(128, 1024, 512))
    assert emulate(k_reuse, V4).dma_s < 0.5 * emulate(k, V4).dma_s


def test_presets_and_step_overhead() -> None:
    assert mm(1024, 1024, 1024) > 0
    t = Task.create("tpu_matmul", "1024x1024x1024", threads=1)
    cfg = t.space().validate({"bm": 256, "bn": 512, "bk": 512})
    v3, v4 = (emulate(tiled_kernel(t, cfg), PRESETS[p]).seconds for p in ("v3", "v4"))
    assert v3 > v4
    assert mm(1024, 1024, 1024, bm=8, bn=128, bk=128) > 10 * mm(1024, 1024, 1024, bm=512, bn=512, bk=512)


def test_tile_selection_evaluation_and_tpugraphs_export(tmp_path: Path) -> None:
    from autotune.backends.tpu.tpugraphs import dataset_from_tiles
    from autotune.backends.tpu.evaluate import run
    res = run(n_kernels=9, seed=1, models=("analytical", "xgb"), export=str(tmp_path), search_kernels=2)
    rnd = res["splits"]["random"]
    assert np.isfinite(rnd["xgb"]["ape"]) and np.isfinite(rnd["analytical"]["ape"])
    assert len(res["search"]["calls_to_best"]) == 2
    files = sorted(tmp_path.glob("*.npz"))
    assert len(files) == 9
    assert len(dataset_from_tiles(files[:2])) > 2
