"""Affine index arithmetic: normal forms, intervals, and div/mod simplification under ranges.

Index expressions built by split, fuse and pack are sums of loop variables times constants,
divided or taken modulo a constant. Knowing each loop variable's range lets us rewrite
``(8*jo + jm) // 8`` into ``jo`` and ``(8*jo + jm) % 8`` into ``jm``.

Example::

    >>> from autotune.ir import expr as te
    >>> from autotune.ir.affine import simplify
    >>> jo, jm = te.Var("jo"), te.Var("jm")
    >>> e = simplify((jo * 8 + jm) // 8, {jm: (0, 7), jo: (0, 3)})
    >>> e is jo
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autotune.ir.expr import CMP_OPS, BinOp, Call, Cmp, Const, Expr, Select, Var, children, rebuild

Ranges = dict[Var, tuple[int, int]]  # inclusive bounds


@dataclass
class Affine:
    """const + sum(coef * var)."""
    terms: dict[Var, int] = field(default_factory=dict)
    const: int = 0

    def __add__(self, o: "Affine") -> "Affine":
        t = dict(self.terms)
        for v, c in o.terms.items():
            t[v] = t.get(v, 0) + c
        return Affine({v: c for v, c in t.items() if c != 0}, self.const + o.const)

    def scale(self, k: int) -> "Affine":
        if k == 0:
            return Affine()
        return Affine({v: c * k for v, c in self.terms.items()}, self.const * k)

    def interval(self, ranges: Ranges) -> tuple[int, int] | None:
        lo = hi = self.const
        for v, c in self.terms.items():
            if v not in ranges:
                return None
            a, b = ranges[v]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi

    def split(self, inner: set[Var]) -> tuple["Affine", "Affine"]:
        """(outer part with the constant, inner part) by variable membership."""
        o = Affine({v: c for v, c in self.terms.items() if v not in inner}, self.const)
        i = Affine({v: c for v, c in self.terms.items() if v in inner}, 0)
        return o, i

    def first_gap(self, ranges: Ranges) -> tuple[Var, int] | None:
        """The first term that steps past the values the smaller terms fill, as (variable, step),
        or None when the form takes every integer between its least and greatest value.

        >>> i, j = Var("i"), Var("j")
        >>> Affine({i: 2, j: 1}).first_gap({i: (0, 4), j: (0, 0)})
        (Var(name='i', dtype='int64'), 2)
        """
        reach = 0
        for v, c in sorted(((v, abs(c)) for v, c in self.terms.items()), key=lambda t: t[1]):
            a, b = ranges[v]
            if b == a:
                continue
            if c > reach + 1:
                return v, c
            reach += c * (b - a)
        return None

    def same_terms(self, o: "Affine") -> bool:
        return self.terms.keys() == o.terms.keys() and all(self.terms[v] == o.terms[v] for v in self.terms)


def to_affine(e: Expr) -> Affine | None:
    """The affine normal form of an integer expression, or None if it is not affine."""
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return Affine({}, e.value)
    if isinstance(e, Var):
        return Affine({e: 1}, 0)
    if isinstance(e, BinOp) and e.op in "+-*":
        a, b = to_affine(e.a), to_affine(e.b)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a + b.scale(-1)
        if not a.terms:
            return b.scale(a.const)
        if not b.terms:
            return a.scale(b.const)
        return None
    if isinstance(e, Call) and e.func == "neg":
        a = to_affine(e.args[0])
        return None if a is None else a.scale(-1)
    return None


def from_affine(a: Affine) -> Expr:
    """A readable expression: terms by decreasing coefficient, constant last."""
    out: Expr | None = None
    items = sorted(a.terms.items(), key=lambda vc: (-abs(vc[1]), vc[0].name))
    if items and items[0][1] < 0 and a.const > 0:  # "37 - 42*i" reads better than "0 - 42*i + 37"
        out, a = Const(a.const), Affine(a.terms, 0)
    pos_first = sorted(items, key=lambda vc: vc[1] < 0)
    for v, c in pos_first:
        term: Expr = v if c == 1 else BinOp("*", v, Const(abs(c))) if c != -1 else v
        if out is None:
            out = term if c > 0 else BinOp("-", Const(0), term)
        else:
            out = BinOp("+" if c > 0 else "-", out, term)
    if out is None:
        return Const(a.const)
    if a.const > 0:
        out = BinOp("+", out, Const(a.const))
    elif a.const < 0:
        out = BinOp("-", out, Const(-a.const))
    return out


def _divmod(a: Affine, k: int, ranges: Ranges) -> tuple[Affine, Affine] | None:
    """(a // k, a % k) as affine forms when the ranges allow it."""
    big = Affine({v: c // k for v, c in a.terms.items() if c % k == 0}, a.const - a.const % k)
    small = Affine({v: c for v, c in a.terms.items() if c % k != 0}, a.const % k)
    iv = small.interval(ranges)
    if iv is None or iv[0] < 0:
        return None
    q_lo, q_hi = iv[0] // k, iv[1] // k
    if q_lo != q_hi:
        return None
    quotient = Affine(big.terms, big.const // k + q_lo)
    if q_lo == 0:
        return quotient, small
    return quotient, small + Affine({}, -q_lo * k)


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Fold constants and rewrite affine div/mod using variable ranges; other nodes are kept."""
    ranges = ranges or {}
    kids = children(e)
    if kids:
        new = tuple(simplify(k, ranges) for k in kids)
        if any(x is not y for x, y in zip(new, kids)):
            e = rebuild(e, new)
    if isinstance(e, Cmp) and isinstance(e.a, Const) and isinstance(e.b, Const):
        # constant conditions (a constant matrix indexed by unrolled loops) fold to a bool
        return Const(bool(CMP_OPS[e.op](e.a.value, e.b.value)), "bool")
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.true if e.cond.value else e.false
    if isinstance(e, BinOp):
        if e.op in ("//", "%") and isinstance(e.b, Const) and isinstance(e.b.value, int) and e.b.value > 0:
            a = to_affine(e.a)
            if a is not None:
                dm = _divmod(a, e.b.value, ranges)
                if dm is not None:
                    return from_affine(dm[0] if e.op == "//" else dm[1])
            return e
        if e.op in ("min", "max") and isinstance(e.a, Const) and isinstance(e.b, Const):
            f = min if e.op == "min" else max
            return Const(f(e.a.value, e.b.value), e.a.dtype or e.b.dtype)
        if e.op in ("min", "max"):
            a, b = to_affine(e.a), to_affine(e.b)
            if a is not None and b is not None:
                d = (a + b.scale(-1)).interval(ranges)
                if d is not None:
                    if d[1] <= 0:
                        return e.a if e.op == "min" else e.b
                    if d[0] >= 0:
                        return e.b if e.op == "min" else e.a
            return e
        if e.op in "+-*" and (e.dtype in (None, "int64", "int32")):
            a = to_affine(e)
            if a is not None:
                return from_affine(a)
    return e


def interval(e: Expr, ranges: Ranges) -> tuple[int, int] | None:
    """Inclusive bounds of an integer expression, or None when unknown."""
    if isinstance(e, BinOp) and e.op in ("min", "max"):
        a, b = interval(e.a, ranges), interval(e.b, ranges)
        if a is None or b is None:
            return None
        f = min if e.op == "min" else max
        return f(a[0], b[0]), f(a[1], b[1])
    if isinstance(e, BinOp) and e.op in ("//", "%") and isinstance(e.b, Const) and e.b.value > 0:
        a = interval(e.a, ranges)
        if a is None or a[0] < 0:
            return None
        k = e.b.value
        return (a[0] // k, a[1] // k) if e.op == "//" else (0, min(k - 1, a[1]))
    a = to_affine(e)
    return None if a is None else a.interval(ranges)
