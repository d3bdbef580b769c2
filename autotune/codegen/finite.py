"""Whether an array holds only finite values, in one read and no allocation.

A tuned op checks its inputs before every call (its kernels are compiled assuming finite values):
`np.isfinite(a).all()` allocates a boolean array as large as `a` and reads both, about 1.5 µs on a
1024-element input and twice the input's traffic on a large one. This sums `a * 0` instead, in
compiled code: each term is 0 for a finite value and NaN for NaN or ±Inf, so the sum is 0 exactly
when every value is finite. Only reassociation is allowed to the compiler (to vectorize the sum):
without `nnan` and `ninf` it may not fold `x * 0` to 0. The compiled check is defined once, in
autotune.codegen.invoke (`finite`), whose trampoline runs it too, in one call with the kernel.

    >>> import numpy as np
    >>> all_finite(np.ones((3, 4), np.float32)), all_finite(np.array([1.0, np.inf]))
    (True, False)
    >>> check = finite_check(np.dtype(np.float32), contiguous=True)   # once, for a call path
    >>> check(np.zeros(8, np.float32)), finite_check(np.dtype(np.int64), contiguous=True)
    (True, None)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from autotune.codegen.invoke import compiled_finite, finite

_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))


def finite_check(dtype: np.dtype, *, contiguous: bool) -> Callable[[np.ndarray], bool] | None:
    """The check for arrays of this dtype and layout, or None where no value can be non-finite
    (integers, booleans): the compiled one for contiguous float32/float64, NumPy's otherwise."""
    if dtype.kind in "biu":
        return None
    return compiled_finite if contiguous and dtype in _COMPILED else finite


def all_finite(a: np.ndarray) -> bool:
    """True unless `a` holds NaN or ±Inf."""
    check = finite_check(a.dtype, contiguous=a.flags.c_contiguous)
    return True if check is None else bool(check(a))
