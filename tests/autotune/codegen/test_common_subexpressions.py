"""A float subexpression that repeats in a stored value is computed once, into a temporary."""
from __future__ import annotations

import numpy as np

from autotune.codegen import build, generate_source
from autotune.ir import te
from autotune.schedule import Schedule


def test_a_repeated_subexpression_is_printed_once_and_computes_the_same() -> None:
    A = te.placeholder((37,), name="A")

    def f(i):  # type: ignore[no-untyped-def]
        r = te.max(A[i] * 0.5 - 0.25, -3.0) * 1.5 + 0.125   # 4 copies of r in the printed tree
        return (r * r + r) * r + r * 0.75
    s = Schedule(te.compute((37,), f, name="B"))
    src = generate_source(s)
    assert src.count("max(A[i]") == 1 and "_c0 = " in src
    a = np.linspace(-4, 4, 37).astype(np.float32)
    r = np.maximum(a * 0.5 - 0.25, -3.0) * 1.5 + 0.125
    np.testing.assert_allclose(build(s)(a), (r * r + r) * r + r * 0.75, rtol=1e-5)


def test_nothing_is_hoisted_out_of_a_select_branch() -> None:
    A = te.placeholder((8,), name="A")

    def f(i):  # type: ignore[no-untyped-def]
        r = te.max(A[i] * 0.5 - 0.25, -3.0) * 1.5 + 0.125
        return te.select(i > 2, r * r + r, te.const(0.0, "float32"))
    src = generate_source(Schedule(te.compute((8,), f, name="B")))
    assert "_c0" not in src


def test_short_or_single_subexpressions_stay_inline() -> None:
    A = te.placeholder((8,), name="A")
    src = generate_source(Schedule(te.compute((8,), lambda i: (A[i] + 1.0) * (A[i] + 1.0), name="B")))
    assert "_c0" not in src   # shorter than HOIST_CHARS
