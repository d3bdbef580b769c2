"""The loop-nest IR that schedules lower to and the code generator prints.

Statements are frozen values; the same schedule lowers to an equal tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from autotune.ir.expr import Expr, Tensor, Var

LOOP_KINDS = ("serial", "parallel", "unroll", "vectorize")


class Stmt:
    """Base of loop-nest statements."""


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """for var in range(extent): body. A parallel loop ranges over the caller's [lo, hi) chunk."""
    var: Var
    extent: Expr
    kind: str
    body: Stmt


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Tensor
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, eq=False)
class StreamRow(Stmt):
    """Copy `extent` elements of the local row `src` to `buffer` from `indices` on (its last index
    counting up) with non-temporal stores, aligned ones of `vector_bytes` each where they fit."""
    buffer: Tensor
    indices: tuple[Expr, ...]
    src: Tensor
    extent: int
    vector_bytes: int


@dataclass(frozen=True, eq=False)
class PrefetchRow(Stmt):
    """Fetch `extent` elements of `tensor` from `indices` on (its last index counting up) into the
    cache, one software prefetch per `line_bytes`: a hint that never faults and changes no value."""
    tensor: Tensor
    indices: tuple[Expr, ...]
    extent: int
    line_bytes: int


@dataclass(frozen=True, eq=False)
class Comment(Stmt):
    text: str


def seq(*stmts: Stmt | None) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """s and every statement inside it, in program order (a loop or a branch before its body)."""
    yield s
    if isinstance(s, For):
        yield from walk_stmts(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmts(x)
    elif isinstance(s, If):
        yield from walk_stmts(s.then)
        if s.orelse is not None:
            yield from walk_stmts(s.orelse)


def map_loops(s: Stmt, fn: Callable[[For], Stmt | None]) -> Stmt:
    """s with every loop fn rewrites replaced by fn's result (not visited further); the loops fn
    leaves (None), sequences and branches rebuilt around their rewritten insides."""
    if isinstance(s, For):
        out = fn(s)
        return out if out is not None else For(s.var, s.extent, s.kind, map_loops(s.body, fn))
    if isinstance(s, Seq):
        return Seq(tuple(map_loops(x, fn) for x in s.stmts))
    if isinstance(s, If):
        return If(s.cond, map_loops(s.then, fn), map_loops(s.orelse, fn) if s.orelse is not None else None)
    return s


@dataclass(frozen=True, eq=False)
class LocalBuffer:
    """A buffer private to one kernel call: on the stack (small, fixed) or the heap."""
    tensor: Tensor
    scope: str  # "stack" | "heap"


@dataclass(frozen=True, eq=False)
class Function:
    """One compiled function: arguments, local buffers declared at its top, and a body."""
    name: str
    args: tuple[Tensor, ...]
    locals: tuple[LocalBuffer, ...]
    body: Stmt
    parallel_extent: int | None = None  # set when the outermost loop is split over threads
    streamed: tuple[Tensor, ...] = ()  # buffers whose rows are stored around the caches (steps.Stream)
    prefetched: tuple[tuple[Var, Tensor, int], ...] = ()  # (loop, input, rows ahead) (steps.Prefetch)


@dataclass(frozen=True, eq=False)
class LoopNest:
    """A lowered program: an optional serial prologue and the main function.

    inputs and output are the user-visible tensors; intermediates are global buffers the
    caller allocates (root stages other than the output).
    """
    inputs: tuple[Tensor, ...]
    output: Tensor
    intermediates: tuple[Tensor, ...]
    prologue: Function | None
    main: Function
