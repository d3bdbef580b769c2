"""conv2d: every input layout and placement ([pad_at], including the channel-blocked "blocked_*" ones)
agrees with the NumPy reference at awkward shapes: padding or not, stride and dilation, channels not
a multiple of the block, odd row counts split over threads, and each parallel loop."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.task import Task
from tests.helpers import assert_close

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

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


FLAT_SHAPES = [
    ("2x33x9x7x17x3x3x1x1x1", 2),   # two images, 33 channels (cb splits unevenly), K not a multiple of kb
    ("1x5x11x13x20x3x2x1x0x2", 2),  # no padding, dilation 2, a 3x2 window
    ("1x7x1x127x9x3x3x1x1x1", 2),   # one output row: nothing for a second thread
    ("1x3x5x5x40x5x5x1x2x1", 1),    # one thread, a 5x5 window padded by 2
]


@pytest.mark.parametrize("shape,threads", FLAT_SHAPES)
def test_flattened_width_tiles_match_reference(shape, threads):
    """Every "w" tile (define_flat) with the input placements, parallel loops, block orders and
    reduction splits in turn."""
    task = Task.create("conv2d", shape, "float32", threads)
    sp = task.space()
    inputs = task.inputs(seed=2)
    want = task.reference(inputs)
    for cfg in flat_tile_configs(sp, ("cb", "red_order", "outer", "pad_at", "parallel")):
        got = task.build(cfg)(*inputs)
        assert_close(got, want, "float32", 9 * task.shape_dict["C"]), cfg


def flat_tile_configs(sp, knobs, six=False, **fixed):  # type: ignore[no-untyped-def]
    """One config per flattened-width ("w") tile of the space, the other knobs' values taken in
    turn (each knob offset by its position, so their combinations vary), `fixed` ones as given.
    6-channel tiles only with `six` (their tails are those of 4, 8 and 16 channels; kept short)."""
    flat = [t for t in sp.by_name["tile"].values() if t.startswith("w") and (six or not t.startswith("w6"))]
    assert flat
    values = {k: sp.by_name[k].values() for k in knobs}
    return [{"tile": tile, **fixed, **{k: v[(i + j) % len(v)] for j, (k, v) in enumerate(values.items())}}
            for i, tile in enumerate(flat)]


def test_flattened_width_needs_stride_1():
    tiles = Task.create("conv2d", "1x4x9x9x8x3x3x2x1x1").space().by_name["tile"].values()
    assert tiles and not any(t.startswith("w") for t in tiles)
    from autotune.errors import ShapeError
    from autotune.templates.conv2d import define_flat
    with pytest.raises(ShapeError, match="stride 1"):
        define_flat(Task.create("conv2d", "1x4x9x9x8x3x3x2x1x1").shape_dict, "float32")


def test_both_definitions_take_the_same_inputs_and_give_the_same_output():
    from autotune.ir.expr import input_tensors
    from autotune.templates.conv2d import define, define_flat
    shape = Task.create("conv2d", "2x3x7x9x5x3x2x1x1x2").shape_dict
    a, b = define(shape, "float64"), define_flat(shape, "float64")
    assert a.shape == b.shape and a.dtype == b.dtype
    sig = [[(t.name, t.shape, t.dtype) for t in input_tensors(o) if t.is_placeholder] for o in (a, b)]
    assert sig[0] == sig[1]


POINTWISE_SHAPES = [
    ("2x33x7x9x17x1x1", 2),   # two images, 63 pixels (a partial pixel tile per thread), K not a multiple of kb
    ("1x16x1x5x8x1x1", 2),    # fewer pixels than one tile: nothing for a second thread
    ("1x24x6x6x12x1x1", 1),   # one thread
]


@pytest.mark.parametrize("shape,threads", POINTWISE_SHAPES)
def test_pointwise_tiles_run_on_flat_views(shape, threads):
    """A 1x1 window: the "w" tiles compute on (N, C, H*W) views of the caller's NCHW arrays
    (define_pointwise), with every parallel loop, block order and reduction split in turn."""
    task = Task.create("conv2d", shape, "float32", threads)
    sp = task.space()
    inputs = task.inputs(seed=3)
    want = task.reference(inputs)
    for cfg in flat_tile_configs(sp, ("cb", "red_order", "outer", "parallel"), pad_at="none"):
        k = task.build(cfg)
        assert "reshape" not in k.source and "Xf" not in k.source  # no copy of the image: a view
        assert k.input_shapes == [(inputs[0].shape, "float32"), (inputs[1].shape, "float32")]
        assert k.output_shape == want.shape
        assert_close(k(*inputs), want, "float32", task.shape_dict["C"]), cfg
        out = np.empty(want.shape, np.float32)
        assert_close(k.prepare()(tuple(inputs), out), want, "float32", task.shape_dict["C"]), cfg


def test_pointwise_tiles_with_packed_pixel_panels(pin_target):  # type: ignore[no-untyped-def]
    """[pad_at] "blocked_*" with a "w" tile copies each tile's pixels into a panel Xq[P/pb, N, C, pb]
    (per tile: rows; per thread; or once: root), partial tiles and 6-channel tiles included (AVX2's tiles)."""
    pin_target("avx2", executes=True)
    task = Task.create("conv2d", POINTWISE_SHAPES[0][0], "float32", 2)
    sp = task.space()
    inputs = task.inputs(seed=4)
    want = task.reference(inputs)
    assert "w6x8" in sp.by_name["tile"].values()
    blocked = ("blocked_rows", "blocked_thread", "blocked_root")
    for i, cfg in enumerate(flat_tile_configs(sp, ("cb", "outer", "parallel"), six=True, red_order="crs")):
        k = task.build({**cfg, "pad_at": blocked[i % 3]})
        assert "Xq" in k.source, cfg
        assert_close(k(*inputs), want, "float32", task.shape_dict["C"]), cfg


def test_pointwise_kernel_checks_the_callers_shapes(pin_target):  # type: ignore[no-untyped-def]
    from autotune.errors import ShapeError
    pin_target("avx2", executes=True)  # its w4x8 tile
    task = Task.create("conv2d", "1x8x4x4x8x1x1", "float32", 1)
    k = task.build({**task.default_config(), "tile": "w4x8", "pad_at": "none"})
    X, W = task.inputs()
    with pytest.raises(ShapeError, match=r"must have shape \(1, 8, 4, 4\)"):
        k(X.reshape(1, 8, 16), W)
    with pytest.raises(ShapeError, match="out must be"):
        k(X, W, out=np.empty((1, 8, 16), np.float32))
