"""conv2d: every input layout and placement ([pad_at], including the channel-blocked "blocked_*" ones)
agrees with the NumPy reference at awkward shapes: padding or not, stride and dilation, channels not
a multiple of the block, odd row counts split over threads, and each parallel loop."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.task import Task
from tests.helpers import assert_close

SHAPES = [
    ("2x40x9x7x19x3x3x2x1x1", 2),   # C=40: a partial channel block; stride 2, pad 1
    ("1x5x11x13x17x3x2x1x0x2", 2),  # no padding (pad 0): Xb packs X itself; dilation 2
    ("1x33x8x9x16x3x3x1x1x1", 1),   # one thread: "thread" placements fall back to root
]


@pytest.mark.parametrize("shape,threads", SHAPES)
def test_every_pad_at_matches_reference(shape, threads):
    task = Task.create("conv2d", shape, "float32", threads)
    sp = task.space()
    inputs = task.inputs(seed=1)
    want = task.reference(inputs)
    tiles = sp.by_name["tile"].values()
    pads, pars = sp.by_name["pad_at"].values(), sp.by_name["parallel"].values()
    # every placement once (parallel loops in turn), and the per-thread ones with every parallel loop
    combos = {(p, pars[i % len(pars)]) for i, p in enumerate(pads)}
    combos |= {(p, par) for p in pads if p.endswith("thread") for par in pars}
    if threads == 1:  # what this shape adds: the per-thread placements fall back to root
        combos = {(p, par) for p, par in combos if p.endswith("thread")}
    for i, (pad_at, par) in enumerate(sorted(combos)):
        cfg = {"tile": tiles[(i + len(par)) % len(tiles)], "cb": sp.by_name["cb"].values()[0],
               "red_order": ["rsc", "crs"][i % 2], "outer": ["k_oh", "oh_k"][len(par) % 2],
               "pad_at": pad_at, "parallel": par}
        got = task.build(cfg)(*inputs)
        assert_close(got, want, "float32", 9 * task.shape_dict["C"]), cfg
