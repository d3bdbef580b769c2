"""conv2d's Winograd tiles (templates/conv2d_winograd.py): the transforms, which shapes offer them,
and kernels built through the conv2d task against NumPy's direct convolution."""
import numpy as np
import pytest

from autotune.codegen.check import check_output
from autotune.errors import ShapeError
from autotune.target import Target
from autotune.task import Task
from autotune.templates import conv2d
from autotune.templates import conv2d_winograd as wg

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target


def test_matrices_compute_a_correlation() -> None:
    """A^T [(G g) * (B^T d)] = the valid 1-D correlation of d (m + 2 values) with g (3 taps)."""
    rng = np.random.default_rng(0)
    for m in (2, 4):
        Bt, G, At = wg.matrices(m)
        d, g = rng.standard_normal(m + 2), rng.standard_normal(3)
        np.testing.assert_allclose(At @ ((G @ g) * (Bt @ d)), np.correlate(d, g, "valid"), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,offered", [
    ("1x64x56x56x64x3x3x1x1", True), ("1x8x9x9x8x3x3x2x1", False),       # stride 2
    ("1x8x9x9x8x3x3x1x1x2", False), ("1x8x9x9x8x1x1", False), ("1x8x9x9x8x5x5x1x2", False)])
def test_winograd_tiles_only_for_3x3_stride_1_undilated(shape: str, offered: bool) -> None:
    task = Task.create("conv2d", shape, threads=2)
    tiles = [t for t in task.space().by_name["tile"].values() if t.startswith("f")]
    assert bool(tiles) == offered
    assert any(p["tile"].startswith("f4") for p in task.presets()) == offered


@pytest.mark.parametrize("target", [Target.named(isa) for isa in ("avx512f", "avx2", "sse4.2", "neon")],
                         ids=lambda t: t.isa)
def test_winograd_register_tiles_fit(target: Target) -> None:
    shape = conv2d.TEMPLATE.parse_shape("1x64x56x56x64x3x3x1x1")
    vec = target.lanes("float32")
    for t in wg.tiles(shape, "float32", target):
        m, mr, nr = wg.parse_tile(t)
        assert nr == 2 * vec and m == 4
        assert mr * -(-nr // vec) + -(-nr // vec) + 1 <= target.registers, t


@pytest.mark.parametrize("shape,tile,threads", [
    # partial tiles, 2 images, a channel block tail (20 = 16 + 4), threads; a build costs 4-7 s
    ("2x20x9x11x16x3x3x1x1", "f4x6x", 2),
])
def test_winograd_kernels_match_the_reference(shape: str, tile: str, threads: int) -> None:
    task = Task.create("conv2d", shape, threads=threads)
    sp = task.space()
    (tile,) = [t for t in sp.by_name["tile"].values() if t.startswith(tile)]
    cfg = {**task.default_config(), "tile": tile}
    kernel = task.build(cfg)
    assert "pipeline_class=NoAliasKernelPipeline" in kernel.source
    ins = task.inputs()
    res = check_output(kernel(*ins), np.asarray(task.reference(ins)), "float32")
    assert res.ok and res.max_error < 5e-5, res.message
    n_out = int(np.prod(kernel.output_shape))
    buf = np.empty(max(ins[0].size, n_out), np.float32)
    x = buf[: ins[0].size].reshape(ins[0].shape)
    x[...] = ins[0]
    with pytest.raises(ShapeError, match="out overlaps input 0"):   # noalias: never handed overlapping arrays
        kernel(x, *ins[1:], out=buf[:n_out].reshape(kernel.output_shape))


def test_the_other_knobs_of_a_winograd_tile_give_one_kernel() -> None:
    task = Task.create("conv2d", "1x32x12x12x16x3x3x1x1", threads=2)
    sp = task.space()
    base = next(p for p in task.presets() if p["tile"].startswith("f"))
    other = {k: sp.by_name[k].values()[-1] for k in ("cb", "outer", "pad_at", "red_order", "parallel")}
    assert {**base, **other} != base
    assert task.source({**base, **other}) == task.source(base)
