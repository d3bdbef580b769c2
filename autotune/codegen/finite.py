"""Whether an array holds only finite values, in one read and no allocation.

A tuned op checks its inputs before every call (its kernels are compiled assuming finite values;
a kernel of sums and products checks its output after the call instead: Kernel.checks_output):
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

from autotune.codegen.invoke import FINITE_CHUNK, compiled_finite, finite, finite_chunks
from autotune.codegen.team import team_for

_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))


def finite_check(dtype: np.dtype, *, contiguous: bool) -> Callable[[np.ndarray], bool] | None:
    """The check for arrays of this dtype and layout, or None where no value can be non-finite
    (integers, booleans): the compiled one for contiguous float32/float64, NumPy's otherwise."""
    if dtype.kind in "biu":
        return None
    return compiled_finite if contiguous and dtype in _COMPILED else finite


PARALLEL_BYTES = 1 << 20  # inputs from this size on are checked by the team's threads together


def parallel_finite_check(dtype: np.dtype, threads: int) -> Callable[[np.ndarray], bool] | None:
    """The check of large C-contiguous float32/float64 arrays that a parallel kernel's call makes
    on its thread team (`threads` threads: the caller and its workers), each thread taking chunks
    as it frees up: a memory-bound input is read at the team's rate, not one core's (a fused
    tanh-GELU's 12.6 MB input: see measure/experiments/RESULTS.md). Arrays under PARALLEL_BYTES
    are checked on the calling thread. None where no value can be non-finite.

        >>> check = parallel_finite_check(np.dtype(np.float32), 2)
        >>> x = np.zeros(1 << 19, np.float32)
        >>> check(x), (x.__setitem__(-1, np.nan), check(x))[1]
        (True, False)
    """
    single = finite_check(dtype, contiguous=True)
    if single is None or threads < 2 or dtype not in _COMPILED:
        return single
    kernel = finite_chunks(dtype.name)

    def check(a: np.ndarray) -> bool:
        if a.nbytes < PARALLEL_BYTES:
            return bool(single(a))
        flat = a.reshape(a.size)
        bad = np.zeros(-(-flat.size // FINITE_CHUNK), np.uint8)
        team_for(threads).run(kernel, [(flat, bad)] * threads, bad.size)
        return not bad.any()
    return check


def all_finite(a: np.ndarray) -> bool:
    """True unless `a` holds NaN or ±Inf."""
    check = finite_check(a.dtype, contiguous=a.flags.c_contiguous)
    return True if check is None else bool(check(a))
