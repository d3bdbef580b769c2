"""Input rows prefetched ahead of a row loop (schedule step `prefetch`, autotune.codegen.prefetch):
the prefetch sits right after the loop body's first read of the input, reaches LLVM as
llvm.prefetch, changes no value (rows near the end clamp to the last row), and schedules it cannot
serve are refused with a clear error."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.errors import ScheduleError
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.task import Task
from tests.helpers import assert_close


def _centered(M: int, N: int) -> tuple[te.Tensor, te.Tensor]:
    """y = x - the row mean: a row loop whose body reads x twice (the sum, then y)."""
    x = te.placeholder((M, N), name="x")
    k = te.reduce_axis(N, name="k")
    s = te.compute((M,), lambda i: te.sum(x[i, k], axis=k), name="s")
    return x, te.compute((M, N), lambda i, j: x[i, j] - s[i] * (1.0 / N), name="y")


@pytest.mark.parametrize("parallel", [False, True])
def test_the_row_ahead_is_prefetched_after_the_first_read_and_values_stay(parallel: bool) -> None:
    x, y = _centered(13, 100)
    s = Schedule(y)
    s.split("y", "i", 4, "io", "ii")
    s.compute_at("s", "y", "ii")
    s.vectorize("y", "j")
    if parallel:
        s.parallel("y", "io")
    s.prefetch("y", "ii", "x", 3)
    src = generate_source(s)
    body = src.split("def kernel")[1]
    fetch = "prefetch_row(x, (min(io * 4 + ii + 3, 12), 0,), 100, 64)"  # the sum's first row, 3 ahead
    assert fetch in body, src
    assert body.index("s_local[i] += x[") < body.index(fetch) < body.index("y[io * 4 + ii, j] ="), src
    k = build(s, threads=2 if parallel else 1)
    assert "@llvm.prefetch" in "".join(k.main.inspect_llvm().values())
    xv = np.random.default_rng(0).standard_normal((13, 100)).astype(np.float32)
    assert_close(k(xv), xv - xv.mean(axis=1, keepdims=True), "float32")


def test_layernorm_and_softmax_configs_that_prefetch_are_right() -> None:
    """Every config of the space prints (blocks of one row prefetch in io, there is no ii; attach
    'block' is pruned); a few of them, rows of blocks that do not divide M, compute the right values."""
    for op in ("layernorm", "softmax"):
        t = Task.create(op, "37x200", threads=2)
        assert t.space().by_name["prefetch"].values() == [0, 2, 4]
        for cfg in t.space().grid():
            assert ("prefetch_row(x, " in t.source(cfg)) == (cfg["prefetch"] > 0), cfg
        assert not t.space().allows({**dict(t.default_config()), "attach": "block", "prefetch": 2})
        for rows, ahead in ((1, 2), (8, 4)):
            cfg = {**dict(t.default_config()), "rows": rows, "prefetch": ahead, "stream": False}
            t.verify(t.build(cfg))


def test_schedules_prefetch_cannot_serve_are_refused() -> None:
    x, y = _centered(8, 64)
    s = Schedule(y)
    s.compute_at("s", "y", "i")
    with pytest.raises(ScheduleError, match="only the output stage 'y' prefetches"):
        s.prefetch("s", "i", "x", 2)
    with pytest.raises(ScheduleError, match="needs an input of 2 or more dimensions"):
        s.prefetch("y", "i", "s", 2)
    with pytest.raises(ScheduleError, match="has no loop 'q'"):
        s.prefetch("y", "q", "x", 2)
    s.prefetch("y", "i", "x", 2)
    with pytest.raises(ScheduleError, match="prefetches already"):
        s.prefetch("y", "i", "x", 4)
    s1 = Schedule(y)
    s1.prefetch("y", "i", "x", 2)
    with pytest.raises(ScheduleError, match="split before prefetch"):
        s1.split("y", "i", 2)
    xr = te.placeholder((8, 64), name="xr")  # read only by a stage computed before the row loop
    k = te.reduce_axis(64, name="k")
    sr = te.compute((8,), lambda i: te.sum(xr[i, k], axis=k), name="sr")
    v = te.compute((8, 64), lambda i, j: sr[i] * 2.0, name="v")
    s2 = Schedule(v)
    s2.prefetch("v", "i", "xr", 1)
    with pytest.raises(ScheduleError, match="loop 'i' does not read 'xr'"):
        generate_source(s2)
