"""Walking a lowered loop nest: the loops around each store, loop extents, the distinct elements
an access touches and its innermost stride. Shared by the feature vector (features.py) and the
program graph (graph.py).

Example::

    >>> from autotune.ir.expr import Const
    >>> extent(Const(8, "int64"))
    8
"""
from __future__ import annotations

from dataclasses import dataclass

from autotune.ir.affine import to_affine
from autotune.ir import expr as te
from autotune.ir.expr import BinOp, Call, Const, Expr, Tensor, Var
from autotune.ir.stmt import For, If, Seq, Stmt, Store


@dataclass
class Loop:
    """A loop around a statement: its variable, constant extent (see `extent`) and kind."""
    var: Var
    extent: int
    kind: str


def extent(e: Expr) -> int:
    """The trip count of a loop extent: the constant, or the constant side of a min (a tail loop's
    full-tile bound); 1 when neither is constant."""
    if isinstance(e, Const):
        return max(int(e.value), 0)
    if isinstance(e, BinOp) and e.op == "min":
        for side in (e.a, e.b):
            if isinstance(side, Const):
                return max(int(side.value), 0)
    return 1


def flops(e: Expr) -> int:
    """Floating-point operations of one evaluation of an expression (a math call counts 4)."""
    n = 0
    for x in te.walk(e):
        if isinstance(x, BinOp) and x.op in ("+", "-", "*", "/", "min", "max") and x.dtype in ("float32", "float64"):
            n += 1
        elif isinstance(x, Call):
            n += 1 if x.func == "pow2" else 4  # pow2: a few integer vector operations
    return n


def stores(stmt: Stmt) -> list[tuple[list[Loop], Store]]:
    """Every store of a statement with the loops around it (outermost first). Of an If, only the
    then-branch counts: the full-tile branch of a versioned loop is the hot one."""
    out: list[tuple[list[Loop], Store]] = []
    _collect(stmt, [], out)
    return out


def _collect(stmt: Stmt, stack: list[Loop], out: list[tuple[list[Loop], Store]]) -> None:
    if isinstance(stmt, For):
        stack.append(Loop(stmt.var, extent(stmt.extent), stmt.kind))
        _collect(stmt.body, stack, out)
        stack.pop()
    elif isinstance(stmt, Seq):
        for s in stmt.stmts:
            _collect(s, stack, out)
    elif isinstance(stmt, If):
        _collect(stmt.then, stack, out)
    elif isinstance(stmt, Store):
        out.append((list(stack), stmt))


def touched(buf: Tensor, idx: tuple[Expr, ...], inner: list[Loop]) -> int:
    """Distinct elements of buf read or written while the inner loops run (an upper bound)."""
    ranges = {lp.var: (0, max(lp.extent - 1, 0)) for lp in inner}
    total = 1
    for d, ix in enumerate(idx):
        a = to_affine(ix)
        if a is None:
            span = buf.shape[d]
        else:
            a = type(a)({v: c for v, c in a.terms.items() if v in ranges}, 0)
            lo, hi = a.interval(ranges) or (0, buf.shape[d] - 1)
            span = min(hi - lo + 1, buf.shape[d])
        total *= max(span, 1)
    return total


def stride(buf: Tensor, idx: tuple[Expr, ...], innermost: Var | None) -> int:
    """Elements of buf between consecutive iterations of the innermost loop (0: none, or no loop)."""
    if innermost is None:
        return 0
    s, acc = 0, 1
    for d in reversed(range(len(idx))):
        a = to_affine(idx[d])
        c = a.terms.get(innermost, 0) if a is not None else 1
        s += c * acc
        acc *= buf.shape[d]
    return abs(s)
