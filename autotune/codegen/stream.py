"""Rows of a streamed output (schedule step `stream`) stored around the caches.

A store to memory first reads the line it writes into the cache (read for ownership): a kernel
that writes an output far larger than the caches moves its bytes twice. Non-temporal stores write
whole lines straight to memory. Numba has no vector type to print them with, so an innermost loop
that stores one contiguous row of a streamed buffer computes the row into a small local buffer
(in L1) and `stream_row` (autotune.codegen.runtime) copies it out: plain stores up to the first
address aligned to a vector, then aligned non-temporal vector stores, plain stores for the rest.
The kernel ends with a fence, so its stores are visible before a thread team reports it done.

    >>> from autotune.ir import te
    >>> from autotune.schedule import Schedule
    >>> from autotune.codegen.source import generate_source
    >>> x = te.placeholder((4, 64), name="x")
    >>> y = te.compute((4, 64), lambda i, j: x[i, j] * 2.0, name="y")
    >>> s = Schedule(y); s.vectorize("y", "j"); s.stream("y")
    >>> print(generate_source(s).split("def kernel")[1].strip())  # doctest: +ELLIPSIS
    (x, y):
        y_row = numba.carray(stack_empty(64, np.float32), (64,))
        for i in range(4):
            for j in range(64):  # vectorize
                y_row[j] = x[i, j] * _f32_2
            stream_row(y, (i, 0,), y_row, 64, ...)
        stream_fence()
"""
from __future__ import annotations

import dataclasses

from autotune.dtypes import ITEMSIZE
from autotune.errors import ScheduleError
from autotune.ir import expr as te
from autotune.ir.affine import to_affine
from autotune.ir.expr import Const, Tensor, Var
from autotune.ir.stmt import For, Function, LocalBuffer, Seq, Stmt, Store, StreamRow, map_loops

MIN_ROW_BYTES = 64        # a row shorter than a cache line has nothing to stream
MAX_ROW_BYTES = 16 << 10  # a row's local buffer is on the stack: at most 16 KiB


def streamable_row(row_bytes: int) -> bool:
    """Whether an output row of row_bytes is worth offering to `stream`: a cache line or more,
    and within the local buffer's limit."""
    return MIN_ROW_BYTES <= row_bytes <= MAX_ROW_BYTES


def worth_streaming(out_bytes: int, l3_bytes: int) -> bool:
    """Whether an output of out_bytes is better streamed by default, on a machine with an L3 of
    l3_bytes: from half the L3 on (softmax and layernorm, measure/experiments/RESULTS.md: a config
    streaming took 5-21% less time with a 16 MiB output and a 32 MiB L3, and 14% more with 8 MiB)."""
    return 2 * out_bytes >= l3_bytes


def _row_store(loop: For, streamed: tuple[Tensor, ...]) -> int | None:
    """Which statement of the loop's body stores a contiguous row of a streamed buffer, if one does:
    the body is stores only (a loop fused with its sibling has several), exactly one of them to a
    streamed buffer, its last index counting up with the loop and the others not moving with it,
    and no statement reads that buffer."""
    body = loop.body.stmts if isinstance(loop.body, Seq) else (loop.body,)
    if (loop.kind not in ("serial", "vectorize") or not isinstance(loop.extent, Const)
            or not all(isinstance(st, Store) for st in body)):
        return None
    hits = [k for k, st in enumerate(body) if st.buffer in streamed]  # type: ignore[union-attr]
    if len(hits) != 1:
        return None
    st = body[hits[0]]
    assert isinstance(st, Store)
    if loop.extent.value * ITEMSIZE[st.buffer.dtype] > MAX_ROW_BYTES:
        return None
    last = to_affine(st.indices[-1])
    if last is None or last.terms.get(loop.var) != 1:
        return None
    if any(n is loop.var for i in st.indices[:-1] for n in te.walk(i) if isinstance(n, Var)):
        return None
    if any(ld.tensor is st.buffer for x in body for ld in te.loads(x.value)):  # type: ignore[union-attr]
        return None
    return hits[0]


def stream_rows(fn: Function, vector_bytes: int) -> Function:
    """fn with the row stores of its streamed buffers rewritten (module docstring); fn itself when
    nothing is streamed. A streamed buffer with no such row raises ScheduleError."""
    if not fn.streamed:
        return fn
    rows: list[LocalBuffer] = []

    def visit(s: For) -> Stmt | None:
        hit = _row_store(s, fn.streamed)
        if hit is None:
            return None
        body = list(s.body.stmts) if isinstance(s.body, Seq) else [s.body]
        st = body[hit]
        assert isinstance(st, Store)
        n = s.extent.value  # type: ignore[attr-defined]
        row = te.placeholder((n,), st.buffer.dtype, name=f"{st.buffer.name}_row")
        rows.append(LocalBuffer(row, "stack"))
        body[hit] = Store(row, (s.var,), st.value)
        start = tuple(te.substitute(i, {s.var: Const(0)}) for i in st.indices)
        return Seq((For(s.var, s.extent, s.kind, Seq(tuple(body)) if len(body) > 1 else body[0]),
                    StreamRow(st.buffer, start, row, n, vector_bytes)))

    body = map_loops(fn.body, visit)
    if not rows:
        names = ", ".join(t.name for t in fn.streamed)
        raise ScheduleError("stream", None, f"no innermost loop stores a contiguous row of {names} (of at most "
                                            f"{MAX_ROW_BYTES >> 10} KiB): stream needs the row's loop innermost, over the last axis")
    return dataclasses.replace(fn, body=body, locals=fn.locals + tuple(rows))
