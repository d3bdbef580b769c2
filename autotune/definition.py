"""Template-free operators from compute definitions: written by a Python function, or read as data.

A definition function takes placeholders (one per input array) and returns the output tensor.
At each shape it is called once; what it returns is written as data (autotune.ir.serialize) and
read back, so the definition a process uses is exactly the one measurement workers and tuning
logs receive: workers and replays rebuild it from that data and never import or run the user's
code. Its search space is derived by rules (autotune.autoschedule); its reference is the NumPy
interpreter of the IR (autotune.ir.evaluate) unless a NumPy function is given; its flops are
counted from the IR.

Shape dims are the inputs' dimensions in argument order: A0, A1, B0, ... for inputs A, B (shape
strings and task keys list them so). A kernel of the op (Task.build, autotune.load_best), its
reference and its random inputs take the arrays in the function's argument order, whatever order
the definition reads them in (the compiled function takes them in read order; Task.build maps).
The definition is dtype-generic: an op called with float64 arrays is tuned and run at float64.

Example::

    >>> from autotune.ir import te
    >>> from autotune.definition import template_from_function
    >>> def scale(A):
    ...     return te.compute(A.shape, lambda i: A[i] * 2.0, name="out")
    >>> t = template_from_function(scale)
    >>> t.dims
    ('A0',)
    >>> t.definition({"A0": 8}, "float32")["inputs"]
    [{'name': 'A', 'shape': [8], 'dtype': 'float32'}]
"""
from __future__ import annotations

import inspect
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from autotune.autoschedule import AutoScheduler
from autotune.errors import DefinitionError
from autotune.ir import te
from autotune.ir.evaluate import count_flops, evaluate
from autotune.ir.expr import Tensor
from autotune.ir.serialize import MAX_RANK, content_hash, from_data, to_data
from autotune.schedule import Schedule
from autotune.space import Config, ConfigSpace
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Template


@dataclass(frozen=True)
class Definition:
    """One definition at one shape and dtype: its data, content hash and rebuilt tensors."""
    data: dict[str, Any]
    hash: str
    out: Tensor
    inputs: tuple[Tensor, ...]  # placeholders in argument order

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    def shape(self) -> dict[str, int]:
        return {f"{t.name}{d}": n for t in self.inputs for d, n in enumerate(t.shape)}


def _checked_hash(data: Any) -> str:
    try:
        return content_hash(data)
    except (TypeError, ValueError, RecursionError):
        raise DefinitionError("a definition must be JSON data (objects, lists, strings, finite numbers)") from None


def _read(data: Any) -> Definition:
    h = _checked_hash(data)
    out, inputs = from_data(data)
    return Definition(data, h, out, tuple(inputs))


class Definitions:
    """The definitions of one operator, by (shape, dtype): made by its function when it has one,
    else only those read as data (from a log or a measurement request)."""

    def __init__(self, name: str, params: Sequence[str] | None, fn: Callable[..., Any] | None) -> None:
        self.name, self.params, self.fn = name, list(params) if params is not None else None, fn
        self.ranks: dict[str, int] = {}
        self.by_key: dict[tuple, Definition] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(shape: Mapping[str, int], dtype: str) -> tuple:
        return tuple(sorted(shape.items())), dtype

    def get(self, shape: Mapping[str, int], dtype: str) -> Definition:
        k = self.key(shape, dtype)
        d = self.by_key.get(k)
        if d is not None:
            return d
        if self.fn is None:
            known = ", ".join(f"{dict(s)} {dt}" for s, dt in self.by_key) or "none"
            raise DefinitionError(f"{self.name}: no definition at {dict(shape)} {dtype} (this process knows it only "
                                  f"from data: {known})")
        try:
            d = _read(self._call(shape, dtype))
        except DefinitionError as e:
            raise DefinitionError(f"{self.name}: {e}") from None
        self._keep(k, d)
        return d

    def _call(self, shape: Mapping[str, int], dtype: str) -> dict[str, Any]:
        """The function's definition at a shape, as data."""
        assert self.params is not None and self.fn is not None
        phs = []
        for p in self.params:
            dims = []
            while f"{p}{len(dims)}" in shape:
                dims.append(shape[f"{p}{len(dims)}"])
            phs.append(te.placeholder(tuple(dims) or (1,), dtype, name=p))
        out = self.fn(*phs)
        if not isinstance(out, Tensor) or out.is_placeholder:
            raise DefinitionError(f"{self.name} must return the output of te.compute, got {out!r}")
        return to_data(out, phs)

    def add(self, data: Any) -> Definition:
        """Add a definition read as data (validated); one that differs from the definition this
        operator already has at its shape and dtype is an error."""
        try:
            d = _read(data)
        except DefinitionError as e:
            raise DefinitionError(f"{self.name}: {e}") from None
        names = list(d.arg_names)
        if self.params is not None and names != self.params:
            raise DefinitionError(f"{self.name}: the definition's inputs {names} are not the operator's {self.params}")
        dtypes = {t.dtype for t in d.inputs}
        if len(dtypes) != 1:
            raise DefinitionError(f"{self.name}: a definition's inputs share one dtype, got {sorted(dtypes)}")
        k = self.key(d.shape(), dtypes.pop())
        mine = self.by_key.get(k)
        if mine is None and self.fn is not None:
            mine = self.get(dict(k[0]), k[1])
        if mine is not None and mine.hash != d.hash:
            raise DefinitionError(f"{self.name} at {dict(k[0])} {k[1]} has another definition here than this one "
                                  f"({d.hash[:12]}): the definition changed since it was recorded")
        if self.params is None:
            self.params = names
        self._keep(k, d)
        return d

    def _keep(self, k: tuple, d: Definition) -> None:
        with self._lock:
            self.by_key[k] = d
            for t in d.inputs:
                self.ranks[t.name] = t.ndim

    def matching(self, arrays: Sequence[np.ndarray]) -> Definition:
        """The definition whose inputs (in argument order) have these arrays' shapes and dtype (a
        reference's lookup)."""
        want = [(np.shape(a), str(np.asarray(a).dtype)) for a in arrays]
        for d in reversed(list(self.by_key.values())):
            if [(t.shape, t.dtype) for t in d.inputs] == want:
                return d
        raise DefinitionError(f"{self.name}: no definition has inputs {want}")

    def dim_names(self) -> tuple[str, ...]:
        """Every dim in the definition's order (each input's dims in turn), once the ranks are known."""
        if self.params is None or any(p not in self.ranks for p in self.params):
            return ()
        return tuple(f"{p}{d}" for p in self.params for d in range(self.ranks[p]))


_STORES: dict[str, Definitions] = {}  # operator name -> its definitions (the registered template's)


def _template(defs: Definitions, description: str, reference: Callable[..., np.ndarray] | None) -> Template:
    name = defs.name

    def shape_of(*arrays: np.ndarray) -> dict[str, int]:
        params = defs.params or []
        if len(arrays) != len(params):
            raise DefinitionError(f"{name} takes {len(params)} arrays ({', '.join(params)}), got {len(arrays)}")
        out: dict[str, int] = {}
        for p, a in zip(params, arrays):
            shape = np.shape(a)
            if not 1 <= len(shape) <= MAX_RANK:
                raise DefinitionError(f"{name}: input {p} must have 1 to {MAX_RANK} dimensions, got shape {shape}")
            for d, n in enumerate(shape):
                out[f"{p}{d}"] = int(n)
        return out

    def define(shape: Mapping[str, int], dtype: str) -> Tensor:
        return defs.get(shape, dtype).out

    def space(shape: Mapping[str, int], dtype: str, threads: int) -> ConfigSpace:
        return AutoScheduler(define(shape, dtype), threads).space

    def schedule(s: Schedule, cfg: Config, shape: Mapping[str, int], threads: int) -> CodegenOptions:
        return AutoScheduler(s.output, threads).apply(s, cfg)

    def ref(*arrays: np.ndarray) -> np.ndarray:  # the arrays in argument order
        d = defs.matching(arrays)
        if reference is not None:
            return reference(*arrays)
        return evaluate(d.out, {t.name: a for t, a in zip(d.inputs, arrays)})

    def flops(shape: Mapping[str, int]) -> float:
        for (s, _), d in list(defs.by_key.items()):
            if dict(s) == dict(shape):
                return count_flops(d.out)
        return count_flops(define(shape, "float32"))

    def free_dim(k: str) -> bool:
        return any(k.startswith(p) and k[len(p):].isdigit() and int(k[len(p):]) < MAX_RANK for p in defs.params or [])

    return Template(name=name, description=description, dims=tuple(f"{p}0" for p in defs.params or []),
                    define=define, space=space, schedule=schedule,  # type: ignore[arg-type]
                    reference=ref, flops=flops, default_shape="", shape_of=shape_of, free_dims=free_dim,
                    presets=lambda shape, dtype, threads: AutoScheduler(define(shape, dtype), threads).presets(),
                    definition=lambda shape, dtype: defs.get(shape, dtype).data, dim_names=defs.dim_names,
                    arguments=lambda shape, dtype: list(defs.get(shape, dtype).inputs))


def template_from_function(fn: Callable[..., Tensor], *, name: str | None = None,
                           reference: Callable[..., np.ndarray] | None = None) -> Template:
    """A template-free Template from a definition function. reference: a NumPy function of the
    inputs in argument order (default: the IR interpreter)."""
    params = list(inspect.signature(fn).parameters)
    if not params:
        raise DefinitionError(f"{fn.__name__}: a kernel function takes its input tensors as parameters")
    name = check_op_name(name or fn.__name__)
    defs = Definitions(name, params, fn)
    doc = (fn.__doc__ or "").strip()
    t = _template(defs, doc.splitlines()[0] if doc else name, reference)
    _STORES[name] = defs
    return t


def check_op_name(name: object) -> str:
    """An operator name of a definition: an ASCII identifier (NFKC-normalised first)."""
    n = unicodedata.normalize("NFKC", name) if isinstance(name, str) else ""
    if not n.isidentifier() or not n.isascii() or len(n) > 64:
        raise DefinitionError(f"an operator name must be an ASCII identifier of at most 64 characters, got {name!r}")
    return n


def register_definition(name: str, data: Any) -> Template:
    """Make `name` an operator with the definition `data` (untrusted: validated before use) at its
    shape and dtype, or add that shape to it; returns its template. A library template's name is
    refused.

    >>> from autotune.ir import te
    >>> def twice(A):
    ...     return te.compute(A.shape, lambda i: A[i] * 2.0, name="out")
    >>> data = template_from_function(twice, name="twice_doc").definition({"A0": 4}, "float64")
    >>> t = register_definition("twice_fresh", data)
    >>> t.define({"A0": 4}, "float64").shape
    (4,)
    """
    from autotune.templates import TEMPLATES, is_library, register
    name = check_op_name(name)
    if is_library(name):
        raise DefinitionError(f"{name!r} is a library operator: a definition cannot replace it")
    defs = _STORES.get(name)
    t = TEMPLATES.get(name, None)
    if defs is None or t is None:
        defs = Definitions(name, None, None)
        defs.add(data)
        t = register(_template(defs, name, None), listed=False)
        _STORES[name] = defs
        return t
    defs.add(data)
    return t


def default_config(out: Tensor, threads: int) -> dict[str, Any]:
    """A sensible schedule of the derived space (AutoScheduler.default_config)."""
    return AutoScheduler(out, threads).default_config()
