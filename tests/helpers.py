"""Helpers shared by the tests: dtype-aware comparison with NumPy."""
from __future__ import annotations

import numpy as np


def tolerance(dtype: str, reduction: int = 1) -> dict[str, float]:
    """rtol/atol for comparing a kernel with NumPy: grows with the reduction length."""
    scale = max(1.0, float(reduction)) ** 0.5
    if dtype == "float32":
        return {"rtol": 1e-4 * scale, "atol": 1e-4 * scale}
    return {"rtol": 1e-10 * scale, "atol": 1e-10 * scale}


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, reduction: int = 1) -> None:
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, **tolerance(dtype, reduction))
