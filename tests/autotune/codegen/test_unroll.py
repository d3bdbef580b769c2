"""Unrolled register tiles: every row is printed as its own copy, and the accumulators stay in registers."""
from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.target import current
from tests.helpers import assert_close

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target


def tiled_matmul(rows: int, cols: int, K: int = 64):  # type: ignore[no-untyped-def]
    """C = A @ B with a rows x cols accumulator on the stack: rows unrolled, cols vectorized."""
    A = te.placeholder((rows * 2, K), name="A")
    B = te.placeholder((K, cols), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((rows * 2, cols), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = Schedule(C)
    s.split("C", "i", rows, "io", "ii")
    s.reorder("C", "io", "k", "ii", "j")
    s.cache_write("C", "io")
    s.unroll("C", "ii")
    s.vectorize("C", "j")
    return s


def test_every_unrolled_row_is_copied_out_small_tiles_too() -> None:
    """A loop left for LLVM to unroll was not always unrolled: the matmul template's 4-8 rows of
    one vector each ran 40-60x slower on AVX-512. So every tile, small or big, is copied out."""
    for rows, cols in ((4, 16), (12, 32)):
        src = generate_source(tiled_matmul(rows, cols))
        assert "unrolled by LLVM" not in src and src.count(f"for j in range({cols}):  # vectorize") == rows


FMA = r"\bvfmadd\w*ps"  # what a step of the tile adds into an accumulator with, on x86 with FMA
ADD = r"\bv?addps"       # and without it (SSE4.2: a mulps, then an addps into the accumulator)


def _hottest_loop(asm: str, op: str = FMA) -> str:
    """The body of the innermost loop (a label to the jump back to it, no label between) with
    the most `op` instructions."""
    loops = []
    for m in re.finditer(r"^(\.LBB\w+):", asm, re.M):
        back = re.search(rf"^\s+j\w+\s+{m.group(1)}$", asm[m.end():], re.M)
        if back and ".LBB" not in asm[m.end():m.end() + back.start()].replace(m.group(1), ""):
            loops.append(asm[m.end():m.end() + back.start()])
    return max(loops, key=lambda b: len(re.findall(op, b)))


def _assert_register_tile(asm: str, rows: int, cols: int, lanes: int, op: str = FMA) -> None:
    """The reduction loop's body is rows x cols/lanes FMAs (`op`: the adds without FMA; times
    LLVM's own unroll of k), each on a register: the accumulators never go back to memory inside
    the loop."""
    block = _hottest_loop(asm, op)
    fmas = len(re.findall(op, block))
    per_step = rows * -(-cols // lanes)
    assert fmas >= per_step and fmas % per_step == 0, (fmas, per_step)
    assert not re.search(r"\bv?movups\s+%[xyz]mm\d+, ", block), "an accumulator is stored inside the loop"


def _x86_target():  # type: ignore[no-untyped-def]
    """The target in force, whose code these checks read as x86 assembly: skipped on any other ISA
    (neon: aarch64 code, which no machine here runs)."""
    from autotune.isa import X86_LEVELS
    t = current()
    if t.isa not in X86_LEVELS:
        pytest.skip(f"the check reads x86 instructions; the target is {t.isa}")
    return t


@pytest.mark.parametrize("rows", [4, 6])
def test_the_tile_becomes_register_accumulators(rows: int) -> None:
    """A tile of rows x 16 floats (rows x 8 on SSE4.2, whose 16 registers of 4 floats hold no 6 x
    16 tile: its 12 accumulators leave room for the loads) stays in registers."""
    t = _x86_target()
    lanes = t.lanes("float32")
    cols = min(16, 2 * lanes)
    s = tiled_matmul(rows, cols)
    k = build(s, threads=1)
    A = np.random.default_rng(0).standard_normal((rows * 2, 64)).astype(np.float32)
    B = np.random.default_rng(1).standard_normal((64, cols)).astype(np.float32)
    assert_close(k(A, B), A @ B, "float32")
    _assert_register_tile(k.main.inspect_asm(k.main.signatures[0]), rows, cols, lanes, FMA if t.fma else ADD)


@pytest.mark.parametrize("mr", [4, 6])
def test_the_matmul_templates_one_vector_tiles_keep_their_accumulators_in_registers(mr: int) -> None:
    """The template's micro-kernel of mr rows of one vector of the target in force (nr = its
    lanes, packed panels, K 256): left to LLVM as a loop, its accumulators were loads and stores
    (40-60x slower on AVX-512). 8 rows are left out: on AVX2 they leave LLVM one register short
    (one spill in the loop, though 6x faster than the loop form). Without FMA (SSE4.2) each step
    of an accumulator is an addps."""
    from autotune.task import Task
    t = _x86_target()
    lanes = t.lanes("float32")
    task = Task.create("matmul", "64x64x256", threads=1)
    cfg = task.space().validate({**task.presets()[0], "mr": mr, "nr": lanes, "pack_a": True})
    k = task.build(cfg)
    A, B = task.inputs(seed=0)
    assert_close(k(A, B), A @ B, "float32")
    _assert_register_tile(k.main.inspect_asm(k.main.signatures[0]), mr, lanes, lanes, FMA if t.fma else ADD)
