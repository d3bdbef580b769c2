"""A built kernel's out= must be writable; names in generated source: Python folds identifiers by NFKC (`ｉ` is `i`), so the printer prints
folded names and never lets two of the IR's names become one variable (issue 38, item 9)."""
from __future__ import annotations

import numpy as np

from autotune.codegen import build, generate_source
from autotune.ir import expr as te
from autotune.schedule import Schedule


def test_a_fullwidth_name_and_its_ascii_twin_are_two_variables() -> None:
    a = te.placeholder((8,), name="ｉ")  # folds to "i", the loop variable's name
    b = te.placeholder((8,), name="i")
    out = te.compute((8,), lambda i: a[i] * 2.0 + b[i], name="B")
    src = generate_source(Schedule(out))
    assert "ｉ" not in src and "def kernel(i, i_1, B)" in src
    x, y = np.arange(8, dtype=np.float32), np.full(8, 100, np.float32)
    np.testing.assert_array_equal(build(Schedule(out))(x, y), 2 * x + y)


def test_a_name_that_is_no_ascii_identifier_prints_as_a_plain_one() -> None:
    a = te.placeholder((4,), name="α")
    out = te.compute((4,), lambda i: a[i] + 1.0, name="β")
    src = generate_source(Schedule(out))
    assert src.isascii()
    np.testing.assert_array_equal(build(Schedule(out))(np.ones(4, np.float32)), np.full(4, 2, np.float32))


def test_a_read_only_out_is_one_line_error_for_a_built_kernel() -> None:
    a = te.placeholder((8,), name="A")
    k = build(Schedule(te.compute((8,), lambda i: a[i] + 1.0, name="B")))
    out = np.zeros(8, np.float32)
    out.setflags(write=False)
    import pytest
    with pytest.raises(ValueError, match=r"out must be a writable .*\(read-only\)"):
        k(np.zeros(8, np.float32), out=out)
    assert not out.any()
