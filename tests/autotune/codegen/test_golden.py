"""Golden tests: the generated source of a few schedules is pinned byte for byte, and each golden
kernel really runs and agrees with NumPy. Also: the on-disk kernel cache across processes.

Regenerate the golden files after an intended change of the code generator with

    AUTOTUNE_REGEN_GOLDEN=1 pytest tests/autotune/codegen/test_golden.py
    (or: pytest tests/autotune/codegen/test_golden.py --regen-golden)

and review the diff of tests/autotune/codegen/golden/ before committing it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.codegen.source import generate_modules
from autotune.ir import te
from autotune.schedule import Schedule
from tests.helpers import assert_close, blis_like

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[3]


def matmul(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


def g_matmul_packed():
    """BLIS-like 37x29x23: packed A and B panels, a 4x8 accumulator on the stack, parallel jc."""
    return blis_like(matmul(37, 29, 23))


def g_elementwise():
    A = te.placeholder((6, 5), name="A")
    B = te.placeholder((5,), name="B")
    return Schedule(te.compute((6, 5), lambda i, j: te.max(A[i, j] * 2.0 + B[j], 0.0), name="C"))


def g_split_tail():
    A = te.placeholder((37,), name="A")
    s = Schedule(te.compute((37,), lambda i: te.exp(A[i]) - 1.0, name="B"))
    s.split("B", "i", 8)
    return s


def g_unroll_vectorize_tile():
    s = Schedule(matmul(10, 27, 5))
    s.tile("C", "i", "j", 4, 16)
    s.reorder("C", "i_o", "j_o", "k", "i_i", "j_i")
    s.unroll("C", "i_i")
    s.vectorize("C", "j_i")
    return s


def g_fused_epilogue():
    X = te.placeholder((9, 7), name="X")
    W = te.placeholder((7, 13), name="W")
    bias = te.placeholder((13,), name="bias")
    k = te.reduce_axis(7, name="k")
    D = te.compute((9, 13), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="D")
    Y = te.compute((9, 13), lambda i, j: te.max(D[i, j] + bias[j], 0.0), name="Y")
    s = Schedule(Y)
    s.split("Y", "j", 4)
    s.compute_at("D", "Y", "j_o")
    return s


def g_conv2d_flat():
    """conv2d over the flattened padded image (templates.conv2d.define_flat), 2 threads over rows:
    the padded rows per thread, whole 4 x 16 tiles in registers over the row ends, a clamped write-back."""
    from autotune.task import Task
    task = Task.create("conv2d", "1x3x7x9x5x3x3x1x1x1", "float32", 2)
    return task.schedule({"tile": "w4x16", "cb": 16, "red_order": "crs", "outer": "oh_k",
                          "pad_at": "blocked_thread", "parallel": "oh"})[0]


def g_conv2d_flat_scratch():
    """The same with an input stretch per thread too big for the stack (> 16 KiB): it becomes an
    argument the caller allocates once per thread, not an allocation in every call."""
    from autotune.task import Task
    task = Task.create("conv2d", "1x16x16x30x8x3x3x1x1x1", "float32", 2)
    return task.schedule({"tile": "w4x16", "cb": 16, "red_order": "crs", "outer": "oh_k",
                          "pad_at": "blocked_thread", "parallel": "oh"})[0]


def _auto(out, cfg):
    """The auto-scheduler's schedule of a definition at a config given in full (not validated against
    this machine's space, whose register tiles depend on the ISA: the source must not)."""
    from autotune.autoschedule import AutoScheduler
    s = Schedule(out)
    AutoScheduler(out, threads=2).apply(s, cfg)
    return s


def g_auto_dense_bias_relu():
    """relu(x @ w + b) from its definition: the GEMM stage computed at the epilogue's 4 x 16 register
    tile (an accumulator on the stack over the packed panels), the epilogue written once."""
    x = te.placeholder((10, 7), name="x")
    w = te.placeholder((7, 40), name="w")
    b = te.placeholder((40,), name="b")
    k = te.reduce_axis(7, name="k")
    d = te.compute((10, 40), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="d")
    out = te.compute((10, 40), lambda i, j: te.max(d[i, j] + b[j], 0.0), name="out")
    return _auto(out, {"fuse": "tile", "tile": "4x16", "kc": 7, "mc_panels": 4, "jc_blocks": 1, "order": "jr_ir",
                       "pack_a": True, "parallel": True})


def g_auto_row_sum():
    """x.sum(axis=1) from its definition: blocks of 4 rows over the threads, each row's sum in a
    stack accumulator (vectorised by reassociation when compiled with reassoc)."""
    x = te.placeholder((37, 29), name="x")
    j = te.reduce_axis(29, name="j")
    return _auto(te.compute((37,), lambda i: te.sum(x[i, j], axis=j), name="out"), {"rows": 4, "parallel": True})


CONV = {"N": 1, "C": 3, "H": 7, "W": 9, "K": 5, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}


def _conv_definition():  # type: ignore[no-untyped-def]
    from autotune.templates.conv2d import define
    return define(CONV, "float32")


def g_auto_conv2d_window():
    """conv2d from its definition (the window sketch): weights packed by 8 output channels, the
    padded input blocked by channels in one pass per thread, a tile of 8 channels (vectorised) x
    1 x 4 pixels (unrolled) over the window then the channels, rows over the threads."""
    return _auto(_conv_definition(), {"tile": "8x1x4", "cb": 16, "red_order": "window_c", "outer": "channels",
                                      "input": "blocked_thread", "parallel": "oh"})


def g_auto_conv2d_pixels():
    """The same definition with a pixel-vectorised tile: 2 output channels (unrolled, weights
    broadcast) x 8 pixels (vectorised), the padded input unblocked and made once."""
    return _auto(_conv_definition(), {"tile": "p2x8", "cb": 16, "red_order": "c_window", "outer": "channels",
                                      "input": "plain", "parallel": "oh"})


def g_auto_conv2d_bias_relu():
    """relu(conv2d + b) from its definition: the output in the window sketch's tiles of 8 channels
    (vectorised) x 1 x 4 pixels (unrolled), rows over the threads; the convolution computed at each
    tile into its own accumulator over the window and the channels (the padded input blocked once,
    before the threads start); bias and relu applied to that tile as the output is written, once."""
    from autotune.templates.conv2d import define_bias_relu
    return _auto(define_bias_relu(CONV, "float32"), {"tile": "8x1x4", "cb": 16, "red_order": "window_c",
                                                     "outer": "channels", "input": "blocked_root", "parallel": "oh"})


CASES = {
    "auto_conv2d_bias_relu": g_auto_conv2d_bias_relu,
    "auto_conv2d_window": g_auto_conv2d_window,
    "auto_conv2d_pixels": g_auto_conv2d_pixels,
    "auto_dense_bias_relu": g_auto_dense_bias_relu,
    "auto_row_sum": g_auto_row_sum,
    "conv2d_flat": g_conv2d_flat,
    "conv2d_flat_scratch": g_conv2d_flat_scratch,
    "matmul_37x29x23_packed": g_matmul_packed,
    "elementwise": g_elementwise,
    "split_tail": g_split_tail,
    "unroll_vectorize_tile": g_unroll_vectorize_tile,
    "fused_epilogue": g_fused_epilogue,
}


def reference(name, arrays):
    if name in ("matmul_37x29x23_packed", "unroll_vectorize_tile"):
        return arrays[0] @ arrays[1]
    if name == "elementwise":
        return np.maximum(arrays[0] * 2 + arrays[1], 0)
    if name == "split_tail":
        return np.exp(arrays[0]) - 1
    if name == "auto_row_sum":
        return arrays[0].sum(axis=1)
    if name in ("fused_epilogue", "auto_dense_bias_relu"):
        return np.maximum(arrays[0] @ arrays[1] + arrays[2], 0)
    if name in ("conv2d_flat", "conv2d_flat_scratch", "auto_conv2d_window", "auto_conv2d_pixels"):
        from autotune.templates.conv2d import reference as conv2d
        return conv2d(arrays[0], arrays[1], pad=1)
    if name == "auto_conv2d_bias_relu":
        from autotune.templates.conv2d import reference_bias_relu
        return reference_bias_relu(arrays[0], arrays[1], arrays[2], pad=1)
    raise KeyError(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_source(name, regen_golden, pin_target):
    pin_target("avx2")  # the conv2d cases name AVX2's tiles; the rest are given in full
    src = generate_source(CASES[name]())
    path = GOLDEN / f"{name}.py.txt"
    if regen_golden:
        path.write_text(src)
        pytest.skip(f"regenerated {path}")
    assert path.exists(), f"{path} is missing; run with AUTOTUNE_REGEN_GOLDEN=1 to create it"
    expected = path.read_text()
    if src != expected:
        import difflib
        diff = "".join(difflib.unified_diff(expected.splitlines(True), src.splitlines(True),
                                            f"golden/{name}.py.txt", "generated"))
        pytest.fail(f"generated source changed (AUTOTUNE_REGEN_GOLDEN=1 to accept):\n{diff}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_kernel_runs(name, pin_target):
    pin_target("avx2", executes=True)
    s = CASES[name]()
    k = build(s, threads=2)
    rng = np.random.default_rng(5)
    arrays = [rng.uniform(-1, 1, shape).astype(dtype) for shape, dtype in k.input_shapes]
    assert_close(k(*arrays), reference(name, arrays), "float32", 32)
    # the source is readable: the file Numba compiled is the kernel function as generated, under
    # the header of just what it uses; the prologue, if any, is a module of its own
    modules = generate_modules(s)
    assert k.path.read_text() == modules["kernel"] and k.source == generate_source(s)
    assert (k.prologue is not None) == ("prologue" in modules)
    for text in modules.values():
        body = text[text.index("\n\n\n@healing_njit") + 3:]
        assert body in k.source


def test_a_prologue_shared_by_two_kernels_is_compiled_once(tmp_path):
    """Two register tiles of one convolution pack the weights alike: the second build loads the
    first's prologue module instead of compiling it again."""
    from autotune.templates import conv2d
    shape = {"N": 1, "C": 8, "H": 9, "W": 9, "K": 8, "R": 3, "S": 3, "stride": 1, "pad": 1, "dilation": 1}
    kernels = []
    for tile in ("w4x8", "w4x16"):
        cfg = {"tile": tile, "cb": 8, "red_order": "crs", "outer": "oh_k", "pad_at": "root", "parallel": "oh"}
        sched = Schedule(conv2d.define_for(shape, "float32", cfg))
        conv2d.schedule(sched, cfg, shape, 2)
        kernels.append((generate_modules(sched), build(sched, threads=2, cache_dir=tmp_path)))
    (first, a), (second, b) = kernels
    assert first["prologue"] == second["prologue"] and first["kernel"] != second["kernel"]
    assert a.prologue is b.prologue and a.main is not b.main


# ---------------------------------------------------------------------------------------------
# the disk cache: a second process loads the kernel instead of compiling it
# ---------------------------------------------------------------------------------------------
SNIPPET = textwrap.dedent("""
    import json, time
    import numpy as np
    from tests.autotune.codegen.test_golden import g_matmul_packed
    from autotune.codegen import build
    k = build(g_matmul_packed(), threads=1)
    a = np.ones((37, 23), np.float32); b = np.ones((23, 29), np.float32)
    ok = bool(np.allclose(k(a, b), a @ b))
    print(json.dumps({"compile_seconds": k.compile_seconds, "ok": ok, "path": str(k.path)}))
""")


def _run(cache: Path) -> dict:
    env = dict(os.environ, AUTOTUNE_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", SNIPPET], env=env, cwd=str(REPO), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _snapshot(cache: Path) -> dict[str, int]:
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}


def test_disk_cache_across_processes(tmp_path):
    cold = _run(tmp_path)
    assert cold["ok"]
    files = _snapshot(tmp_path)
    assert any(f.endswith(".py") for f in files), files
    index = [f for f in files if f.endswith(".nbi")]
    data = [f for f in files if f.endswith(".nbc")]
    assert index and data, f"Numba wrote no cache files: {sorted(files)}"
    warm = _run(tmp_path)
    assert warm["ok"] and warm["path"] == cold["path"]
    assert _snapshot(tmp_path) == files, "the second process wrote or rewrote cache files"
    assert warm["compile_seconds"] < 0.5 * cold["compile_seconds"], (cold, warm)
