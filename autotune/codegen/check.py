"""Correctness checks of a kernel's output against the NumPy reference, with dtype-aware tolerances.

One meaning of "right answer" for the measurement workers and for `load_best`.

Example::

    >>> import numpy as np
    >>> from autotune.codegen.check import check_output
    >>> check_output(np.ones(3, np.float32), np.ones(3), "float32").ok
    True
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.codegen.buffers import aligned_empty

REL_TOL = {"float32": 2e-3, "float64": 1e-9}


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    max_error: float  # max |out - ref| / max(1, max |ref|)
    message: str


def check_output(out: np.ndarray, ref: np.ndarray, dtype: str) -> CheckResult:
    """Compare out with ref: shape, NaNs (the output is poisoned beforehand), then scaled max error."""
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return CheckResult(False, float("inf"), f"output shape {out.shape} differs from the reference {ref.shape}")
    bad = ~np.isfinite(out) & np.isfinite(ref)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return CheckResult(False, float("inf"), f"{int(bad.sum())} outputs not written or not finite, first at {idx}")
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) / scale if ref.size else 0.0
    tol = REL_TOL.get(dtype, 1e-3)
    if err > tol:
        return CheckResult(False, err, f"max error {err:.3g} (relative to max|ref|) exceeds {tol:g}")
    return CheckResult(True, err, "ok")


def poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An output buffer full of NaN, so an element the kernel never writes shows up."""
    out = aligned_empty(shape, dtype)
    out.fill(np.nan)
    return out
