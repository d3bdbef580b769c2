"""softmax's row max: vector partial maxima, a tree over them, then the tail columns."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.target import host
from autotune.task import Task


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_row_max_covers_the_chunks_and_the_tail(dtype: str) -> None:
    V = 2 * host().lanes(dtype)
    N = 3 * V + V - 1                       # full chunks and the longest tail
    t = Task.create("softmax", {"M": 3, "N": N}, dtype, threads=1)
    x = np.zeros((3, N), dtype)
    x[0, V + 1] = 50.0                      # the max inside the chunks (the tree's)
    x[1, 3 * V] = 50.0                      # the first tail column (the tree's step)
    x[2, N - 1] = 50.0                      # the last tail column
    k = t.build({"rows": 1, "attach": "row", "parallel": False})
    got = k(x)
    np.testing.assert_allclose(got, t.reference([x]), rtol=1e-5 if dtype == "float32" else 1e-12)
    assert np.allclose(got.max(axis=1), 1.0)
