import gc

import numpy as np
import pytest

from autotune.codegen.buffers import CACHE_LINE, HUGE_PAGE, aligned_copy, aligned_empty


@pytest.mark.parametrize("shape, dtype, boundary", [
    ((1024, 1024), "float32", HUGE_PAGE),    # exactly 4 MiB
    ((3, 700, 500), "float64", HUGE_PAGE),   # 8.4 MB, not a multiple of 2 MiB
    ((17, 5), "float32", CACHE_LINE),
    ((0, 4), "float64", 1),
    (7, "int64", CACHE_LINE),
])
def test_aligned_empty_places_and_shapes(shape, dtype, boundary):
    a = aligned_empty(shape, dtype)
    assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
    assert a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % boundary == 0
    a[...] = 1  # every byte of it is ours to write
    assert a.sum() == a.size


def test_aligned_copy_keeps_the_values():
    src = np.random.default_rng(0).random((1200, 1000)).astype(np.float32)[:, ::2]  # 2.4 MB, not contiguous
    dst = aligned_copy(src)
    assert dst.flags.c_contiguous and dst.ctypes.data % HUGE_PAGE == 0
    np.testing.assert_array_equal(dst, src)


def test_an_array_keeps_its_mapping_while_others_come_and_go():
    """Only the returned array refers to its mmap region: freeing other arrays and mapping new ones
    (which would reuse an unmapped range) must leave its contents alone."""
    keep = [aligned_empty((512, 1024), "float32") for _ in range(3)]
    for i, a in enumerate(keep):
        a.fill(i)
    for _ in range(4):
        churn = [aligned_empty((1024, 1024), "float32") for _ in range(3)]
        for c in churn:
            c.fill(-1.0)
        del churn
        gc.collect()
    assert [(float(a.min()), float(a.max())) for a in keep] == [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]
