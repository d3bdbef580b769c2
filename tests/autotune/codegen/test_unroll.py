"""Unrolled register tiles: a small nest is printed as loops for LLVM to unroll, and it does."""
from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.codegen.source import LLVM_UNROLLS
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


def test_a_small_tile_is_left_to_llvm_and_a_big_one_is_copied_out() -> None:
    small = generate_source(tiled_matmul(4, 16))
    assert "for ii in range(4):  # unrolled by LLVM" in small
    assert 4 * 16 <= LLVM_UNROLLS < 12 * 32
    big = generate_source(tiled_matmul(12, 32))
    assert "unrolled by LLVM" not in big and big.count("for j in range(32):  # vectorize") == 12


def _hottest_loop(asm: str) -> str:
    """The body of the innermost loop (a label to the jump back to it, no label between) with
    the most FMA instructions."""
    loops = []
    for m in re.finditer(r"^(\.LBB\w+):", asm, re.M):
        back = re.search(rf"^\s+j\w+\s+{m.group(1)}$", asm[m.end():], re.M)
        if back and ".LBB" not in asm[m.end():m.end() + back.start()].replace(m.group(1), ""):
            loops.append(asm[m.end():m.end() + back.start()])
    return max(loops, key=lambda b: len(re.findall(r"\bvfmadd\w*ps", b)))


@pytest.mark.parametrize("rows,cols", [(4, 16), (6, 16)])
def test_llvm_unrolls_the_tile_into_register_accumulators(rows: int, cols: int) -> None:
    """The reduction loop's body is rows x cols/lanes FMAs (times LLVM's own unroll of k), each
    on a register: the accumulators never go back to memory inside the loop."""
    t = current()
    if t.isa not in ("avx2", "avx512f"):
        pytest.skip(f"the check reads x86 FMA instructions; the target is {t.isa}")
    s = tiled_matmul(rows, cols)
    k = build(s, threads=1)
    A = np.random.default_rng(0).standard_normal((rows * 2, 64)).astype(np.float32)
    B = np.random.default_rng(1).standard_normal((64, cols)).astype(np.float32)
    assert_close(k(A, B), A @ B, "float32")
    asm = k.main.inspect_asm(k.main.signatures[0])
    block = _hottest_loop(asm)
    fmas = len(re.findall(r"\bvfmadd\w*ps", block))
    per_step = rows * -(-cols // t.lanes("float32"))
    assert fmas >= per_step and fmas % per_step == 0, (fmas, per_step)
    assert not re.search(r"vmovups\s+%[xyz]mm\d+, ", block), "an accumulator is stored inside the loop"
