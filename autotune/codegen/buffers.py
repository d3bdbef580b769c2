"""Arrays placed the same way in every process: big ones on 2 MiB boundaries, backed by huge pages.

Where an array starts relative to a 2 MiB boundary, and which physical 4 KiB pages back it,
decide which cache sets its rows fall in. Both change from one process to the next (address
space randomisation, whatever pages the kernel hands out), so the same kernel on the same data
can run measurably faster in one process than in another. An array of at least 2 MiB made here
starts on a 2 MiB boundary and asks for transparent huge pages (`MADV_HUGEPAGE`), so its layout
in the cache is the same everywhere; a smaller one starts on a cache line.

Example::

    >>> import numpy as np
    >>> a = aligned_empty((1024, 1024), "float32")
    >>> a.ctypes.data % (2 << 20), a.shape, a.dtype.name
    (0, (1024, 1024), 'float32')
    >>> aligned_empty((3, 5), "float64").ctypes.data % 64
    0
"""
from __future__ import annotations

import mmap
from typing import Sequence

import numpy as np

from autotune.errors import ShapeError

HUGE_PAGE = 2 << 20
CACHE_LINE = 64


def aligned_empty(shape: Sequence[int] | int, dtype: str | np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array; 2 MiB-aligned on huge pages if it is at least 2 MiB."""
    dt = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < HUGE_PAGE:
        raw = np.empty(nbytes + CACHE_LINE, np.uint8)
        off = -raw.ctypes.data % CACHE_LINE
    else:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux; elsewhere the alignment alone still holds
            region.madvise(mmap.MADV_HUGEPAGE)
        raw = np.frombuffer(region, np.uint8)
        off = -raw.ctypes.data % HUGE_PAGE
    return raw[off:off + nbytes].view(dt).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of a in an array from aligned_empty."""
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def check_disjoint(inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
    """ShapeError if `out` shares memory with an input: kernels write their output while still
    reading the inputs (and some are compiled assuming no overlap, NoAliasKernelPipeline).

    >>> a = np.zeros(4, np.float32)
    >>> check_disjoint([a], a[:2])
    Traceback (most recent call last):
    ...
    autotune.errors.ShapeError: out overlaps input 0: pass a separate output array (or out=None)
    """
    for i, a in enumerate(inputs):
        if np.may_share_memory(a, out):
            raise ShapeError(f"out overlaps input {i}: pass a separate output array (or out=None)")
