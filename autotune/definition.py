"""Turn a Python function that builds a compute definition into a template-free Template.

The function takes placeholders (one per input array) and returns the output tensor. Its
search space is derived by rules (autotune.autoschedule); its reference is a NumPy function
when given, else the definition's own default schedule (plain loops, correct by construction).

Example::

    >>> from autotune.ir import te
    >>> from autotune.definition import template_from_function
    >>> def scale(A):
    ...     return te.compute(A.shape, lambda i: A[i] * 2.0, name="out")
    >>> t = template_from_function(scale)
    >>> t.dims
    ('A0',)
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping

import numpy as np

from autotune.autoschedule import AutoScheduler
from autotune.errors import DefinitionError
from autotune.ir import te
from autotune.ir.expr import Tensor
from autotune.schedule import Schedule
from autotune.space import Config, ConfigSpace
from templates.base import CodegenOptions, Template


def estimate_flops(out: Tensor) -> float:
    """2 per multiply-add of a reduction, 1 per output element otherwise, over every stage."""
    total = 0.0
    for t in te.input_tensors(out):
        if t.is_placeholder:
            continue
        n = math.prod(t.shape)
        red = math.prod(a.extent for a in t.reduce_axes) if t.reduce_axes else 0
        total += n * (2 * red if red else 1)
    return total


def template_from_function(fn: Callable[..., Tensor], *, name: str | None = None,
                           reference: Callable[..., np.ndarray] | None = None) -> Template:
    """A Template whose dims are the input arrays' dimensions: A0, A1, B0, ... for inputs A, B."""
    params = [p for p in inspect.signature(fn).parameters]
    if not params:
        raise DefinitionError(f"{fn.__name__}: a kernel function takes its input tensors as parameters")
    name = name or fn.__name__
    ranks: dict[str, int] = {}

    def shape_of(*arrays: np.ndarray) -> dict[str, int]:
        if len(arrays) != len(params):
            raise DefinitionError(f"{name} takes {len(params)} arrays ({', '.join(params)}), got {len(arrays)}")
        out: dict[str, int] = {}
        for p, a in zip(params, arrays):
            ranks[p] = np.ndim(a)
            for d, n in enumerate(np.shape(a)):
                out[f"{p}{d}"] = int(n)
        return out

    def placeholders(shape: Mapping[str, int], dtype: str) -> list[Tensor]:
        phs = []
        for p in params:
            dims = []
            d = 0
            while f"{p}{d}" in shape:
                dims.append(shape[f"{p}{d}"])
                d += 1
            phs.append(te.placeholder(tuple(dims) or (1,), dtype, name=p))
        return phs

    def define(shape: Mapping[str, int], dtype: str) -> Tensor:
        out = fn(*placeholders(shape, dtype))
        if not isinstance(out, Tensor) or out.is_placeholder:
            raise DefinitionError(f"{name} must return the output of te.compute, got {out!r}")
        return out

    def space(shape: Mapping[str, int], dtype: str, threads: int) -> ConfigSpace:
        return AutoScheduler(define(shape, dtype), threads).space

    def schedule(s: Schedule, cfg: Config, shape: Mapping[str, int], threads: int) -> CodegenOptions:
        AutoScheduler(s.output, threads).apply(s, cfg)
        return CodegenOptions()

    def default_reference(*arrays: np.ndarray) -> np.ndarray:
        from autotune.codegen import build
        shape = shape_of(*arrays)
        k = build(Schedule(define(shape, str(arrays[0].dtype))), threads=1)
        return k(*arrays)

    def flops(shape: Mapping[str, int]) -> float:
        return estimate_flops(define(shape, "float32"))

    def free_dim(k: str) -> bool:
        return any(k.startswith(p) and k[len(p):].isdigit() and int(k[len(p):]) < 8 for p in params)

    return Template(name=name, description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else name,
                    dims=tuple(f"{p}0" for p in params), define=define, space=space,
                    schedule=schedule,  # type: ignore[arg-type]
                    reference=reference or default_reference, flops=flops, default_shape="",
                    shape_of=shape_of, free_dims=free_dim, presets=lambda shape, dtype, threads: [
                        default_config(define(shape, dtype), threads)])


def default_config(out: Tensor, threads: int) -> dict[str, Any]:
    """A sensible schedule of the derived space: tiles of 32 x 16 x ..., cache, vectorize."""
    auto = AutoScheduler(out, threads)
    cfg: dict[str, Any] = {}
    for k in auto.space.knobs:
        vals = k.values()
        if k.name.startswith("tile_"):
            want = (8, 16) if getattr(k, "levels", 1) == 2 else (64,)
            cfg[k.name] = min(vals, key=lambda v: sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(v, want)))
        elif k.name.startswith("inline_"):
            cfg[k.name] = True
        else:
            cfg[k.name] = True if True in vals else vals[0]
    return cfg
