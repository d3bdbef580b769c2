"""The template-free space: the rules pick the sketch a definition needs, and random configs of
every sketch compile and match NumPy."""
from __future__ import annotations

import random

import numpy as np
import pytest

from autotune.autoschedule import AutoScheduler, auto_schedule, lanes, match_gemm, match_window, vector_target
from autotune.codegen import build
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.templates import conv2d, layernorm, softmax

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target


def matmul(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C"), lambda a, b: a @ b


def matmul_tt(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    """Both operands transposed: C = A.T @ B.T, read in the other layouts."""
    A = te.placeholder((K, M), name="A")
    B = te.placeholder((N, K), name="B")
    k = te.reduce_axis(K, name="r")
    return te.compute((M, N), lambda m, n: te.sum(A[k, m] * B[n, k], axis=k), name="C"), lambda a, b: a.T @ b.T


def batched(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((3, M, K), name="A")
    B = te.placeholder((3, K, N), name="B")
    k = te.reduce_axis(K, name="k")
    return (te.compute((3, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C"),
            lambda a, b: a @ b)


def dense(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    x = te.placeholder((M, K), name="x")
    w = te.placeholder((K, N), name="w")
    b = te.placeholder((N,), name="b")
    k = te.reduce_axis(K, name="k")
    d = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="d")
    return (te.compute((M, N), lambda i, j: te.max(d[i, j] + b[j], 0.0), name="out"),
            lambda a, ww, bb: np.maximum(a @ ww + bb, 0))


def bias_relu(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    A = te.placeholder((M, N), name="A")
    b = te.placeholder((N,), name="b")
    t = te.compute((M, N), lambda i, j: A[i, j] + b[j], name="t")
    return te.compute((M, N), lambda i, j: te.max(t[i, j], 0.0), name="out"), lambda a, bb: np.maximum(a + bb, 0)


def row_sum(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    x = te.placeholder((M, N), name="x")
    j = te.reduce_axis(N, name="j")
    return te.compute((M,), lambda i: te.sum(x[i, j], axis=j), name="out"), lambda a: a.sum(axis=1)


def col_sum(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    x = te.placeholder((M, N), name="x")
    i = te.reduce_axis(M, name="i")
    return te.compute((N,), lambda j: te.sum(x[i, j], axis=i), name="out"), lambda a: a.sum(axis=0)


def softmax_def(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    return softmax.define({"M": M, "N": N}, "float32"), softmax.reference


def layernorm_def(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    return layernorm.define({"M": M, "N": N}, "float32"), layernorm.reference


def conv_def(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    shape = {"N": 1, "C": 3, "H": 9, "W": 11, "K": 5, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    return conv2d.define(shape, "float32"), lambda x, w: conv2d.reference(x, w, pad=1)


def conv_strided(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    """Stride 2, dilation 2, two images, channel counts that no vector or block divides."""
    shape = {"N": 2, "C": 19, "H": 13, "W": 10, "K": 11, "R": 3, "S": 2, "stride": 2, "pad": 1, "dilation": 2}
    return conv2d.define(shape, "float32"), lambda x, w: conv2d.reference(x, w, stride=2, pad=1, dilation=2)


def conv_bias_relu(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    """relu(conv2d + b): the convolution reading a zero-padding stage, an elementwise epilogue."""
    shape = {"N": 1, "C": 5, "H": 9, "W": 11, "K": 13, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    return conv2d.define_bias_relu(shape, "float32"), lambda x, w, b: conv2d.reference_bias_relu(x, w, b, pad=1)


def conv_bias_relu_strided(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    shape = {"N": 2, "C": 19, "H": 13, "W": 10, "K": 11, "R": 3, "S": 2, "stride": 2, "pad": 1, "dilation": 1}
    return (conv2d.define_bias_relu(shape, "float32"),
            lambda x, w, b: conv2d.reference_bias_relu(x, w, b, stride=2, pad=1))


def conv1d(M: int, N: int, K: int):  # type: ignore[no-untyped-def]
    """A 1-d convolution without padding, the weight stored channels-last: W[c, s, k]."""
    x = te.placeholder((3, 23), name="x")
    w = te.placeholder((3, 4, 10), name="w")
    c = te.reduce_axis(3, name="c")
    q = te.reduce_axis(4, name="q")
    out = te.compute((10, 20), lambda k, p: te.sum(x[c, p + q] * w[c, q, k], axis=(c, q)), name="y")

    def ref(a, b):  # type: ignore[no-untyped-def]
        return np.stack([sum(a[:, p + j] @ b[:, j, :] for j in range(4)) for p in range(20)], axis=1)
    return out, ref


SKETCH = {matmul: "gemm", matmul_tt: "gemm", batched: "gemm", dense: "gemm", bias_relu: "tiled",
          row_sum: "rows", col_sum: "tiled", softmax_def: "rows", layernorm_def: "rows", conv_def: "window",
          conv_strided: "window", conv1d: "window", conv_bias_relu: "window", conv_bias_relu_strided: "window"}


SHAPES = [(37, 50, 29), (1, 7, 127)]
# the fused convolutions take no sizes and compile slowly: one draw of configs each, and one random
# config beside the preset (their per-thread layouts, with the pixels outermost, have a test of their
# own below)
FUSED = (conv_bias_relu, conv_bias_relu_strided)
CASES = [(make, shape) for shape in SHAPES for make in SKETCH if shape == SHAPES[0] or make not in FUSED]


@pytest.mark.parametrize("make, shape", CASES, ids=[f"{m.__name__}-{'x'.join(map(str, sh))}" for m, sh in CASES])
def test_random_configs_of_the_derived_space_are_correct(make, shape) -> None:  # type: ignore[no-untyped-def]
    out, ref = make(*shape)
    auto = AutoScheduler(out, threads=2)
    assert auto.sketch == SKETCH[make]
    assert len(auto.space) > 1
    rng = random.Random(hash(shape) & 0xFFFF)
    ins = [np.random.default_rng(0).uniform(-1, 1, t.shape).astype("float32")
           for t in te.input_tensors(out) if t.is_placeholder]
    draws = 2 if shape == SHAPES[0] and make not in FUSED else 1  # the second shape's edges: one draw
    cfgs = [auto.space.validate(auto.presets()[0])] + [auto.space.sample(rng) for _ in range(draws)]
    for cfg in cfgs:
        s = Schedule(out)
        opts = auto.apply(s, cfg)
        k = build(s, threads=2, reassoc=opts.reassoc)
        np.testing.assert_allclose(k(*ins), ref(*ins), rtol=1e-4, atol=1e-4)


def test_a_gemm_is_recognised_in_any_layout_and_nothing_else_is() -> None:
    g = match_gemm(matmul_tt(8, 16, 4)[0])
    assert g is not None and (g.i, g.j, g.k, g.a_dims, g.b_dims) == ("m", "n", "r", (1, 0), (0, 1))
    assert match_gemm(batched(8, 16, 4)[0]).batch == ("b",)  # type: ignore[union-attr]
    for make in (bias_relu, row_sum, col_sum, conv_def):
        assert match_gemm(make(8, 16, 4)[0]) is None


def test_a_direct_convolution_is_recognised_and_nothing_else_is() -> None:
    w = match_window(conv_def(0, 0, 0)[0])
    assert w is not None and (w.input, w.weight, w.k, w.c, w.pixels, w.batch, w.window) == (
        "Xp", "W", "k", "rc", ("oh", "ow"), ("n",), ("rr", "rs"))
    w1 = match_window(conv1d(0, 0, 0)[0])
    assert w1 is not None and (w1.k, w1.c, w1.pixels, w1.weight_k_dim) == ("k", "c", ("p",), 2)
    for make in (matmul, matmul_tt, batched, dense, row_sum, col_sum, softmax_def, layernorm_def):
        assert match_window(make(8, 16, 4)[0]) is None
    auto = AutoScheduler(conv_bias_relu(0, 0, 0)[0], threads=2)  # the convolution under an epilogue
    assert auto.window is not None and auto.window.stage == "Y" and auto.epilogue


def test_a_convolution_epilogue_is_fused_at_the_register_tile(pin_target) -> None:  # type: ignore[no-untyped-def]
    """relu(conv + b): the output split into the window sketch's tiles (pixels unrolled, channels
    vectorised, rows over threads), the convolution computed at each tile over the whole reduction
    in its own accumulator tile, the input made once or per thread (AVX2's tiles)."""
    pin_target("avx2")
    out, _ = conv_bias_relu(0, 0, 0)
    auto = AutoScheduler(out, threads=2)
    assert auto.space.by_name["input"].values() == ["blocked_root", "blocked_thread", "plain", "plain_thread"]
    cfg = {"tile": "16x1x4", "cb": 16, "red_order": "window_c", "outer": "channels", "input": "blocked_root",
           "parallel": "oh"}
    s = auto_schedule(out, cfg, threads=2)
    assert s.stages["out"].order == ["oh_t", "n", "k_o", "oh_m", "ow_o", "oh_i", "ow_i", "k_i"]
    assert s.stages["out"].loop_kind == {"oh_i": "unroll", "ow_i": "unroll", "k_i": "vectorize", "oh_t": "parallel"}
    assert s.stages["Y"].attach == ("at", "out", "ow_o") and s.stages["Y"].cache_at == "ow_o"
    assert s.stages["Y"].order == ["n", "k_o", "oh_o", "ow_o", "rr", "rs", "rc", "oh_i", "ow_i", "k_i"]
    assert s.stages["Xp"].attach == ("inline",) and s.stages["Xp_b"].attach[0] == "root"
    s = auto_schedule(out, {**cfg, "input": "blocked_thread"}, threads=2)
    assert s.stages["Xp_b"].attach == ("at", "out", "oh_t") and s.stages["Y"].attach == ("at", "out", "ow_o")


@pytest.mark.parametrize("make", [conv_bias_relu, conv_bias_relu_strided], ids=lambda f: f.__name__)
@pytest.mark.parametrize("layout", ["blocked_thread", "plain_thread"])
def test_a_fused_epilogue_makes_the_input_per_thread_over_the_rows_each_thread_reads(make, layout, pin_target) -> None:  # type: ignore[no-untyped-def]
    """With an epilogue the blocked or padded input is computed at the output's loop over threads,
    its region what the convolution stages computed inside that loop read: correct for every loop
    over threads that keeps it per thread (a batch axis, the pixel rows), at awkward shapes (AVX2's tiles)."""
    pin_target("avx2", executes=True)
    out, ref = make(0, 0, 0)
    auto = AutoScheduler(out, threads=2)
    ins = [np.random.default_rng(0).uniform(-1, 1, t.shape).astype("float32")
           for t in te.input_tensors(out) if t.is_placeholder]
    pars = [p for p in auto.space.by_name["parallel"].values() if p != "k"]
    assert pars
    # tiles of 16 output channels (more than K: one partial block) compile in a third of the time of
    # 8-channel ones; the first tiles the rows by 2, odd row counts leaving a partial tile
    for par, tile in zip(pars, ["16x2x2", "16x1x6", "16x1x4"]):
        cfg = auto.space.validate({"tile": tile, "cb": 16, "red_order": "c_window", "outer": "pixels",
                                   "input": layout, "parallel": par})
        s = Schedule(out)
        auto.apply(s, cfg)
        made = "Xp_b" if layout == "blocked_thread" else "Xp"
        assert s.stages[made].attach == ("at", "out", s.stages["out"].order[0])
        np.testing.assert_allclose(build(s, threads=2)(*ins), ref(*ins), rtol=1e-4, atol=1e-4)


def test_the_gemm_sketch_is_the_templates_blocking() -> None:
    """matmul: column blocks, k blocks (B packed there), row blocks (A packed there), register
    tiles, an accumulator tile on the stack; the epilogue of dense fused at its register tile."""
    out, _ = matmul(256, 256, 256)
    auto = AutoScheduler(out, threads=2)
    s = auto_schedule(out, auto.presets()[0], threads=2)
    assert s.stages["C"].order == ["j_c", "k_c", "i_c", "j_r", "i_r", "k_k", "i_u", "j_v"]
    assert s.stages["C"].cache_at == "i_r" and s.stages["C"].loop_kind["j_c"] == "parallel"
    assert s.stages["B_p"].attach == ("at", "C", "k_c") and s.stages["A_p"].attach == ("at", "C", "i_c")
    out, _ = dense(256, 256, 256)
    auto = AutoScheduler(out, threads=2)
    assert auto.epilogue and auto.space.by_name["fuse"].values() == ["tile", "block"]
    s = auto_schedule(out, auto.presets()[0], threads=2)
    assert s.stages["d"].attach[:2] == ("at", "out") and s.stages["d"].cache_at == "j_r"


def test_register_tiles_fit_the_targets_vector_registers() -> None:
    out, _ = matmul(1024, 1024, 1024)
    lane, regs = lanes("float32"), vector_target()[1]
    for tile in AutoScheduler(out, threads=1).register_tiles():
        mr, nr = (int(x) for x in tile.split("x"))
        assert nr % lane == 0 and mr * (nr // lane) + nr // lane + 1 <= regs


def test_row_programs_attach_producers_vectorise_and_reassociate() -> None:
    out, _ = softmax_def(64, 256, 0)
    auto = AutoScheduler(out, threads=2)
    s = Schedule(out)
    assert auto.apply(s, auto.space.validate({"rows": 8, "attach": "block", "parallel": True})).reassoc
    # e is read by s and y: computed once at the block loop of y, after s is attached there
    assert s.stages["s"].attach == ("at", "y", "i_o") and s.stages["e"].attach == ("at", "y", "i_o")
    assert s.stages["mx"].attach == ("at", "e", "i") and s.stages["e"].loop_kind == {"j": "vectorize"}
    assert s.stages["mx_part"].order[-1] == "l" and s.stages["mx_part"].loop_kind["l"] == "vectorize"
    assert s.stages["y"].loop_kind == {"j": "vectorize", "i_o": "parallel"}
    out, _ = layernorm_def(64, 256, 0)
    s = auto_schedule(out, {"rows": 4, "attach": "row", "parallel": False}, threads=2)
    assert s.stages["rs"].attach == ("at", "y", "i_i") and s.stages["var"].attach == ("at", "rs", "i")


def test_row_programs_may_stream_their_output_rows() -> None:
    """A row program's output rows may be written with streaming stores; plain stores by default,
    and a config logged before the knob existed builds the plain kernel."""
    from autotune.codegen import generate_source
    out, ref = softmax_def(37, 50, 0)
    auto = AutoScheduler(out, threads=2)
    assert auto.space.by_name["stream"].values() == [False, True] and auto.default_config()["stream"] is False
    assert auto.space.validate({"rows": 8, "attach": "row", "parallel": True})["stream"] is False
    s = auto_schedule(out, {"rows": 8, "attach": "row", "parallel": True, "stream": True}, threads=2)
    assert "stream_row(y, " in generate_source(s, reassoc=True)
    x = np.random.default_rng(0).uniform(-1, 1, (37, 50)).astype("float32")
    np.testing.assert_allclose(build(s, threads=2, reassoc=True)(x), ref(x), rtol=1e-4, atol=1e-5)
    assert "stream" not in AutoScheduler(row_sum(37, 50, 0)[0], threads=2).space.by_name  # its output is a reduction


@pytest.mark.parametrize("make", [softmax_def, layernorm_def])
def test_row_programs_may_prefetch_the_next_rows(make) -> None:  # type: ignore[no-untyped-def]
    """A row program with producers computed per row may prefetch its input's rows ahead (schedule
    step `prefetch`): not by default, not with attach "block" (pruned), in io for blocks of one
    row; every config of the space prints, and prefetching ones compute the right values."""
    from autotune.codegen import generate_source
    out, ref = make(37, 50, 0)
    auto = AutoScheduler(out, threads=2)
    assert auto.space.by_name["prefetch"].values() == [0, 2, 4] and auto.default_config()["prefetch"] == 0
    assert auto.space.validate({"rows": 8, "attach": "row", "parallel": True})["prefetch"] == 0
    assert not auto.space.allows({**auto.default_config(), "attach": "block", "prefetch": 2})
    for cfg in auto.space.grid():
        s = Schedule(out)
        opts = auto.apply(s, cfg)
        assert ("prefetch_row(x, " in generate_source(s, reassoc=opts.reassoc)) == (cfg["prefetch"] > 0), cfg
    ins = [np.random.default_rng(0).uniform(-1, 1, t.shape).astype("float32")
           for t in te.input_tensors(out) if t.is_placeholder]
    for rows in (1, 8):
        s = auto_schedule(out, {"rows": rows, "attach": "row", "parallel": True, "prefetch": 2}, threads=2)
        np.testing.assert_allclose(build(s, threads=2, reassoc=True)(*ins), ref(*ins), rtol=1e-4, atol=1e-5)
    assert "prefetch" not in AutoScheduler(row_sum(37, 50, 0)[0], threads=2).space.by_name  # no stage per row


def test_rules_derive_tiling_packing_cache_and_parallel_knobs_for_other_reductions() -> None:
    out, _ = col_sum(64, 64, 0)
    names = set(AutoScheduler(out, threads=2).space.by_name)
    assert {"tile_j", "tile_i", "cache", "vectorize", "parallel"} <= names
    out2, _ = bias_relu(8, 8, 8)
    assert "inline_t" in AutoScheduler(out2, threads=1).space.by_name


def test_the_window_sketch_is_the_conv2d_templates_direct_structure() -> None:
    """Weights packed along the output channels, the padded input blocked by channels in one pass
    per thread, an accumulator tile of channels x pixels (pixels unrolled, channels vectorised)
    with the window then the channels inside it, rows over threads; tiles fit the registers."""
    shape = {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    out = conv2d.define(shape, "float32")
    auto = AutoScheduler(out, threads=2)
    lane, regs = lanes("float32"), vector_target()[1]
    tiles = auto.space.by_name["tile"].values()
    for tile in tiles:
        if tile.startswith("p"):  # pixels vectorised: KB channels x PW pixels in whole vectors
            kb, pw = (int(x) for x in tile[1:].split("x"))
            assert pw % lane == 0 and kb * (pw // lane) + pw // lane + 1 <= regs
        else:
            kb, ph, pw = (int(x) for x in tile.split("x"))
            assert kb % lane == 0 and ph * pw * (kb // lane) + kb // lane + 1 <= regs
    assert not any(t.startswith("p") for t in tiles)  # 64 channels fill whole vectors: channels vectorised
    cfg = auto.presets()[0]
    assert (cfg["input"], cfg["red_order"], cfg["parallel"], cfg["cb"]) == ("blocked_thread", "window_c", "oh", 64)
    s = auto_schedule(out, cfg, threads=2)
    assert s.stages["Y"].order == ["oh_t", "n", "k_o", "oh_m", "ow_o", "rr", "rs", "rc", "oh_i", "ow_i", "k_i"]
    assert s.stages["Y"].cache_at == "ow_o" and s.stages["Y"].loop_kind == {
        "oh_i": "unroll", "ow_i": "unroll", "k_i": "vectorize", "oh_t": "parallel"}
    assert s.stages["Xp"].attach == ("inline",) and s.stages["Xp_b"].attach == ("at", "Y", "oh_t")
    assert s.stages["W_p"].packed_from == ("W", 0, lane) and s.stages["Xp_b"].packed_from == ("Xp", 1, 64)
    few = conv2d.define({**shape, "K": max(1, lane // 2)}, "float32")  # fewer channels than a vector: pixels
    auto = AutoScheduler(few, threads=2)
    pixel = next(c for c in auto.presets() if c["tile"].startswith("p"))
    assert not auto.space.allows({**pixel, "input": "blocked_root"})  # a pixel run must stay contiguous
    s = auto_schedule(few, pixel, threads=2)
    assert s.stages["Y"].order[-2:] == ["k_i", "ow_i"] and s.stages["Y"].loop_kind["ow_i"] == "vectorize"
    assert s.stages["Xp"].attach == ("at", "Y", "oh_t") and "Xp_b" not in s.stages
    strided = AutoScheduler(conv_strided(0, 0, 0)[0], threads=2).space.by_name["tile"].values()
    assert not any(t.startswith("p") for t in strided)  # stride 2: a run of pixels is not a run of the input
