"""A NumPy interpreter of the tensor-expression IR: the correctness reference of a definition,
independent of the loop-nest lowering and the Numba code generator. And its flop count.

Every compute is evaluated over broadcast index grids in float64 (integers and booleans in their
own types), in blocks of its first spatial and first reduce axis, so memory stays bounded.

Example::

    >>> import numpy as np
    >>> from autotune.ir import te
    >>> from autotune.ir.evaluate import count_flops, evaluate
    >>> A = te.placeholder((3, 4), "float64", name="A"); B = te.placeholder((4, 2), "float64", name="B")
    >>> k = te.reduce_axis(4, name="k")
    >>> C = te.compute((3, 2), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> a, b = np.ones((3, 4)), np.ones((4, 2))
    >>> evaluate(C, {"A": a, "B": b}).tolist()
    [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
    >>> count_flops(C)
    48.0
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from autotune.errors import DefinitionError
from autotune.ir import expr as te
from autotune.ir.expr import CMP_OPS, BinOp, Call, Cast, Cmp, Const, Expr, Load, Reduce, Select, Tensor, Var

BLOCK = 1 << 22  # grid points evaluated at once

_BIN = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
        "%": np.mod, "min": np.minimum, "max": np.maximum, "and": np.logical_and, "or": np.logical_or}
_CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs, "neg": np.negative,
         "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def evaluate(out: Tensor, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The value of `out` for input arrays named like its placeholders, in out's dtype."""
    values: dict[str, np.ndarray] = {}
    for t in te.input_tensors(out):
        if t.is_placeholder:
            if t.name not in inputs:
                raise DefinitionError(f"evaluate: no array for input {t.name!r}")
            a = np.asarray(inputs[t.name])
            if a.shape != t.shape:
                raise DefinitionError(f"evaluate: {t.name} has shape {a.shape}, expected {t.shape}")
            values[t.name] = _wide(a)
        else:
            values[t.name] = _compute(t, values)
    return values[out.name].astype(out.dtype)


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _compute(t: Tensor, values: Mapping[str, np.ndarray]) -> np.ndarray:
    red = t.body if isinstance(t.body, Reduce) else None
    body = red.body if red is not None else t.body
    assert body is not None
    spatial = [(a.var, a.extent) for a in t.axes]
    raxes = [(a.var, a.extent) for a in red.axes] if red is not None else []
    n_sp = len(spatial)
    per_row = math.prod(e for _, e in spatial[1:]) * math.prod(e for _, e in raxes)
    rows = max(1, BLOCK // max(1, per_row))
    rblock = raxes[0][1] if raxes else 1
    if raxes and per_row > BLOCK:
        rblock = max(1, BLOCK * raxes[0][1] // per_row)
    kext = raxes[0][1] if raxes else 1
    parts = []
    for r0 in range(0, spatial[0][1], rows):
        acc = None
        for k0 in range(0, kext, rblock):
            grids: dict[Var, np.ndarray] = {}
            dims = [(v, np.arange(r0, min(r0 + rows, e)) if i == 0 else np.arange(e)) for i, (v, e) in enumerate(spatial)]
            dims += [(v, np.arange(k0, min(k0 + rblock, e)) if i == 0 else np.arange(e)) for i, (v, e) in enumerate(raxes)]
            nd = len(dims)
            for d, (v, rng) in enumerate(dims):
                grids[v] = rng.reshape([-1 if x == d else 1 for x in range(nd)])
            val = np.broadcast_to(_eval(body, grids, values), [len(r) for _, r in dims])
            if red is not None:
                val = _REDUCE[red.op](val, axis=tuple(range(n_sp, nd)))
                acc = val if acc is None else _COMBINE[red.op](acc, val)
            else:
                acc = val
        parts.append(np.array(acc))
    result = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    return _wide(result.astype(t.dtype))  # rounded to the compute's dtype, as the kernel stores it


def _eval(e: Expr, grids: Mapping[Var, np.ndarray], values: Mapping[str, np.ndarray]) -> np.ndarray:
    if isinstance(e, Const):
        return np.asarray(e.value)
    if isinstance(e, Var):
        return grids[e]
    if isinstance(e, BinOp):
        return _BIN[e.op](_eval(e.a, grids, values), _eval(e.b, grids, values))
    if isinstance(e, Cmp):
        return CMP_OPS[e.op](_eval(e.a, grids, values), _eval(e.b, grids, values))
    if isinstance(e, Call) and e.func == "pow2":
        lo, hi = te.POW2_EXPONENTS[e.dtype or "float64"]
        n = np.clip(np.trunc(_eval(e.args[0], grids, values)), lo, hi)
        return np.ldexp(1.0, n.astype(np.int64))
    if isinstance(e, Call):
        return _CALL[e.func](_eval(e.args[0], grids, values))
    if isinstance(e, Select):
        return np.where(_eval(e.cond, grids, values), _eval(e.true, grids, values), _eval(e.false, grids, values))
    if isinstance(e, Cast):
        return _wide(np.asarray(_eval(e.x, grids, values)).astype(e.dtype))
    if isinstance(e, Load):
        a = values[e.tensor.name]
        # reads under an untaken select branch may leave the tensor: np.where evaluates both sides
        idx = tuple(np.clip(_eval(i, grids, values), 0, n - 1) for i, n in zip(e.indices, a.shape))
        return a[idx]
    raise DefinitionError(f"evaluate: cannot evaluate {type(e).__name__}")


def count_flops(out: Tensor) -> float:
    """Floating-point operations of a definition: per point of each compute (its spatial and reduce
    axes), one per arithmetic operation or function on floats in the body, plus one for the
    reduction's combine. Index arithmetic and integer math do not count; 0.0 means none."""
    total = 0.0
    for t in te.input_tensors(out):
        if t.body is None:
            continue
        red = t.body if isinstance(t.body, Reduce) else None
        body = red.body if red is not None else t.body
        ops = _float_ops(body) + (1 if red is not None and body.dtype in te.FLOAT_DTYPES else 0)
        points = math.prod(t.shape) * (math.prod(a.extent for a in red.axes) if red is not None else 1)
        total += ops * points
    return float(total)


def _float_ops(e: Expr) -> int:
    if isinstance(e, Load):
        return 0  # its indices are integer arithmetic
    own = isinstance(e, (BinOp, Call)) and e.dtype in te.FLOAT_DTYPES
    return int(own) + sum(_float_ops(k) for k in te.children(e))
