"""Compute definitions as data: a closed, versioned JSON form of the tensor-expression IR.

`to_data(out, inputs)` writes a definition (its placeholders in argument order, every compute,
reduce axes and expressions) as plain JSON values; `from_data(data)` rebuilds it. The form is
data, never code: a fixed set of node kinds, operators, functions and dtypes. `from_data` treats
its input as untrusted (it may come from a tuning log): it checks every key, the size, the depth
and every extent, NFKC-normalises identifier names and rejects two that fold to one (a reduce
axis `ｉ` beside a spatial axis `i`), and proves that every read stays inside its tensor before
anything is lowered (see `check_bounds`).

Example::

    >>> from autotune.ir import te
    >>> from autotune.ir.serialize import from_data, to_data
    >>> X = te.placeholder((4, 3), name="X"); W = te.placeholder((3,), name="W")
    >>> j = te.reduce_axis(3, name="j")
    >>> y = te.compute((4,), lambda i: te.sum(X[i, j] * W[j], axis=j), name="y")
    >>> data = to_data(y, [X, W])
    >>> out, inputs = from_data(data)
    >>> out.shape, [t.name for t in inputs]
    ((4,), ['X', 'W'])
"""
from __future__ import annotations

import builtins
import hashlib
import json
import keyword
import math
import unicodedata
from typing import Any, Sequence

from autotune.errors import DefinitionError
from autotune.ir import expr as te
from autotune.ir.affine import interval, to_affine
from autotune.ir.expr import (BinOp, Call, Cast, Cmp, Const, Expr, IterVar, Load, Reduce, Select, Tensor, Var)

FORMAT = "autotune.definition"
VERSION = 1
MAX_BYTES = 1 << 16        # canonical JSON of one definition
MAX_TENSORS = 64
MAX_NODES = 4096           # expression nodes over the whole definition
MAX_DEPTH = 48             # nesting of one expression
MAX_RANK = 8
MAX_NAME = 64
MAX_ELEMENTS = 1 << 28     # elements of one tensor
MAX_WORK = 1 << 40         # output elements x reduction extent of one compute
MAX_INT = 1 << 62

BINOPS = ("+", "-", "*", "/", "//", "%", "min", "max", "and", "or")
CMPOPS = ("<", "<=", ">", ">=", "==", "!=")
REDUCE_OPS = ("sum", "max", "min")
_KINDS = ("const", "var", "bin", "cmp", "call", "select", "cast", "load")
_RESERVED = set(dir(builtins)) | {"np", "numba", "njit", "stack_empty", "pow2", "prologue", "kernel"}


def canonical(data: Any) -> str:
    """The canonical JSON text of a definition (sorted keys, no spaces): what its hash covers."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def content_hash(data: Any) -> str:
    """sha256 (hex) of the canonical JSON: the identity of a definition."""
    return hashlib.sha256(canonical(data).encode()).hexdigest()


# ---- writing ---------------------------------------------------------------------------------

def to_data(out: Tensor, inputs: Sequence[Tensor]) -> dict[str, Any]:
    """The definition computing `out` from the placeholders `inputs` (in argument order) as data."""
    if not isinstance(out, Tensor) or out.is_placeholder:
        raise DefinitionError(f"a definition's output must be the result of te.compute, got {out!r}")
    tensors = te.input_tensors(out)
    for p in inputs:
        if not isinstance(p, Tensor) or not p.is_placeholder:
            raise DefinitionError(f"a definition's inputs must be placeholders, got {p!r}")
    names = {id(p) for p in inputs}
    stray = [t.name for t in tensors if t.is_placeholder and id(t) not in names]
    if stray:
        raise DefinitionError(f"the definition reads {stray}, which are not among its inputs "
                              f"{[p.name for p in inputs]}: make every input a parameter")
    body = [_tensor_data(t) for t in tensors if not t.is_placeholder]
    return {"format": FORMAT, "version": VERSION,
            "inputs": [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype} for p in inputs],
            "computes": body, "output": out.name}


def _tensor_data(t: Tensor) -> dict[str, Any]:
    names: dict[int, str] = {}
    for a in list(t.axes) + list(t.reduce_axes):
        names[id(a.var)] = a.name
    b = t.body
    reduce = None
    if isinstance(b, Reduce):
        reduce = {"op": b.op, "axes": [[a.name, a.extent] for a in b.axes]}
        b = b.body
    assert b is not None
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "axes": [a.name for a in t.axes],
            "reduce": reduce, "body": _expr_data(b, names)}


def _expr_data(e: Expr, names: dict[int, str]) -> Any:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float) and not math.isfinite(v):
            raise DefinitionError(f"a constant must be a finite number, got {v!r}")
        return {"const": v, "dtype": e.dtype}
    if isinstance(e, Var):
        if id(e) not in names:
            raise DefinitionError(f"the variable {e.name!r} is not an axis of its compute")
        return {"var": names[id(e)]}
    if isinstance(e, BinOp):
        return {"bin": e.op, "a": _expr_data(e.a, names), "b": _expr_data(e.b, names)}
    if isinstance(e, Cmp):
        return {"cmp": e.op, "a": _expr_data(e.a, names), "b": _expr_data(e.b, names)}
    if isinstance(e, Call):
        return {"call": e.func, "args": [_expr_data(a, names) for a in e.args]}
    if isinstance(e, Select):
        return {"select": [_expr_data(x, names) for x in (e.cond, e.true, e.false)]}
    if isinstance(e, Cast):
        return {"cast": e.dtype, "x": _expr_data(e.x, names)}
    if isinstance(e, Load):
        return {"load": e.tensor.name, "index": [_expr_data(i, names) for i in e.indices]}
    raise DefinitionError(f"cannot write {type(e).__name__} as data (a reduction must be a compute's whole body)")


# ---- reading (untrusted) -----------------------------------------------------------------------

class _Reader:
    def __init__(self) -> None:
        self.nodes = 0
        self.folded: dict[str, str] = {}  # normalised tensor name -> as written

    def name(self, raw: object, what: str) -> str:
        if not isinstance(raw, str) or not raw or len(raw) > MAX_NAME:
            raise DefinitionError(f"{what} must be a name of 1 to {MAX_NAME} characters, got {raw!r}")
        n = unicodedata.normalize("NFKC", raw)
        if (not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_") or n in _RESERVED
                or not n.isascii()):
            raise DefinitionError(f"{what} {raw!r} must be an ASCII Python identifier, not a keyword or builtin, "
                                  "not starting with '_'")
        return n

    def tensor_name(self, raw: object, what: str) -> str:
        n = self.name(raw, what)
        if n in self.folded:
            raise DefinitionError(f"{what} {raw!r} and {self.folded[n]!r} are the same name once normalised "
                                  f"({n!r}): give each tensor a distinct name")
        self.folded[n] = str(raw)
        return n


def _obj(d: object, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise DefinitionError(f"{what} must be a JSON object, got {type(d).__name__}")
    extra = set(d) - keys
    missing = keys - set(d)
    if extra or missing:
        raise DefinitionError(f"{what} has unknown keys {sorted(map(str, extra))} or lacks {sorted(missing)}")
    return d


def _int(x: object, what: str, lo: int, hi: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
        raise DefinitionError(f"{what} must be an integer in [{lo}, {hi}], got {x!r}")
    return x


def _shape(x: object, what: str) -> tuple[int, ...]:
    if not isinstance(x, list) or not 1 <= len(x) <= MAX_RANK:
        raise DefinitionError(f"{what}: shape must be a list of 1 to {MAX_RANK} extents, got {x!r}")
    shape = tuple(_int(s, f"{what}: extent", 1, MAX_ELEMENTS) for s in x)
    if math.prod(shape) > MAX_ELEMENTS:
        raise DefinitionError(f"{what}: {math.prod(shape)} elements is too many (at most {MAX_ELEMENTS})")
    return shape


def _dtype(x: object, what: str) -> str:
    if x not in te.DTYPES:
        raise DefinitionError(f"{what}: dtype must be one of {', '.join(te.DTYPES)}, got {x!r}")
    return str(x)


def from_data(data: Any) -> tuple[Tensor, list[Tensor]]:
    """The definition data describes: (output tensor, placeholders in argument order).

    Raises DefinitionError (one line) on anything that is not a valid definition of this version,
    and on a read that can leave its tensor (see check_bounds)."""
    if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("version"), int) \
            and data["version"] > VERSION:
        raise DefinitionError(f"definition version {data['version']} is newer than this autotune reads ({VERSION})")
    d = _obj(data, {"format", "version", "inputs", "computes", "output"}, "a definition")
    if d["format"] != FORMAT or d["version"] != VERSION:
        raise DefinitionError(f"not a definition of format {FORMAT!r} version {VERSION}")
    try:
        size = len(canonical(d))
    except (TypeError, ValueError, RecursionError):
        raise DefinitionError("a definition must hold only JSON values, finite numbers, nested at most "
                              f"{MAX_DEPTH} deep") from None
    if size > MAX_BYTES:
        raise DefinitionError(f"a definition of {size} bytes is too large (at most {MAX_BYTES})")
    ins, comps = d["inputs"], d["computes"]
    if not isinstance(ins, list) or not isinstance(comps, list) or not ins or not comps \
            or len(ins) + len(comps) > MAX_TENSORS:
        raise DefinitionError(f"a definition has 1 or more inputs and computes, {MAX_TENSORS} tensors at most")
    r = _Reader()
    tensors: dict[str, Tensor] = {}
    inputs = []
    for i, p in enumerate(ins):
        p = _obj(p, {"name", "shape", "dtype"}, f"input {i}")
        name = r.tensor_name(p["name"], "input name")
        t = Tensor(name, _shape(p["shape"], f"input {name!r}"), _dtype(p["dtype"], f"input {name!r}"))
        tensors[name] = t
        inputs.append(t)
    for c in comps:
        t = _compute(r, c, tensors)
        tensors[t.name] = t
    out_name = d["output"]
    if not isinstance(out_name, str) or unicodedata.normalize("NFKC", out_name) not in tensors \
            or tensors[unicodedata.normalize("NFKC", out_name)].is_placeholder:
        raise DefinitionError(f"the definition's output {out_name!r} is not one of its computes")
    out = tensors[unicodedata.normalize("NFKC", out_name)]
    check_bounds(out)
    return out, inputs


def _compute(r: _Reader, c: object, tensors: dict[str, Tensor]) -> Tensor:
    c = _obj(c, {"name", "shape", "dtype", "axes", "reduce", "body"}, "a compute")
    name = r.tensor_name(c["name"], "compute name")
    shape = _shape(c["shape"], f"compute {name!r}")
    dtype = _dtype(c["dtype"], f"compute {name!r}")
    if not isinstance(c["axes"], list) or len(c["axes"]) != len(shape):
        raise DefinitionError(f"compute {name!r}: axes must name each of its {len(shape)} dimensions")
    scope: dict[str, Var] = {}

    def axis(raw: object, extent: int, kind: str) -> IterVar:
        n = r.name(raw, f"axis of {name!r}")
        if n in scope or n in r.folded:
            raise DefinitionError(f"compute {name!r}: axis {raw!r} is the same name as another axis or tensor once "
                                  f"normalised ({n!r}): give each a distinct name")
        scope[n] = Var(n)
        return IterVar(scope[n], extent, kind)

    axes = tuple(axis(a, s, "spatial") for a, s in zip(c["axes"], shape))
    red = c["reduce"]
    raxes: tuple[IterVar, ...] = ()
    if red is not None:
        red = _obj(red, {"op", "axes"}, f"the reduction of {name!r}")
        if red["op"] not in REDUCE_OPS or not isinstance(red["axes"], list) or not 1 <= len(red["axes"]) <= MAX_RANK:
            raise DefinitionError(f"compute {name!r}: a reduction is one of {REDUCE_OPS} over 1 to {MAX_RANK} axes")
        for a in red["axes"]:
            if not isinstance(a, list) or len(a) != 2:
                raise DefinitionError(f"compute {name!r}: a reduce axis is [name, extent], got {a!r}")
        raxes = tuple(axis(a, _int(e, f"compute {name!r}: reduce extent", 1, MAX_ELEMENTS), "reduce")
                      for a, e in red["axes"])
    work = math.prod(shape) * math.prod(a.extent for a in raxes)
    if work > MAX_WORK:
        raise DefinitionError(f"compute {name!r}: {work} steps is too much work (at most {MAX_WORK})")
    body = _expr(r, c["body"], scope, tensors, name, 0)
    if isinstance(body, Reduce):
        raise DefinitionError(f"compute {name!r}: a reduction must be the whole body of a compute")
    if red is not None:
        body = Reduce(red["op"], body, raxes)
    return Tensor(name, shape, dtype, axes, body)


def _expr(r: _Reader, e: object, scope: dict[str, Var], tensors: dict[str, Tensor], where: str, depth: int) -> Expr:
    r.nodes += 1
    if r.nodes > MAX_NODES or depth > MAX_DEPTH:
        raise DefinitionError(f"compute {where!r}: the definition has more than {MAX_NODES} expression nodes "
                              f"or nests deeper than {MAX_DEPTH}")
    if not isinstance(e, dict) or not e:
        raise DefinitionError(f"compute {where!r}: an expression must be a JSON object, got {e!r}"[:200])
    kind = next((k for k in _KINDS if k in e), None)

    def sub(x: object) -> Expr:
        return _expr(r, x, scope, tensors, where, depth + 1)

    if kind == "const":
        _obj(e, {"const", "dtype"}, "a constant")
        v, dt = e["const"], e["dtype"]
        if not (isinstance(v, bool) or isinstance(v, int) and abs(v) < MAX_INT
                or isinstance(v, float) and math.isfinite(v)):
            raise DefinitionError(f"compute {where!r}: a constant must be a boolean or a finite number, got {v!r}")
        return Const(v, None if dt is None else _dtype(dt, "a constant"))
    if kind == "var":
        _obj(e, {"var"}, "a variable")
        n = unicodedata.normalize("NFKC", e["var"]) if isinstance(e["var"], str) else None
        if n not in scope:
            raise DefinitionError(f"compute {where!r}: {e['var']!r} is not one of its axes {sorted(scope)}"[:300])
        return scope[n]
    if kind in ("bin", "cmp"):
        _obj(e, {kind, "a", "b"}, "a binary operation")
        ops = BINOPS if kind == "bin" else CMPOPS
        if e[kind] not in ops:
            raise DefinitionError(f"compute {where!r}: operator {e[kind]!r} is not one of {ops}")
        return (BinOp if kind == "bin" else Cmp)(e[kind], sub(e["a"]), sub(e["b"]))  # type: ignore[operator]
    if kind == "call":
        _obj(e, {"call", "args"}, "a call")
        if e["call"] not in te.UNARY_FUNCS or not isinstance(e["args"], list) or len(e["args"]) != 1:
            raise DefinitionError(f"compute {where!r}: a call is one of {te.UNARY_FUNCS} on one argument")
        return Call(e["call"], (sub(e["args"][0]),))
    if kind == "select":
        _obj(e, {"select"}, "a select")
        if not isinstance(e["select"], list) or len(e["select"]) != 3:
            raise DefinitionError(f"compute {where!r}: a select is [cond, true, false]")
        return Select(*(sub(x) for x in e["select"]))
    if kind == "cast":
        _obj(e, {"cast", "x"}, "a cast")
        return Cast(_dtype(e["cast"], "a cast"), sub(e["x"]))
    if kind == "load":
        _obj(e, {"load", "index"}, "a load")
        n = unicodedata.normalize("NFKC", e["load"]) if isinstance(e["load"], str) else None
        if n not in tensors:
            raise DefinitionError(f"compute {where!r}: it reads {e['load']!r}, which is not an input or an earlier "
                                  "compute"[:300])
        t = tensors[n]
        if not isinstance(e["index"], list) or len(e["index"]) != t.ndim:
            raise DefinitionError(f"compute {where!r}: {n} has {t.ndim} dimensions; index it with {t.ndim}")
        return Load(t, tuple(sub(i) for i in e["index"]))
    raise DefinitionError(f"compute {where!r}: unknown expression kind {sorted(map(str, e))}"[:300])


# ---- bounds ---------------------------------------------------------------------------------------

def check_bounds(out: Tensor) -> None:
    """Prove every read of every compute stays inside its tensor, for every point of the compute's
    axes (a read under te.select(cond, ...) only where cond holds, for conditions comparing one
    axis with constants). A read it cannot prove is a DefinitionError naming the tensor, its shape
    and the shape the definition needs."""
    for t in te.input_tensors(out):
        if t.body is None:
            continue
        ranges = {a.var: (0, a.extent - 1) for a in list(t.axes) + list(t.reduce_axes)}
        body = t.body.body if isinstance(t.body, Reduce) else t.body
        _check_reads(body, ranges, t.name)


def _check_reads(e: Expr, ranges: dict[Var, tuple[int, int]], where: str) -> None:
    if isinstance(e, Select):
        _check_reads(e.cond, ranges, where)
        for branch, cond in ((e.true, e.cond), (e.false, _negate(e.cond))):
            sub = _refine(cond, ranges) if cond is not None else ranges
            if sub is not None:  # None: the branch is never taken
                _check_reads(branch, sub, where)
        return
    if isinstance(e, Load):
        t = e.tensor
        need = list(t.shape)
        for d, ix in enumerate(e.indices):
            _check_reads(ix, ranges, where)
            iv = interval(ix, ranges)
            if iv is None:
                raise DefinitionError(f"compute {where!r}: the index of {t.name} along dimension {d} is not an affine "
                                      "function of the axes (with // and % by constants), so its bounds cannot be "
                                      "checked")
            if iv[0] < 0:
                raise DefinitionError(f"compute {where!r}: reads {t.name} at index {iv[0]} along dimension {d}; guard "
                                      "the read with te.select(...) on the axis")
            need[d] = max(need[d], iv[1] + 1)
        if tuple(need) != t.shape:
            raise DefinitionError(f"{t.name} has shape {_fmt(t.shape)}, expected {_fmt(tuple(need))}: the definition "
                                  f"reads it up to index {tuple(n - 1 for n in need)} (in compute {where!r})")
        return
    for k in te.children(e):
        _check_reads(k, ranges, where)


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + "x".join(map(str, shape)) + "]"


_NEG = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _negate(c: Expr) -> Expr | None:
    return Cmp(_NEG[c.op], c.a, c.b) if isinstance(c, Cmp) else None


def _refine(c: Expr, ranges: dict[Var, tuple[int, int]]) -> dict[Var, tuple[int, int]] | None:
    """The ranges where condition c holds (narrowed for `axis op const` comparisons and their
    conjunctions; other conditions leave them as they are); None when c never holds."""
    if isinstance(c, BinOp) and c.op == "and":
        left = _refine(c.a, ranges)
        return None if left is None else _refine(c.b, left)
    if not isinstance(c, Cmp) or c.op == "!=":
        return ranges
    a, b = to_affine(c.a), to_affine(c.b)
    if a is None or b is None:
        return ranges
    diff = a + b.scale(-1)  # c holds iff diff (op) 0
    if len(diff.terms) != 1:
        return ranges
    ((v, k),) = diff.terms.items()
    if v not in ranges:
        return ranges
    lo, hi = ranges[v]
    m = -diff.const  # k*v (op) m
    bounds = {"<": [(k, m - 1)], "<=": [(k, m)], ">": [(-k, -m - 1)], ">=": [(-k, -m)],
              "==": [(k, m), (-k, -m)]}[c.op]
    for coef, rhs in bounds:  # coef * v <= rhs
        if coef > 0:
            hi = builtins.min(hi, rhs // coef)
        else:
            lo = builtins.max(lo, -(rhs // -coef))
    if lo > hi:
        return None
    return {**ranges, v: (lo, hi)}
