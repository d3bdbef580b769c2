"""Sibling loops fused where no result changes (autotune.codegen.fuse): softmax's exp and row sum,
layernorm's two row sums; and the loops that must stay apart, each checked against NumPy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.codegen.fuse import fuse_siblings
from autotune.ir import te
from autotune.ir.stmt import For, Seq, Store
from autotune.schedule import Schedule
from autotune.task import Task
from tests.helpers import assert_close


def _row_program(second_index) -> Schedule:  # type: ignore[no-untyped-def]
    """y[i] = sum_j e[i, second_index(j)] with e[i, j] = 2 x[i, j] computed per row at y's loop:
    the loop making e and the loop summing it are siblings."""
    N = 32
    x = te.placeholder((4, N), name="x")
    e = te.compute((4, N), lambda i, j: x[i, j] * 2.0, name="e")
    k = te.reduce_axis(N, name="k")
    y = te.compute((4,), lambda i: te.sum(e[i, second_index(k)], axis=k), name="y")
    s = Schedule(y)
    s.compute_at("e", "y", "i")
    s.vectorize("e", "j")
    return s


def _loop_count(src: str) -> int:
    return len(re.findall(r"^\s*for ", src, re.M))


@pytest.mark.parametrize("index, fused", [(lambda k: k, True),            # e[i, k]: what iteration k wrote
                                          (lambda k: 31 - k, False)])     # another iteration's element
def test_a_sum_fuses_with_the_loop_that_wrote_each_element_it_reads(index, fused: bool) -> None:  # type: ignore[no-untyped-def]
    s = _row_program(index)
    src = generate_source(s, reassoc=True)
    assert _loop_count(src) == (2 if fused else 3), src
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    ref = np.array([sum(2.0 * x[i, index(j)] for j in range(32)) for i in range(4)], np.float32)
    assert_close(build(s, reassoc=True)(x), ref, "float32", reduction=32)


def test_a_sum_without_reassoc_stays_in_its_own_loop() -> None:
    """Without reassoc LLVM keeps a float sum in order (scalar): fused, the loop making e would
    turn scalar too."""
    s = _row_program(lambda k: k)
    assert _loop_count(generate_source(s, reassoc=False)) == 3


def test_a_loop_reading_a_value_its_sibling_accumulates_stays_apart() -> None:
    """The variance reads the finished row sum (one element written in every iteration): fusing
    would read partial sums."""
    x, a, o = te.placeholder((8,), name="x"), te.placeholder((1,), name="a"), te.placeholder((8,), name="o")
    j, k = te.Var("j"), te.Var("k")
    zero = (te.Const(0),)
    loops = Seq((For(j, te.Const(8), "serial", Store(a, zero, a[0] + x[j])),
                 For(k, te.Const(8), "vectorize", Store(o, (k,), x[k] - a[0]))))
    assert fuse_siblings(loops, reassoc=True) is loops


def test_a_statement_between_that_the_first_loop_reads_is_not_moved() -> None:
    x, c, o, p = (te.placeholder((8,), name=n) for n in "xcop")
    j, k = te.Var("j"), te.Var("k")
    loops = Seq((For(j, te.Const(8), "vectorize", Store(o, (j,), x[j] * c[0])),
                 Store(c, (te.Const(0),), te.Const(3.0)),            # c changes after the first loop
                 For(k, te.Const(8), "vectorize", Store(p, (k,), o[k] + 1.0))))
    assert fuse_siblings(loops, reassoc=True) is loops


def test_loops_of_other_extents_or_kinds_stay_apart() -> None:
    x, o, p = (te.placeholder((8,), name=n) for n in "xop")
    j, k = te.Var("j"), te.Var("k")
    for second in (For(k, te.Const(4), "vectorize", Store(p, (k,), x[k])),
                   For(k, te.Const(8), "unroll", Store(p, (k,), x[k]))):
        loops = Seq((For(j, te.Const(8), "vectorize", Store(o, (j,), x[j])), second))
        assert fuse_siblings(loops, reassoc=True) is loops


def test_a_second_loop_writing_what_the_first_reads_stays_apart() -> None:
    x, o = te.placeholder((8,), name="x"), te.placeholder((8,), name="o")
    j, k = te.Var("j"), te.Var("k")
    loops = Seq((For(j, te.Const(8), "vectorize", Store(o, (j,), x[(j + 1) % 8])),
                 For(k, te.Const(8), "vectorize", Store(x, (k,), te.Const(0.0)))))
    assert fuse_siblings(loops, reassoc=True) is loops


@pytest.mark.parametrize("op, first, second", [("softmax", "e_local[0, j] = ", "s_local[0] += e_local[0, j]"),
                                               ("layernorm", "sb_local[0] += x[", "sa_local[0] += x[")])
def test_softmax_and_layernorm_make_their_row_sums_in_one_pass(op: str, first: str, second: str) -> None:
    """softmax: the row sum is added as exp makes each element; layernorm: both row sums in one
    loop. The kernels match NumPy."""
    t = Task.create(op, {"M": 6, "N": 40}, "float32", threads=1)
    cfg = {"rows": 2, "attach": "row", "parallel": False}
    src = t.source(cfg)
    a = src.index(first)
    assert "for " not in src[a:src.index(second, a)], src  # one loop body holds both
    rng = np.random.default_rng(1)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in t.arguments()]
    assert_close(t.build(cfg)(*ins), t.reference(ins), "float32", reduction=40)
