"""A spatial convolution's tiles: an output tile of t rows reads (t - 1) * stride + window input rows,
so input blocks carry the halo (in DMA bytes and in VMEM) and smaller tiles re-read more of it."""
from __future__ import annotations

import math

import pytest

from autotune.backends.tpu.emulator import PRESETS, emulate, fetch_period, vmem_usage
from autotune.backends.tpu.hlo import HloKernel, TileConfig, TileSpace
from autotune.backends.tpu.lowering import Windowed, lower

CORE = PRESETS["v4"]
N, H, W, C, F = 2, 32, 32, 128, 128  # NHWC input, F output features


def conv_kernel(size: int = 3, stride: int = 1) -> HloKernel:
    """A fusion of one NHWC f32 convolution with a size x size window."""
    oh = (H - size) // stride + 1
    win = [{"size": size, "stride": stride}] * 2
    cd = {"in_batch": 0, "in_feat": 3, "in_spatial": [1, 2], "k_in": 2, "k_out": 3, "k_spatial": [0, 1],
          "out_batch": 0, "out_feat": 3, "out_spatial": [1, 2]}
    lay = {"minor_to_major": [3, 2, 1, 0], "tiles": [[8, 128]]}

    def params(first_id: int, names: tuple[str, str]) -> list[dict]:
        """The input and the kernel as parameters 0 and 1 of a computation."""
        return [{"name": n, "opcode": "parameter", "dtype": "f32", "shape": s, "id": first_id + i, "operands": [],
                 "parameter_number": i, "layout": lay}
                for i, (n, s) in enumerate(zip(names, ([N, H, W, C], [size, size, C, F])))]
    return HloKernel.from_json({"kernel": "fusion.conv", "entry_id": 2, "computations": [
        {"name": "fused_conv", "id": 1, "root_id": 12, "instructions": [*params(10, ("p0", "p1")),
            {"name": "conv", "opcode": "convolution", "dtype": "f32", "shape": [N, oh, oh, F], "id": 12,
             "operands": [10, 11], "layout": lay, "window": win, "conv_dims": cd, "feature_group_count": 1}]},
        {"name": "entry", "id": 2, "root_id": 22, "instructions": [*params(20, ("x", "w")),
            {"name": "fusion.conv", "opcode": "fusion", "dtype": "f32", "shape": [N, oh, oh, F], "id": 22,
             "operands": [20, 21], "called": [1], "layout": lay, "fusion_kind": "kConvolution"}]}]})


def tiled(k: HloKernel, rows: int, cols8: int = 1):  # type: ignore[no-untyped-def]
    """The lowered kernel for output tiles of 1 image, `rows` output rows, 8 * cols8 output columns,
    all features, and the whole contraction in one step."""
    space = TileSpace(k)
    r, s = space.kshape.physical_shape[:2]
    cfg = TileConfig((r, s, C // 8, F // 128), (1, rows, cols8, F // 128))
    return lower(k, cfg, CORE, space)


def input_bytes(tk) -> int:  # type: ignore[no-untyped-def]
    """Bytes of the convolution input fetched over the whole grid (every re-fetch counted)."""
    x = tk.inputs[0]
    return tk.steps // fetch_period(x.axes, tk.grid) * x.vmem_bytes()


def test_input_block_carries_the_halo() -> None:
    k = conv_kernel(size=3)
    for rows in (2, 5, 10):
        x = tiled(k, rows).inputs[0]
        assert x.shape == (N, H, W, C)
        assert x.block == (1, rows + 2, 8 + 2, C)  # (t - 1) * 1 + 3 rows, and columns
    strided = tiled(conv_kernel(size=3, stride=2), rows=4).inputs[0]
    assert strided.block[1] == (4 - 1) * 2 + 3
    assert Windowed.of(1, {"size": 1, "stride": 1}) == 1  # a 1x1 window has no halo


def test_smaller_spatial_tiles_reread_more_input() -> None:
    k = conv_kernel(size=3)
    out_rows = H - 2
    per_row = {}
    for rows in (1, 2, 5, 10, 30):
        tk = tiled(k, rows)
        per_row[rows] = input_bytes(tk) / out_rows
    # every output row re-reads (rows + 2) / rows of its input rows: strictly more for smaller tiles
    assert all(per_row[a] > per_row[b] for a, b in zip((1, 2, 5, 10), (2, 5, 10, 30))), per_row
    # the whole image in one tile reads the input exactly once
    whole = tiled(k, out_rows, cols8=4)
    assert input_bytes(whole) == N * H * W * C * 4
    # and a tile of one output row reads three input rows for it
    assert per_row[1] == pytest.approx(3 * per_row[30] * 30 / 32)


def test_vmem_footprint_and_runtime_include_the_halo() -> None:
    k3, k1 = conv_kernel(size=3), conv_kernel(size=1)
    t3, t1 = tiled(k3, 4), tiled(k1, 4)
    x3, x1 = t3.inputs[0], t1.inputs[0]
    # 6 x 10 input rows x cols for the 3x3 window (cols pad to 16 sublanes), 4 x 8 for the 1x1 one
    assert x3.vmem_bytes() == 1 * 6 * 16 * C * 4
    assert x1.vmem_bytes() == 1 * 4 * 8 * C * 4
    assert vmem_usage(t3) - vmem_usage(t1) >= 2 * (x3.vmem_bytes() - x1.vmem_bytes())
    # the 3x3 window runs nine passes over the MXU: one matmul per window position
    assert t3.mxu_passes == 9 * t1.mxu_passes and t3.mxu == t1.mxu == (4 * 8, C, F)
    assert t3.flops == pytest.approx(9 * 2 * math.prod((N, 30, 30, F)) * C)
    assert emulate(t3, CORE).seconds > emulate(t1, CORE).seconds
