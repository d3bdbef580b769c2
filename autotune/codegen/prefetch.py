"""Rows of an input prefetched ahead of a row loop (schedule step `prefetch`).

A row-wise kernel (layernorm, softmax) reads each row from memory in its first pass and computes
from the cache in the others: while it computes, the memory is idle, and the hardware prefetchers,
which follow demand misses, are idle too. `prefetch` puts a software prefetch of every cache line
of the row `rows` ahead right after the row loop body's first read of the input, so that row's
traffic overlaps the later passes (measure/experiments/RESULTS.md, "Prefetching the next rows").

    >>> from autotune.ir import te
    >>> from autotune.schedule import Schedule
    >>> from autotune.codegen.source import generate_source
    >>> x = te.placeholder((8, 64), name="x")
    >>> k = te.reduce_axis(64, name="k")
    >>> s = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name="s")
    >>> y = te.compute((8, 64), lambda i, j: x[i, j] - s[i], name="y")
    >>> sch = Schedule(y); sch.compute_at("s", "y", "i"); sch.prefetch("y", "i", "x", 2)
    >>> print(generate_source(sch).split("def kernel")[1].strip())  # doctest: +ELLIPSIS
    (x, y):
        s_local = ...
        for i in range(8):
            s_local[0] = _f32_0
            for k in range(64):
                s_local[0] += x[i, k]
            prefetch_row(x, (min(i + 2, 7), 0,), 64, 64)
            for j in range(64):
                y[i, j] = x[i, j] - s_local[0]
"""
from __future__ import annotations

import dataclasses

from autotune.errors import ScheduleError
from autotune.ir import expr as te
from autotune.ir.affine import simplify
from autotune.ir.expr import BinOp, Const, Tensor, Var
from autotune.ir.stmt import For, Function, If, PrefetchRow, Seq, Stmt, Store, map_loops, walk_stmts

LINE_BYTES = 64  # the cache line of every CPU autotune targets


def _reads(s: Stmt, t: Tensor) -> list[te.Load]:
    """The loads of t in s (stored values, their indices and branch conditions), in program order."""
    out: list[te.Load] = []
    for x in walk_stmts(s):
        exprs = (*x.indices, x.value) if isinstance(x, Store) else (x.cond,) if isinstance(x, If) else ()
        out += [ld for e in exprs for ld in te.loads(e) if ld.tensor is t]
    return out


def _with_prefetch(loop: For, t: Tensor, rows: int) -> For:
    body = list(loop.body.stmts) if isinstance(loop.body, Seq) else [loop.body]
    for k, st in enumerate(body):
        loads = _reads(st, t)
        if not loads:
            continue
        first = {x.var: Const(0) for x in walk_stmts(st) if isinstance(x, For)}  # the row its first iteration reads
        row = tuple(te.substitute(i, first) for i in loads[0].indices[:-1])
        ahead = simplify(BinOp("min", BinOp("+", row[0], Const(rows)), Const(t.shape[0] - 1)))
        body.insert(k + 1, PrefetchRow(t, (ahead, *row[1:], Const(0)), t.shape[-1], LINE_BYTES))
        return For(loop.var, loop.extent, loop.kind, Seq(tuple(body)))
    raise ScheduleError("prefetch", loop.var.name, f"loop {loop.var.name!r} does not read {t.name!r}")


def prefetch_rows(fn: Function) -> Function:
    """fn with each prefetched loop's row prefetch inserted (module docstring); fn itself when
    nothing is prefetched. A prefetched loop that is gone (unrolled) raises ScheduleError."""
    if not fn.prefetched:
        return fn
    wanted = {v: (t, rows) for v, t, rows in fn.prefetched}
    found: set[Var] = set()

    def visit(loop: For) -> Stmt | None:
        if loop.var not in wanted:
            return None
        found.add(loop.var)
        return _with_prefetch(For(loop.var, loop.extent, loop.kind, map_loops(loop.body, visit)), *wanted[loop.var])

    body = map_loops(fn.body, visit)
    missing = [v.name for v in wanted if v not in found]
    if missing:
        raise ScheduleError("prefetch", missing[0], f"loop {missing[0]!r} is not in the kernel (unrolled?): "
                                                    "prefetch needs it as a loop")
    return dataclasses.replace(fn, body=body)
