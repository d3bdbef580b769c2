"""Spaces and presets derived from the target: for an AVX-512, an AVX2 and a 128-bit description,
no preset and no config a space offers holds a register tile larger than the registers."""
from __future__ import annotations

import random

import pytest

from autotune.errors import SpaceError
from autotune.target import Target
from autotune.templates import batch_matmul, conv2d, dense_bias_relu, depthwise_conv2d, gemm, matmul

TARGETS = [Target.named("avx512f"), Target.named("avx2"), Target.named("sse4.2"), Target.named("neon")]
GEMMS = [(matmul, {"M": 1024, "N": 1024, "K": 1024}), (matmul, {"M": 768, "N": 3072, "K": 768}),
         (batch_matmul, {"B": 4, "M": 128, "N": 128, "K": 64}), (dense_bias_relu, {"M": 256, "N": 512, "K": 256})]
CONVS = [{"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1},
         {"N": 1, "C": 256, "H": 56, "W": 56, "K": 64, "R": 1, "S": 1, "stride": 1, "pad": 0, "dilation": 1},
         {"N": 1, "C": 32, "H": 28, "W": 28, "K": 48, "R": 3, "S": 3, "stride": 2, "pad": 1, "dilation": 1}]


def gemm_tile_fits(cfg, shape, dtype: str, target: Target) -> bool:  # type: ignore[no-untyped-def]
    return target.fits_tile(*gemm.tile_vectors(cfg["mr"], cfg["nr"], shape, dtype, target))


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.isa)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("module, shape", GEMMS, ids=lambda x: getattr(x, "__name__", "").split(".")[-1] or None)
def test_gemm_spaces_offer_only_tiles_that_fit(module, shape, dtype: str, target: Target) -> None:  # type: ignore[no-untyped-def]
    sp = module.space(shape, dtype, 2, target)
    vec = target.lanes(dtype)
    assert all(nr % vec == 0 or nr == shape["N"] for nr in sp.by_name["nr"].values())
    rng = random.Random(0)
    for _ in range(200):
        cfg = sp.sample(rng)
        assert gemm_tile_fits(cfg, shape, dtype, target)
        assert all(gemm_tile_fits(n, shape, dtype, target) for n in sp.neighbours(cfg))
    offered = {(mr, nr) for mr in sp.by_name["mr"].values() for nr in sp.by_name["nr"].values()}
    spilling = [t for t in offered if not target.fits_tile(*gemm.tile_vectors(*t, shape, dtype, target))]
    for mr, nr in spilling:  # the space names why it leaves a tile out
        with pytest.raises(SpaceError, match=f"{mr}x{nr} register tile needs .* {target.isa} has {target.registers}"):
            sp.validate({**cfg, "mr": mr, "nr": nr})


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.isa)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_presets_fit_the_registers(dtype: str, target: Target) -> None:
    shape = {"M": 1024, "N": 1024, "K": 1024}
    presets = matmul.presets(shape, dtype, 2, target)
    sp = matmul.space(shape, dtype, 2, target)
    assert len(presets) >= 3
    for p in presets:
        sp.validate(p)
        assert gemm_tile_fits(p, shape, dtype, target) and p["nr"] % target.lanes(dtype) == 0


def test_avx512_presets_are_the_register_tiles_tuned_there() -> None:
    tiles = [(p["mr"], p["nr"]) for p in matmul.presets({"M": 1024, "N": 1024, "K": 1024}, "float32", 2,
                                                        Target.named("avx512f"))]
    assert tiles == [(6, 48), (8, 48), (4, 64), (6, 32), (6, 48), (8, 32)]
    avx2 = [(p["mr"], p["nr"]) for p in matmul.presets({"M": 1024, "N": 1024, "K": 1024}, "float32", 2,
                                                       Target.named("avx2"))]
    assert avx2[0] == (6, 16) and (4, 24) in avx2   # 12 of 16 registers; the 6x48 tile would need 22


def conv_tile_vectors(tile: str, shape, vec: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(accumulator vectors, operand vectors held besides them) of a conv2d tile."""
    OH, OW = conv2d.conv_geometry(shape, "conv2d")[:2]
    if tile.startswith("g"):  # MR channels (broadcast) x NR pixels, NR / lanes B vectors
        mr, nr = (int(x) for x in tile[1:].split("x"))
        nvec = -(-min(nr, OH * OW) // vec)
        return min(mr, shape["K"]) * nvec, nvec + 1
    if tile.startswith("f"):  # Winograd: MR tiles (broadcast) x NR channels, NR / lanes weight vectors
        _, mr, nr = (int(x) for x in tile[1:].split("x"))
        nvec = -(-min(nr, shape["K"]) // vec)
        return mr * nvec, nvec + 1
    if tile.startswith("w"):
        kb, pb = (int(x) for x in tile[1:].split("x"))
        return min(kb, shape["K"]) * -(-pb // vec), 4
    kb, ohb, owb = (int(x) for x in tile.split("x"))
    nvec = -(-min(kb, shape["K"]) // vec)
    return min(ohb, OH) * min(owb, OW) * nvec, nvec + 1


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.isa)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", CONVS, ids=["3x3", "1x1", "3x3s2"])
def test_conv2d_tiles_and_presets_fit_the_registers(shape, dtype: str, target: Target) -> None:  # type: ignore[no-untyped-def]
    vec = target.lanes(dtype)
    sp = conv2d.space(shape, dtype, 2, target)
    tiles = sp.by_name["tile"].values()
    for t in tiles:
        acc, other = conv_tile_vectors(t, shape, vec)
        assert acc + other <= target.registers, t
    presets = conv2d.presets(shape, dtype, 2, target)
    assert presets
    for p in presets:
        sp.validate(p)
        acc, other = conv_tile_vectors(p["tile"], shape, vec)
        assert acc + other <= target.registers
        assert acc >= min(4, target.registers // 4), p["tile"]   # not a degenerate fallback


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.isa)
def test_depthwise_vectors_are_the_targets(target: Target) -> None:
    shape = {"N": 1, "C": 64, "H": 112, "W": 112, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    vec = target.lanes("float32")
    owbs = depthwise_conv2d.space(shape, "float32", 2, target).by_name["owb"].values()
    assert vec in owbs and 4 * vec in owbs and max(owbs) <= 4 * vec


def test_depthwise_configs_whose_code_would_explode_are_pruned_with_the_reason() -> None:
    shape = {"N": 1, "C": 64, "H": 56, "W": 56, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    sp = depthwise_conv2d.space(shape, "float32", 2, Target.named("avx512f"))
    with pytest.raises(SpaceError, match="8x16 tile with R x S unrolled is 144 vectorized loops"):
        sp.validate({"ohb": 8, "owb": 16, "pad_at": "rows", "parallel": "c", "unroll_rs": True})
    sp.validate({"ohb": 8, "owb": 56, "pad_at": "rows", "parallel": "c", "unroll_rs": False})
    for cfg in sp.grid():
        assert depthwise_conv2d.code_size_prune(shape, 56)(cfg) is None


@pytest.mark.parametrize("shape, threads", [("1x40x5x11x20x1x1", 2), ("2x24x7x9x13x1x1", 1), ("2x24x7x9x13x1x1", 2)])
def test_pointwise_convolutions_as_a_gemm_match_the_reference(shape: str, threads: int) -> None:
    from autotune.task import Task
    t = Task.create("conv2d", shape, threads=threads)
    sp = t.space()
    tiles = [x for x in sp.by_name["tile"].values() if x.startswith("g")]
    assert tiles and not [x for x in Task.create("conv2d", "1x8x9x9x8x3x3x1x1").space().by_name["tile"].values()
                          if x.startswith("g")]   # only 1x1, stride 1, no padding
    for tile in tiles[:2]:
        for par in sp.by_name["parallel"].values():
            cfg = {**dict(t.default_config()), "tile": tile, "parallel": par, "cb": sp.by_name["cb"].values()[0]}
            t.verify(t.build(cfg))
