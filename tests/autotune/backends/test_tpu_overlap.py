"""The emulator's DMA lookahead across a block's whole window and its once-per-output-block
epilogue (issue 28: the contraction split in steps or not, at the same output tile)."""
from __future__ import annotations

import pytest

from autotune.backends.tpu.emulator import PRESETS, Block, TiledKernel, overlapped_seconds, step_compute_seconds

V4 = PRESETS["v4"]


def test_a_block_moved_every_p_steps_overlaps_all_p_steps() -> None:
    # every period 1: the sum over steps of max(compute, DMA)
    assert overlapped_seconds(1.0, [(1, 0.5), (1, 1.0)], 4) == (6.0, 6.0)
    # a 1.5 s transfer every 2 steps hides behind both steps' compute (one-step lookahead: 1 + 1.5)
    assert overlapped_seconds(1.0, [(2, 1.5)], 4) == (4.0, 3.0)
    # DMA-bound: the window lasts its DMA, the per-step fetches included
    assert overlapped_seconds(1.0, [(1, 0.25), (2, 3.0)], 4) == (7.0, 7.0)
    # nested periods, and a block fetched once
    assert overlapped_seconds(1.0, [(1, 0.5), (2, 0.5), (8, 20.0)], 8) == pytest.approx((26.0, 26.0))


def _matmul(k_steps: int, epilogue: float) -> TiledKernel:
    """C[512, 512] += A[512, 256] B[256, 512] in blocks of 128, the contraction in k_steps steps."""
    bk = 256 // k_steps
    return TiledKernel(grid=(4, 4, k_steps),
                       inputs=(Block("A", (512, 256), (128, bk), (0, 2)), Block("B", (256, 512), (bk, 128), (2, 1))),
                       output=Block("C", (512, 512), (128, 128), (0, 1)), mxu=(128, bk, 128), reduction_axes=(2,),
                       epilogue_vreg_ops=epilogue)


def test_epilogue_runs_once_per_output_block() -> None:
    for k_steps in (1, 2, 4):
        with_epi, without = _matmul(k_steps, 64.0), _matmul(k_steps, 0.0)
        extra = (step_compute_seconds(with_epi, V4) - step_compute_seconds(without, V4)) * with_epi.steps
        # 64 vector ops for each of the 16 output blocks, however many steps the contraction takes
        assert extra == pytest.approx(16 * 64 / (V4.clock_ghz * 1e9)), k_steps
