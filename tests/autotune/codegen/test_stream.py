"""Output rows stored around the caches (schedule step `stream`, autotune.codegen.stream): the rows
are right at every alignment of their start, the stores are non-temporal, and schedules where
no row can be streamed are refused with a clear error."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.codegen.runtime import stack_empty, stream_fence, stream_row
from autotune.errors import ScheduleError
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.task import Task
from tests.helpers import assert_close

import numba  # noqa: E402 - after autotune, which sets Numba's environment first

pytestmark = pytest.mark.target  # the vector width follows the target in force: .ci/run runs it again under each target


def _scaled(M: int, N: int, dtype: str = "float32") -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder((M, N), dtype, name="x")
    return x, te.compute((M, N), lambda i, j: x[i, j] * 2.0 + 1.0, name="y")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("parallel", [False, True])
def test_streamed_rows_are_right_at_every_alignment(dtype: str, parallel: bool) -> None:
    """Rows of 100 elements start at every alignment a vector can have (400 or 800 bytes apart):
    each row takes the plain head, the aligned streaming body and the plain tail."""
    _, y = _scaled(17, 100, dtype)
    s = Schedule(y)
    s.vectorize("y", "j")
    if parallel:
        s.parallel("y", "i")
    s.stream("y")
    src = generate_source(s)
    assert "stream_row(y, (i, 0,), y_row, 100, " in src and src.rstrip().endswith("stream_fence()"), src
    k = build(s, threads=2 if parallel else 1)
    x = np.random.default_rng(0).standard_normal((17, 100)).astype(dtype)
    assert_close(k(x), x * 2 + 1, dtype)
    for offset in range(1, 9):  # an out= array whose start is off the vector alignment by `offset` elements
        out = np.full(17 * 100 + offset, -7.0, dtype)[offset:].reshape(17, 100)
        k(x, out=out)
        assert_close(out, x * 2 + 1, dtype)


def test_a_row_loop_fused_with_its_sibling_streams_its_output_store_only() -> None:
    """e is computed per row at y's loop and y reads it in the same iteration: the two loops fuse
    into one with two stores, and only y's goes through the row buffer."""
    x = te.placeholder((6, 96), name="x")
    e = te.compute((6, 96), lambda i, j: x[i, j] * 2.0, name="e")
    y = te.compute((6, 96), lambda i, j: e[i, j] + 1.0, name="y")
    s = Schedule(y)
    s.compute_at("e", "y", "i")
    s.vectorize("e", "j")
    s.vectorize("y", "j")
    s.stream("y")
    src = generate_source(s)
    assert len(re.findall(r"^\s*for j", src, re.M)) == 1 and "y_row[j] = e_local[0, j] + _f32_1" in src, src
    xv = np.random.default_rng(2).standard_normal((6, 96)).astype(np.float32)
    assert_close(build(s)(xv), xv * 2 + 1, "float32")


def test_a_template_with_stream_matches_its_reference() -> None:
    rng = np.random.default_rng(1)
    for op in ("softmax", "layernorm"):
        t = Task.create(op, {"M": 33, "N": 200}, "float32", threads=2)
        assert t.space().by_name["stream"].values() == [False, True]
        ins = [rng.standard_normal(a.shape).astype(np.float32) for a in t.arguments()]
        k = t.build({"rows": 4, "attach": "block", "parallel": True, "stream": True})
        assert_close(k(*ins), t.reference(ins), "float32", reduction=200)


def test_rows_longer_than_the_local_buffer_are_not_offered() -> None:
    assert Task.create("softmax", {"M": 8, "N": 8192}, "float32").space().by_name["stream"].values() == [False]
    assert Task.create("layernorm", {"M": 8, "N": 4096}, "float32").space().by_name["stream"].values() == [False, True]


def test_the_stores_are_non_temporal() -> None:
    @numba.njit
    def copy_rows(x, y):  # type: ignore[no-untyped-def]
        row = numba.carray(stack_empty(256, np.float32), (256,))
        for i in range(x.shape[0]):
            for j in range(256):
                row[j] = x[i, j]
            stream_row(y, (i, 0), row, 256, 32)
        stream_fence()

    x = np.arange(4 * 256, dtype=np.float32).reshape(4, 256)
    y = np.zeros_like(x)
    copy_rows(x, y)
    np.testing.assert_array_equal(y, x)
    sig = copy_rows.signatures[0]
    assert "!nontemporal" in copy_rows.inspect_llvm(sig)
    if platform.machine() in ("x86_64", "AMD64"):
        asm = copy_rows.inspect_asm(sig)
        assert re.search(r"movntp[sd]", asm) and "sfence" in asm


def test_stream_is_for_the_output_stage_once() -> None:
    x = te.placeholder((8, 64), name="x")
    e = te.compute((8, 64), lambda i, j: x[i, j] + 1.0, name="e")
    y = te.compute((8, 64), lambda i, j: e[i, j] * 2.0, name="y")
    s = Schedule(y)
    with pytest.raises(ScheduleError, match="only the output stage 'y' can be streamed"):
        s.stream("e")
    s.stream("y")
    with pytest.raises(ScheduleError, match="streamed already"):
        s.stream("y")


@pytest.mark.parametrize("case", ["column innermost", "row too long"])
def test_a_schedule_with_no_row_to_stream_is_refused(case: str) -> None:
    _, y = _scaled(8, 64) if case == "column innermost" else _scaled(2, 8192)
    s = Schedule(y)
    if case == "column innermost":
        s.reorder("y", "j", "i")
    s.stream("y")
    with pytest.raises(ScheduleError, match="no innermost loop stores a contiguous row of y"):
        generate_source(s)
