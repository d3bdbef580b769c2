"""shows_nonfinite: which computations leave every NaN and Inf of their inputs in their output
(+, -, *, a negation, a cast, a select on indices), and which may hide one (a max, a division,
a function, a select on values)."""
from __future__ import annotations

import pytest

from autotune.ir import expr as te
from autotune.ir.nonfinite import shows_nonfinite_expr

A = te.placeholder((8,), "float32", name="A")
B = te.placeholder((8,), "float32", name="B")
i = te.Var("i")


@pytest.mark.parametrize("make", [
    lambda: A[i] + B[i], lambda: A[i] * 2.0 - B[i], lambda: -A[i], lambda: te.cast("float64", A[i]) * 3.0,
    lambda: te.select(i < 4, A[i], 0.0),  # padding: a condition on indices
    lambda: A[(i + 1) % 8] * B[i // 2], lambda: te.cast("float32", i) * A[i],
])
def test_sums_and_products_show_nonfinite_inputs(make) -> None:  # type: ignore[no-untyped-def]
    assert shows_nonfinite_expr(make())


@pytest.mark.parametrize("make", [
    lambda: te.max(A[i], 0.0), lambda: te.min(A[i], B[i]), lambda: A[i] / B[i], lambda: te.exp(A[i]),
    lambda: te.tanh(A[i]) + B[i], lambda: te.sqrt(A[i]), lambda: te.select(A[i] > 0.0, A[i], B[i]),
    lambda: te.cast("int64", A[i]) * 2,
])
def test_what_may_hide_a_nan_or_inf_does_not(make) -> None:  # type: ignore[no-untyped-def]
    assert not shows_nonfinite_expr(make())
