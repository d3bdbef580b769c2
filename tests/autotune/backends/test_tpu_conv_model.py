"""Modelled effects of the TPU emulator, each pinned on its own: edge blocks (a tile that does not
divide the array moves and computes only the remainder in its last block), MXU passes per channel
tile and per window position of a convolution, and the halo a spatial tile's input block carries.
Plus a floor on the calibrated emulator's per-kernel Kendall tau on the real runs (skipped where
../shared/tpu_real is absent)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from autotune.backends.tpu.emulator import PRESETS, Block, TiledKernel, emulate, fetch_period, step_compute_seconds
from autotune.backends.tpu.hlo import HloKernel, TileConfig, TileSpace, load_real
from autotune.backends.tpu.lowering import lower
from autotune.cost_model.metrics import kendall_tau

CORE = PRESETS["v4"]
ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT.parent / "shared" / "tpu_real" / "kernels.json"


def moved(k: TiledKernel, b: Block) -> float:
    """Bytes of block b's DMAs over the whole grid (no granule rounding, no run overhead)."""
    return k.steps // fetch_period(b.axes, k.grid) * b.moved_bytes()


def test_edge_blocks_move_only_the_remainder() -> None:
    # 100 rows in blocks of 64: one block of 64 rows and one of the 36 left (padded to 40 rows)
    b = Block("x", (100, 256), (64, 256), (0, None), itemsize=4)
    assert b.mean_padded() == ((64 + 40) / 2, 256)
    assert b.vmem_bytes() == 64 * 256 * 4  # the VMEM buffer is still a whole block
    k = TiledKernel(grid=(2,), inputs=(b,), output=Block("y", (100, 256), (64, 256), (0, None), itemsize=4))
    assert moved(k, b) == 104 * 256 * 4  # the array once, to its padded 104 rows, not 128
    # a dividing tile moves exactly the array whatever its size
    for rows in (10, 20, 50, 100):
        d = Block("x", (100, 256), (rows, 256), (0, None), itemsize=4)
        kd = TiledKernel(grid=(-(-100 // rows),), inputs=(d,), output=d)
        assert moved(kd, d) == pytest.approx(math.prod(d.mean_padded()) * 4 * kd.steps)
    # and the emulated time of a non-dividing tile lies between the dividing tiles' around it
    t = {rows: emulate(TiledKernel(grid=(-(-100 // rows),), inputs=(Block("x", (100, 4096), (rows, 4096), (0, None), 4),),
                                   output=Block("y", (100, 4096), (rows, 4096), (0, None), 4)), CORE).seconds
         for rows in (48, 64, 96, 100)}
    assert t[64] < 1.3 * t[48]  # 64-row tiles: 2 steps, the second moving only 36 rows, not 64


def conv_kernel(size: int, cin: int = 256, n: int = 2, h: int = 16, f: int = 128) -> HloKernel:
    """One NHWC f32 convolution fusion with a size x size window (output spatial h - size + 1)."""
    oh = h - size + 1
    cd = {"in_batch": 0, "in_feat": 3, "in_spatial": [1, 2], "k_in": 2, "k_out": 3, "k_spatial": [0, 1],
          "out_batch": 0, "out_feat": 3, "out_spatial": [1, 2]}
    lay = {"minor_to_major": [3, 2, 1, 0], "tiles": [[8, 128]]}
    shapes = ([n, h, h, cin], [size, size, cin, f])

    def params(first: int) -> list[dict]:
        return [{"name": f"p{i}", "opcode": "parameter", "dtype": "f32", "shape": s, "id": first + i, "operands": [],
                 "parameter_number": i, "layout": lay} for i, s in enumerate(shapes)]
    conv = {"name": "conv", "opcode": "convolution", "dtype": "f32", "shape": [n, oh, oh, f], "id": 12,
            "operands": [10, 11], "layout": lay, "window": [{"size": size, "stride": 1}] * 2, "conv_dims": cd}
    return HloKernel.from_json({"kernel": "fusion.conv", "entry_id": 2, "computations": [
        {"name": "fused", "id": 1, "root_id": 12, "instructions": [*params(10), conv]},
        {"name": "entry", "id": 2, "root_id": 22, "instructions": [*params(20), {
            "name": "fusion.conv", "opcode": "fusion", "dtype": "f32", "shape": [n, oh, oh, f], "id": 22,
            "operands": [20, 21], "called": [1], "layout": lay, "fusion_kind": "kConvolution"}]}]})


def lowered(k: HloKernel, rows: int, cin_tile: int):  # type: ignore[no-untyped-def]
    """One image, `rows` output rows, 8 output columns, all 128 features; input channels tiled by cin_tile."""
    space = TileSpace(k)
    r, s = space.kshape.physical_shape[:2]
    return lower(k, TileConfig((r, s, cin_tile // 8, 1), (1, rows, 1, 1)), CORE, space)


def mxu_cycles(tk) -> float:  # type: ignore[no-untyped-def]
    """MXU cycles of the whole grid (the per-step matmul over every step)."""
    bm, bk, bn = tk.mxu
    tiles = math.ceil(bk / 128) * math.ceil(bn / 128) * tk.mxu_passes
    return tk.steps * ((-(-bm // 8) * 8) * tiles + CORE.weight_load_cycles * tiles) / CORE.mxu_count


def test_mxu_passes_per_window_position_and_channel_tile() -> None:
    k3, k1 = conv_kernel(3), conv_kernel(1)
    a3, a1 = lowered(k3, 2, 256), lowered(k1, 2, 256)
    assert a3.mxu_passes == 9 * CORE.f32_mxu_passes and a1.mxu_passes == CORE.f32_mxu_passes
    # a channel tile below the MXU's 128 rows still costs whole passes: half the channels per step,
    # twice the steps, so twice the MXU cycles for the same convolution
    full, half, quarter = (mxu_cycles(lowered(k3, 2, c)) for c in (128, 64, 32))
    assert half == pytest.approx(2 * full) and quarter == pytest.approx(4 * full)
    assert step_compute_seconds(lowered(k3, 2, 64), CORE) == pytest.approx(step_compute_seconds(lowered(k3, 2, 128), CORE),
                                                                         rel=0.05)


def test_conv_tile_with_halo_moves_more_than_its_output_tile() -> None:
    k = conv_kernel(3)
    tk = lowered(k, 2, 256)
    x, out = tk.inputs[0], tk.output
    assert x.block[1:3] == (2 + 2, 8 + 2)  # output tile (2, 8) plus the 3x3 window's halo
    # the input read over the grid exceeds the input array: the halo rows are read twice
    assert moved(tk, x) > math.prod(x.shape) * 4
    # per output element, the halo tile moves more input bytes than a 1x1 window's tile does
    t1 = lowered(conv_kernel(1), 2, 256)
    assert x.moved_bytes() / math.prod(out.block) > t1.inputs[0].moved_bytes() / math.prod(t1.output.block)


TAU_FLOOR = {"fusion.232": 0.77, "fusion.261": 0.82, "fusion.209": 0.88, "fusion.205": 0.85,
             "fusion.245": 0.80, "copy.24": 0.80, "copy.25": 0.95}


@pytest.mark.skipif(not REAL.exists(), reason=f"real TPU runs not found at {REAL}")
def test_calibrated_emulator_tau_floor_on_the_real_runs() -> None:
    """Kendall tau of the calibrated preset per kernel with at least 10 configs (fitted on all
    kernels; the leave-one-kernel-out numbers are in the emulator's module docstring)."""
    core = PRESETS["calibrated"]
    taus = {}
    for rk in load_real(REAL):
        cfgs, ns = rk.configs()
        if len(cfgs) < 10:
            continue
        space = TileSpace(rk.kernel)
        emu = [emulate(lower(rk.kernel, c, core, space), core).seconds for c in cfgs]
        taus[rk.kernel.name] = kendall_tau([-e for e in emu], ns)
    assert set(taus) == set(TAU_FLOOR)
    assert all(taus[k] >= TAU_FLOOR[k] for k in TAU_FLOOR), taus
