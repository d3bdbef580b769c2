"""Whether a lowered program's output shows every NaN or Inf of its inputs.

A float computed only by `+`, `-` and `*` is NaN or ±Inf whenever one of its operands is (NaN
stays NaN, Inf plus or times anything is Inf or NaN, Inf - Inf and 0 * Inf are NaN), as long as
the compiler neither drops nor folds an operation, which LLVM may do under the nnan, ninf and
reassoc fast-math flags only. So when every float a program computes is made that way from loads
and constants (a select between floats on index conditions only: the padding of a convolution),
each output is non-finite wherever a value it was computed from is, and a kernel compiled without
those three flags needs no look at its inputs: one look at its output after the run tells whether
anything it read was NaN or Inf (or whether it overflowed). A max, a division, a comparison of
values or a function (exp, tanh) can hide a NaN or Inf, and its program keeps the inputs' check.

    >>> from autotune.ir import expr as te
    >>> A = te.placeholder((4,), "float32", name="A"); i = te.Var("i")
    >>> shows_nonfinite_expr(A[i] * 2.0 - A[i]), shows_nonfinite_expr(te.max(A[i], 0.0))
    (True, False)
"""
from __future__ import annotations

from autotune.dtypes import FLOAT_DTYPES
from autotune.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Var, children, walk
from autotune.ir.stmt import Comment, For, Function, If, LoopNest, Seq, Stmt, Store, StreamRow

_PROPAGATING = ("+", "-", "*")


def _is_float(e: Expr) -> bool:
    return e.dtype in FLOAT_DTYPES


def _index_only(e: Expr) -> bool:
    """No float anywhere in e: an index or a condition on indices (int tensors' loads included)."""
    return not any(_is_float(n) for n in walk(e))


def shows_nonfinite_expr(e: Expr) -> bool:
    """Whether e is NaN or ±Inf wherever one of the floats it reads is (see the module docstring)."""
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, Load):
        return all(_index_only(i) for i in e.indices)
    if not _is_float(e):
        return _index_only(e)
    if isinstance(e, BinOp):
        return e.op in _PROPAGATING and all(shows_nonfinite_expr(k) for k in children(e))
    if isinstance(e, Call):
        return e.func == "neg" and shows_nonfinite_expr(e.args[0])
    if isinstance(e, Cast):  # to a float: from a float (Inf and NaN kept) or from an index
        return shows_nonfinite_expr(e.x)
    if isinstance(e, Select):
        return _index_only(e.cond) and shows_nonfinite_expr(e.true) and shows_nonfinite_expr(e.false)
    return False  # Cmp of floats is not float-typed; anything else (a Reduce: not in a lowered program)


def _stmt(s: Stmt) -> bool:
    if isinstance(s, Store):
        return all(_index_only(i) for i in s.indices) and shows_nonfinite_expr(s.value)
    if isinstance(s, For):
        return _index_only(s.extent) and _stmt(s.body)
    if isinstance(s, Seq):
        return all(_stmt(x) for x in s.stmts)
    if isinstance(s, If):
        return _index_only(s.cond) and _stmt(s.then) and (s.orelse is None or _stmt(s.orelse))
    return isinstance(s, (StreamRow, Comment))  # a copy of a row; a comment


def shows_nonfinite(nest: LoopNest) -> bool:
    """Whether every float of the program (prologue and main) is computed by shows_nonfinite_expr's
    rule, so its output holds NaN or ±Inf wherever a value read for it does, when compiled without
    nnan, ninf and reassoc. matmul, batch_matmul and the convolutions are; a max (relu, pooling), a
    division or exp (softmax, layernorm) is not."""
    fns: list[Function] = [nest.main] + ([nest.prologue] if nest.prologue is not None else [])
    return all(_stmt(f.body) for f in fns)

