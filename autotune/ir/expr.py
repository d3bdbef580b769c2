"""Tensor expressions, TVM-TE style: placeholders, computes, reductions, elementwise math.

Example::

    >>> from autotune.ir import expr as te
    >>> A = te.placeholder((64, 32), "float32", name="A")
    >>> B = te.placeholder((32, 16), "float32", name="B")
    >>> k = te.reduce_axis(32, name="k")
    >>> C = te.compute((64, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> C.shape
    (64, 16)
"""
from __future__ import annotations

import inspect
import itertools
import operator
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from autotune.dtypes import DTYPES, FLOAT_DTYPES
from autotune.errors import DefinitionError

UNARY_FUNCS = ("exp", "log", "sqrt", "tanh", "abs", "sigmoid", "neg", "pow2")
POW2_EXPONENTS = {"float32": (-126, 127), "float64": (-1022, 1023)}  # the normal exponents
_RANK = {"bool": 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}


def promote(a: str | None, b: str | None) -> str | None:
    """The dtype of a binary op; None means a weakly typed Python literal."""
    if a is None:
        return b
    if b is None:
        return a
    return a if _RANK[a] >= _RANK[b] else b


class Expr:
    """Base of every scalar expression. Arithmetic operators build new expressions."""

    dtype: str | None

    def __add__(self, o: object) -> "Expr": return BinOp("+", self, as_expr(o))
    def __radd__(self, o: object) -> "Expr": return BinOp("+", as_expr(o), self)
    def __sub__(self, o: object) -> "Expr": return BinOp("-", self, as_expr(o))
    def __rsub__(self, o: object) -> "Expr": return BinOp("-", as_expr(o), self)
    def __mul__(self, o: object) -> "Expr": return BinOp("*", self, as_expr(o))
    def __rmul__(self, o: object) -> "Expr": return BinOp("*", as_expr(o), self)
    def __truediv__(self, o: object) -> "Expr": return BinOp("/", self, as_expr(o))
    def __rtruediv__(self, o: object) -> "Expr": return BinOp("/", as_expr(o), self)
    def __floordiv__(self, o: object) -> "Expr": return BinOp("//", self, as_expr(o))
    def __mod__(self, o: object) -> "Expr": return BinOp("%", self, as_expr(o))
    def __neg__(self) -> "Expr": return Call("neg", (self,))
    def __lt__(self, o: object) -> "Expr": return Cmp("<", self, as_expr(o))
    def __le__(self, o: object) -> "Expr": return Cmp("<=", self, as_expr(o))
    def __gt__(self, o: object) -> "Expr": return Cmp(">", self, as_expr(o))
    def __ge__(self, o: object) -> "Expr": return Cmp(">=", self, as_expr(o))
    def __bool__(self) -> bool:
        raise DefinitionError("an expression has no truth value; use te.select(cond, a, b) instead of if/and/or")


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: int | float | bool
    dtype: str | None = None  # None: a Python literal that takes the other operand's type


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """An integer index variable (loop variable). Compared by identity."""
    name: str
    dtype: str | None = "int64"


@dataclass(frozen=True, eq=False)
class IterVar:
    """A named axis of a compute: a Var with a constant extent, spatial or reduce."""
    var: Var
    extent: int
    kind: str  # "spatial" | "reduce"

    @property
    def name(self) -> str:
        return self.var.name

    # an IterVar used inside an expression stands for its variable
    def __add__(self, o: object) -> Expr: return self.var + o
    def __radd__(self, o: object) -> Expr: return as_expr(o) + self.var
    def __sub__(self, o: object) -> Expr: return self.var - o
    def __rsub__(self, o: object) -> Expr: return as_expr(o) - self.var
    def __mul__(self, o: object) -> Expr: return self.var * o
    def __rmul__(self, o: object) -> Expr: return as_expr(o) * self.var
    def __floordiv__(self, o: object) -> Expr: return self.var // o
    def __mod__(self, o: object) -> Expr: return self.var % o
    def __lt__(self, o: object) -> Expr: return self.var < o
    def __le__(self, o: object) -> Expr: return self.var <= o
    def __gt__(self, o: object) -> Expr: return self.var > o
    def __ge__(self, o: object) -> Expr: return self.var >= o


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str  # + - * / // % min max and or
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str | None:  # type: ignore[override]
        if self.op == "/":
            d = promote(self.a.dtype, self.b.dtype)
            return d if d in FLOAT_DTYPES else "float64"
        if self.op in ("and", "or"):
            return "bool"
        return promote(self.a.dtype, self.b.dtype)


# a comparison's operator: on Python numbers (constant folding) and on NumPy arrays elementwise
CMP_OPS: dict[str, Callable] = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
                                "==": operator.eq, "!=": operator.ne}


@dataclass(frozen=True, eq=False)
class Cmp(Expr):
    op: str  # a key of CMP_OPS
    a: Expr
    b: Expr
    dtype: str | None = "bool"


@dataclass(frozen=True, eq=False)
class Call(Expr):
    func: str
    args: tuple[Expr, ...]

    @property
    def dtype(self) -> str | None:  # type: ignore[override]
        d = self.args[0].dtype
        if self.func in ("exp", "log", "sqrt", "tanh", "sigmoid", "pow2") and d not in FLOAT_DTYPES:
            return "float64"
        return d


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    true: Expr
    false: Expr

    @property
    def dtype(self) -> str | None:  # type: ignore[override]
        return promote(self.true.dtype, self.false.dtype)


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    dtype: str | None
    x: Expr


@dataclass(frozen=True, eq=False)
class Load(Expr):
    tensor: "Tensor"
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str | None:  # type: ignore[override]
        return self.tensor.dtype


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """A reduction over reduce axes. Allowed only as the whole body of a compute."""
    op: str  # sum | max | min
    body: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> str | None:  # type: ignore[override]
        return self.body.dtype


@dataclass(frozen=True, eq=False)
class Tensor:
    """A placeholder (input) or the output of a compute. Index it to read an element."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    axes: tuple[IterVar, ...] = ()      # spatial axes of a compute; () for a placeholder
    body: Expr | None = None            # None for a placeholder

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx: object) -> Load:
        items = idx if isinstance(idx, tuple) else (idx,)
        if len(items) != len(self.shape):
            raise DefinitionError(f"tensor {self.name!r} has {len(self.shape)} dimensions, indexed with {len(items)}")
        return Load(self, tuple(as_expr(i) for i in items))

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self.shape}, dtype={self.dtype!r})"


def as_expr(x: object) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, bool):
        return Const(x, "bool")
    if isinstance(x, (int, float)):
        return Const(x, None)
    try:  # numpy scalars
        import numpy as np
        if isinstance(x, np.generic):
            return Const(x.item(), None)
    except ImportError:  # pragma: no cover
        pass
    raise DefinitionError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError) as e:
        raise DefinitionError(f"{what}: shape must be a sequence of positive integers, got {shape!r}") from e
    if not out or any(s <= 0 or s != t or isinstance(t, bool) for s, t in zip(out, shape)):
        raise DefinitionError(f"{what}: shape must be a non-empty sequence of positive integers, got {tuple(shape)!r}")
    return out


def _check_dtype(dtype: str, what: str) -> str:
    dtype = str(dtype)
    if dtype not in DTYPES:
        raise DefinitionError(f"{what}: dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return dtype


_counter = itertools.count()


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"


def placeholder(shape: Sequence[int], dtype: str = "float32", *, name: str | None = None) -> Tensor:
    """An input tensor of the computation."""
    name = name or _fresh("in")
    return Tensor(name, _check_shape(shape, f"placeholder {name!r}"), _check_dtype(dtype, f"placeholder {name!r}"))


def reduce_axis(extent: int, *, name: str | None = None) -> IterVar:
    """A reduction axis over range(extent)."""
    name = name or _fresh("r")
    if not isinstance(extent, int) or extent <= 0:
        raise DefinitionError(f"reduce_axis {name!r}: extent must be a positive integer, got {extent!r}")
    return IterVar(Var(name), extent, "reduce")


def _reduce(op: str, expr: object, axis: IterVar | Iterable[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, (IterVar, Expr)) or not isinstance(axis, Iterable) else tuple(axis)
    if not axes or any(not isinstance(a, IterVar) or a.kind != "reduce" for a in axes):
        raise DefinitionError(f"te.{op}: axis must be one or more reduce_axis(...), got {axis!r}")
    return Reduce(op, as_expr(expr), axes)


def sum(expr: object, axis: IterVar | Iterable[IterVar]) -> Reduce:  # noqa: A001 - mirrors te.sum
    """Sum of expr over the reduce axes."""
    return _reduce("sum", expr, axis)


def max_reduce(expr: object, axis: IterVar | Iterable[IterVar]) -> Reduce:
    """Maximum of expr over the reduce axes."""
    return _reduce("max", expr, axis)


def min_reduce(expr: object, axis: IterVar | Iterable[IterVar]) -> Reduce:
    """Minimum of expr over the reduce axes."""
    return _reduce("min", expr, axis)


def _unary(func: str) -> Callable[[object], Expr]:
    def f(x: object) -> Expr:
        return Call(func, (as_expr(x),))
    f.__name__ = func
    f.__doc__ = f"Elementwise {func}."
    return f


exp, log, sqrt, tanh, abs, sigmoid = (_unary(f) for f in ("exp", "log", "sqrt", "tanh", "abs", "sigmoid"))  # noqa: A001


def pow2(n: object) -> Expr:
    """2**n for an integer-valued float n (of n's float type; float64 for an integer n), exactly.

    n is truncated toward zero and clamped to the normal exponents of the type (POW2_EXPONENTS:
    [-126, 127] for float32, [-1022, 1023] for float64), so the result is a normal number, never
    0 or inf. Kernels build it from the float's bits (no call, vectorized)::

        >>> pow2(const(-3.0, "float32")).dtype
        'float32'
    """
    return Call("pow2", (as_expr(n),))


def max(a: object, b: object) -> Expr:  # noqa: A001
    """Elementwise maximum of two expressions."""
    return BinOp("max", as_expr(a), as_expr(b))


def min(a: object, b: object) -> Expr:  # noqa: A001
    """Elementwise minimum of two expressions."""
    return BinOp("min", as_expr(a), as_expr(b))


def select(cond: object, true: object, false: object) -> Expr:
    """cond ? true : false, elementwise."""
    return Select(as_expr(cond), as_expr(true), as_expr(false))


def all_of(*conds: object) -> Expr:
    """Logical and of conditions."""
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = BinOp("and", out, as_expr(c))
    return out


def equal(a: object, b: object) -> Expr:
    return Cmp("==", as_expr(a), as_expr(b))


def cast(dtype: str, x: object) -> Expr:
    """Convert x to dtype."""
    return Cast(_check_dtype(dtype, "cast"), as_expr(x))


def const(value: int | float, dtype: str) -> Const:
    return Const(value, _check_dtype(dtype, "const"))


def compute(shape: Sequence[int], fcompute: Callable[..., object], *, name: str | None = None,
            dtype: str | None = None) -> Tensor:
    """A tensor whose element at each index is fcompute(*index).

    The parameter names of fcompute name the axes (they show up in generated source).
    """
    name = name or _fresh("T")
    shape = _check_shape(shape, f"compute {name!r}")
    try:
        params = list(inspect.signature(fcompute).parameters)
    except (TypeError, ValueError):
        params = []
    if len(params) != len(shape):
        params = [f"ax{i}" for i in range(len(shape))]
    axes = tuple(IterVar(Var(p), s, "spatial") for p, s in zip(params, shape))
    body = as_expr(fcompute(*(a.var for a in axes)))
    _check_reduce_placement(body, name, top=True)
    bound = {a.var for a in axes} | ({a.var for a in body.axes} if isinstance(body, Reduce) else set())
    free = sorted({v.name for v in walk(body) if isinstance(v, Var) and v not in bound})
    if free:
        raise DefinitionError(f"compute {name!r}: the body uses {free}, which are neither axes of this compute nor "
                              "reduced by its top-level te.sum/max_reduce/min_reduce")
    out_dtype = dtype or body.dtype or "float64"
    if out_dtype == "bool":
        out_dtype = "bool"
    return Tensor(name, shape, _check_dtype(out_dtype, f"compute {name!r}"), axes, body)


def _check_reduce_placement(e: Expr, name: str, top: bool) -> None:
    for child in children(e):
        if isinstance(child, Reduce):
            raise DefinitionError(
                f"compute {name!r}: a reduction must be the whole body of a compute; "
                "put it in its own compute and combine the result in a second compute")
        _check_reduce_placement(child, name, top=False)


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (BinOp, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.true, e.false)
    if isinstance(e, Cast):
        return (e.x,)
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def rebuild(e: Expr, kids: Sequence[Expr]) -> Expr:
    """The same node with new children (in the order children() gives them)."""
    if isinstance(e, BinOp):
        return BinOp(e.op, kids[0], kids[1])
    if isinstance(e, Cmp):
        return Cmp(e.op, kids[0], kids[1])
    if isinstance(e, Call):
        return Call(e.func, tuple(kids))
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2])
    if isinstance(e, Cast):
        return Cast(e.dtype, kids[0])
    if isinstance(e, Load):
        return Load(e.tensor, tuple(kids))
    if isinstance(e, Reduce):
        return Reduce(e.op, kids[0], e.axes)
    return e


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rewrite: fn returns a replacement or None to keep the node (with rewritten children)."""
    kids = children(e)
    if kids:
        new = tuple(transform(k, fn) for k in kids)
        if any(a is not b for a, b in zip(new, kids)):
            e = rebuild(e, new)
    out = fn(e)
    return e if out is None else out


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions."""
    return transform(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def walk(e: Expr) -> Iterable[Expr]:
    yield e
    for k in children(e):
        yield from walk(k)


def loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load)]


def input_tensors(out: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """Every tensor reachable from the outputs, producers before consumers (a topological order)."""
    outs = [out] if isinstance(out, Tensor) else list(out)
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        if t.body is not None:
            for ld in loads(t.body):
                visit(ld.tensor)
        order.append(t)

    for t in outs:
        visit(t)
    return order
