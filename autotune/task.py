"""A Task: an operator at a shape and dtype. Configs of its space build kernels.

A kernel of Task.build takes the op's arguments in the op's order (`Task.arguments`: a
template's inputs, a definition function's parameters), as do Task.inputs and Task.reference.

Example::

    >>> from autotune.task import Task
    >>> t = Task.create("matmul", "64x48x32", threads=2)
    >>> t.key()
    'matmul|M=64,N=48,K=32|float32|threads=2'
    >>> [(a.name, a.shape) for a in t.arguments()]
    [('A', (64, 32)), ('B', (32, 48))]
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from autotune.codegen import Kernel, build, generate_source
from autotune.codegen.buffers import aligned_copy
from autotune.codegen.check import check_output, poisoned
from autotune.codegen.compile import Entry, Run
from autotune.codegen.finite import all_finite
from autotune.environment import settings
from autotune.errors import AutotuneError, ShapeError
from autotune.ir.expr import input_tensors
from autotune.schedule import Schedule
from autotune.space import Config, ConfigSpace
from autotune.templates import get_template, is_library
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Template, argument_dims

DTYPES = ("float32", "float64")


def speed_unit(flops: float, metric: str = "GFLOP/s") -> tuple[float, str]:
    """(what one call counts for, unit): giga-operations of the template's metric, or calls/s for
    an op with no operation count.

    >>> speed_unit(2e9), speed_unit(2e9, "GOP/s"), speed_unit(0.0)
    ((2.0, 'GFLOP/s'), (2.0, 'GOP/s'), (1.0, 'calls/s'))
    """
    return (flops / 1e9, metric) if flops > 0 else (1.0, "calls/s")


def task_key(op: str, shape: Iterable[tuple[str, int]], dtype: str, threads: int) -> str:
    """The key of a task (Task.key) from its parts, e.g. for a record. A template-free op's dims go
    input by input, as its shape strings list them (a log written before keys did lists each
    input's axis 0 first: its records get the same key).

    >>> task_key("row_dot", [("X0", 6), ("W0", 4), ("X1", 4)], "float32", 1)
    'row_dot|X0=6,X1=4,W0=4|float32|threads=1'
    """
    items = list(shape)
    if not is_library(op):
        order = argument_dims(k for k, _ in items)
        if order is not None and len(order) == len(items):
            value = dict(items)
            items = [(k, value[k]) for k in order]
    dims = ",".join(f"{k}={v}" for k, v in items)
    return f"{op}|{dims}|{dtype}|threads={threads}"


@dataclass(frozen=True)
class Argument:
    """One array a call of an op passes: its name, the shape the caller passes and its dtype."""
    name: str
    shape: tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        return f"{self.name} [{'x'.join(map(str, self.shape))}] {self.dtype}"


@dataclass
class OpKernel(Kernel):
    """A Kernel called with its op's arguments in the op's order (`arguments`), whatever order the
    compiled function takes them in (a definition's: the order it first reads them; an argument it
    never reads is checked, then left out). `order[i]`: the argument the compiled function's input
    i is. `input_shapes` still lists the compiled function's inputs; `arguments` the call's.
    `bind` (and so a call) checks the arrays and `out=` (shape, dtype, C-contiguous, writable) with
    a one-line ShapeError naming the argument.

    A call whose inputs hold NaN or Inf is answered by `reference` (the op's NumPy reference, as a
    tuned op's is: the compiled code assumes finite values), with a RuntimeWarning; set
    `check_finite = False` to skip the check. A kernel that checks_output runs first and is
    answered so when its output holds NaN or Inf (an input's, or an overflow). `bind` never checks
    (it is what the timer runs)."""
    arguments: tuple[Argument, ...] = ()
    order: tuple[int, ...] = ()
    op: str = ""
    reference: Callable[[Sequence[np.ndarray]], np.ndarray] | None = None
    check_finite: bool = True

    @classmethod
    def wrap(cls, kernel: Kernel, arguments: Sequence[Argument], op: str = "",
             reference: Callable[[Sequence[np.ndarray]], np.ndarray] | None = None) -> "OpKernel":
        names = [a.name for a in arguments]
        missing = [t.name for t in kernel.nest.inputs if t.name not in names]
        if missing:
            raise AutotuneError(f"the kernel reads {missing}, which are not among the op's arguments {names}")
        fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(Kernel)}
        return cls(**fields, arguments=tuple(arguments), order=tuple(names.index(t.name) for t in kernel.nest.inputs),
                   op=op, reference=reference)

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if self.check_finite and self.reference is not None:
            arrays = tuple(np.asarray(a) for a in arrays)
            self.select(arrays)
            if self.checks_output:  # the kernel first; NaN or Inf in its output: an input's, or an overflow
                result = super().__call__(*arrays, out=out)
                if all_finite(result):
                    return result
                return by_reference(self.op, first_nonfinite(self.arguments, arrays), self.reference, arrays,
                                    result, stacklevel=3)
            bad = first_nonfinite(self.arguments, arrays)
            if bad is not None:
                if out is None:
                    out = np.empty(self.output_shape, self.nest.output.dtype)
                else:
                    check_out(out, self.output_shape, self.nest.output.dtype, self.op or "kernel")
                return by_reference(self.op, bad, self.reference, arrays, out, stacklevel=3)
        return super().__call__(*arrays, out=out)

    def select(self, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """The compiled function's inputs from a call's arrays, after checking them (ShapeError)."""
        who = f"the {self.op} kernel" if self.op else "the kernel"
        if len(arrays) != len(self.arguments):
            raise ShapeError(f"{who} takes {len(self.arguments)} arrays "
                             f"({', '.join(a.describe() for a in self.arguments)}), got {len(arrays)}")
        for a, arg in zip(arrays, self.arguments):
            a = np.asarray(a)
            if a.shape != arg.shape:
                raise ShapeError(f"{who}: input {arg.name} must have shape {arg.shape}, got {a.shape}")
            if a.dtype != np.dtype(arg.dtype):
                raise ShapeError(f"{who}: input {arg.name} must have dtype {arg.dtype}, got {a.dtype}: pass "
                                 f"{arg.name}.astype(np.{arg.dtype})")
        return tuple(arrays[i] for i in self.order)

    def bind(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> Callable[[], np.ndarray]:
        if out is not None:
            check_out(out, self.output_shape, self.nest.output.dtype, self.op or "kernel")
        return super().bind(*self.select(arrays), out=out)

    def prepared(self, *, check_finite: bool = False) -> tuple[Run, Entry | None]:
        """Kernel.prepared over the call's arrays (unchecked, as there; check_finite as there): the
        compiled entry only where the compiled function takes them in the op's order."""
        run, entry = super().prepared(check_finite=check_finite)
        order = self.order
        if order == tuple(range(len(self.arguments))):
            return run, entry
        return (lambda ins, out: run(tuple(ins[i] for i in order), out)), None


def first_nonfinite(arguments: Sequence[Argument], arrays: Sequence[np.ndarray]) -> Argument | None:
    """The first argument whose array holds NaN or Inf (one read of each: all_finite), else None."""
    for arg, a in zip(arguments, arrays):
        if not all_finite(a):
            return arg
    return None


def by_reference(op: str, bad: Argument | None, reference: Callable[[Sequence[np.ndarray]], np.ndarray],
                 arrays: Sequence[np.ndarray], out: np.ndarray, stacklevel: int = 4) -> np.ndarray:
    """Answer a call whose input `bad` holds NaN or Inf (None: whose finite inputs gave the
    kernel a NaN or Inf output) with the op's NumPy reference, into out, and say so (a
    RuntimeWarning at the caller's call, `stacklevel` frames up)."""
    why = f"input {bad.name} holds NaN or Inf" if bad is not None else \
        "the kernel's output held NaN or Inf (an overflow) though no input did"
    warnings.warn(f"autotune: {op}: {why}, so this call's answer is the NumPy reference's (slower): the kernel's "
                  "fast-math code may place NaN and Inf where NumPy does not; check_finite=False skips this check",
                  RuntimeWarning, stacklevel=stacklevel)
    with np.errstate(all="ignore"):
        out[...] = np.asarray(reference(arrays)).reshape(out.shape)
    return out


def check_out(out: Any, shape: Sequence[int], dtype: str | np.dtype, who: str) -> None:
    """ShapeError unless `out` can take the output: an ndarray of its shape and dtype, C-contiguous
    and writable (a read-only memmap written to would kill the process).

    >>> check_out(np.zeros(3, np.float32), (4,), "float32", "matmul")
    Traceback (most recent call last):
    ...
    autotune.errors.ShapeError: matmul: out must be a C-contiguous float32 array of shape [4], got float32 [3]: pass np.empty([4], np.float32) or out=None
    """
    if type(out) is np.ndarray and out.flags.c_contiguous and out.flags.writeable and out.shape == tuple(shape) \
            and out.dtype == dtype:
        return  # the common case first: it runs on every call given out=
    fix = f"pass np.empty({list(shape)}, np.{dtype}) or out=None"
    if not isinstance(out, np.ndarray):
        raise ShapeError(f"{who}: out must be a NumPy array, got {type(out).__name__}: {fix}")
    if out.shape != tuple(shape) or out.dtype != np.dtype(dtype) or not out.flags.c_contiguous:
        raise ShapeError(f"{who}: out must be a C-contiguous {dtype} array of shape {list(shape)}, got {out.dtype} "
                         f"{list(out.shape)}{'' if out.flags.c_contiguous else ' (not contiguous)'}: {fix}")
    if not out.flags.writeable:
        raise ShapeError(f"{who}: out is read-only (a read-only memmap or a writeable=False view): {fix}")


@dataclass(frozen=True)
class Task:
    """An operator (template name) at a shape and dtype, tuned for a thread count."""
    op: str
    shape: tuple[tuple[str, int], ...]
    dtype: str = "float32"
    threads: int = 1

    @classmethod
    def create(cls, op: str | Template, shape: str | Sequence[int] | Mapping[str, int], dtype: str = "float32",
               threads: int | None = None) -> "Task":
        t = get_template(op)
        if dtype not in DTYPES:
            raise ShapeError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        parsed = t.parse_shape(shape, dtype)
        return cls(t.name, tuple(parsed.items()), dtype, threads if threads is not None else settings().threads)

    @classmethod
    def from_key(cls, key: str, threads: int | None = None) -> "Task":
        """The task a key() names. A key without a thread count (written before keys held one)
        takes `threads`.

        >>> Task.from_key("matmul|M=64,N=32,K=16|float32|threads=1").threads
        1
        """
        try:
            op, dims, dtype, *rest = key.split("|")
            shape = {name: int(v) for name, v in (d.split("=") for d in dims.split(","))}
            if len(rest) > 1 or rest and not rest[0].startswith("threads="):
                raise ValueError(key)
            if rest:
                threads = int(rest[0].removeprefix("threads="))
        except ValueError:
            raise ShapeError(f"{key!r} is not a task key: expected op|dim=value,...|dtype|threads=N, "
                             f"e.g. matmul|M=64,N=32,K=16|float32|threads=2") from None
        return cls.create(op, shape, dtype, threads)

    def to_data(self) -> dict[str, Any]:
        """The task as JSON data for another process (a worker, a Ray actor): a template-free op
        carries its definition as data, so the other side never needs the user's code.

        >>> Task.from_data(Task.create("matmul", "8x8x8", threads=1).to_data()).key()
        'matmul|M=8,N=8,K=8|float32|threads=1'
        """
        t = self.template
        return {"op": self.op, "shape": self.shape_dict, "dtype": self.dtype, "threads": self.threads,
                **({"definition": t.definition(self.shape_dict, self.dtype)} if t.definition else {})}

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> "Task":
        """The task of to_data()'s output (a definition in it is untrusted: validated before use)."""
        if d.get("numba") is not None:  # a hand-written Numba kernel: data, built only if vouched for
            return NumbaTask.from_data(d)
        if d.get("definition") is not None:
            from autotune.definition import register_definition
            register_definition(d["op"], d["definition"])
        return cls.create(d["op"], d["shape"], d["dtype"], d["threads"])

    @property
    def template(self) -> Template:
        return get_template(self.op)

    @property
    def shape_dict(self) -> dict[str, int]:
        return dict(self.shape)

    def key(self) -> str:
        """What identifies the task in logs, datasets and sweeps: op, shape, dtype and threads."""
        return task_key(self.op, self.shape, self.dtype, self.threads)

    def presets(self) -> list[Config]:
        """The template's known-good configs for this task, validated, first ones first, no repeats."""
        t = self.template
        out: list[Config] = []
        space = self.space()
        for p in (t.presets(self.shape_dict, self.dtype, self.threads) if t.presets else []):
            cfg = space.validate(p)
            if cfg not in out:
                out.append(cfg)
        return out

    def default_config(self) -> Config:
        """The config a task runs when nothing was tuned: the first preset, else a fixed sample."""
        presets = self.presets()
        return presets[0] if presets else self.space().sample(random.Random(0))

    def shape_str(self) -> str:
        return "x".join(str(v) for _, v in self.shape)

    def space(self) -> ConfigSpace:
        return self.template.space(self.shape_dict, self.dtype, self.threads)

    def speed_unit(self) -> tuple[float, str]:
        """What one call counts for and its unit (GFLOP/s, the template's metric, or calls/s)."""
        return speed_unit(self.flops(), self.template.metric)

    def flops(self) -> float:
        return self.template.flops(self.shape_dict)

    def schedule(self, cfg: Config | Mapping[str, Any]) -> tuple[Schedule, CodegenOptions]:
        """The schedule (and codegen options) of a config, validated against the space first."""
        cfg = self.space().validate(cfg)
        t, shape, dtype = self.template, self.shape_dict, self.dtype
        s = Schedule(t.define_for(shape, dtype, cfg) if t.define_for else t.define(shape, dtype))
        opts = t.schedule(s, cfg, shape, self.threads)
        return s, opts

    def source(self, cfg: Config | Mapping[str, Any]) -> str:
        s, opts = self.schedule(cfg)
        return generate_source(s, reassoc=opts.reassoc, noalias=opts.noalias)

    def build(self, cfg: Config | Mapping[str, Any]) -> OpKernel:
        """The kernel of a config: called with the op's arguments in the op's order (OpKernel)."""
        s, opts = self.schedule(cfg)
        k = build(s, threads=self.threads, reassoc=opts.reassoc, noalias=opts.noalias, views=self.views())
        return OpKernel.wrap(k, self.arguments(), self.op, self.reference)

    def arguments(self) -> list[Argument]:
        """The arrays a call passes, in the op's order: names, the caller's shapes and dtypes."""
        return [Argument(t.name, tuple(t.shape), t.dtype) for t in self.template.call_args(self.shape_dict, self.dtype)]

    def views(self) -> list[tuple[int, ...]]:
        """The shapes the compiled function's inputs (in its order), then its output, have for the
        caller: the template's definition's (a config's own definition, define_for, may compute on
        flat views of them)."""
        out = self.template.define(self.shape_dict, self.dtype)
        return [t.shape for t in input_tensors(out) if t.is_placeholder] + [out.shape]

    def verify(self, kernel: Kernel, seed: int = 0) -> None:
        """Run `kernel` once on the task's random inputs against its reference; AutotuneError if
        it computes something else (for kernels that no measurement worker checked here: from a
        log, or a default schedule)."""
        ins = self.inputs(seed=seed)
        out = poisoned(kernel.output_shape, self.dtype)
        kernel(*ins, out=out)
        res = check_output(out, np.asarray(self.reference(ins)), self.dtype)
        if not res.ok:
            raise AutotuneError(f"the kernel built for {self.key()} computes a wrong answer ({res.message}): "
                                "retune the task")

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random inputs of the op's arguments (in its order), placed alike in every process
        (aligned_copy), so timings compare."""
        return [aligned_copy(np.asarray(a))
                for a in self.template.inputs(self.shape_dict, self.dtype, np.random.default_rng(seed))]

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        # shape values the inputs cannot tell go as keywords: the template's extra dims (stride,
        # pad, ...) and any dim its reference names as a keyword-only parameter (a pooling window)
        t = self.template
        kw = {p.name for p in inspect.signature(t.reference).parameters.values() if p.kind is p.KEYWORD_ONLY}
        extra = {k: v for k, v in self.shape if k in t.extra_dims or k in kw}
        return t.reference(*inputs, **extra)


class NumbaSpace:
    """The configs of a hand-written Numba kernel: its config constants set to bools, ints, floats
    or short strings (autotune.codegen.handwritten.check_config)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec

    def validate(self, values: Mapping[str, Any]) -> Config:
        from autotune.codegen.handwritten import check_config
        return Config(check_config(self.spec, values))

    from_json = validate


@dataclass(frozen=True)
class NumbaTask(Task):
    """A user's hand-written Numba kernel (autotune.autotune_numba) at one key: op
    "numba:<name>:<source hash>", shape the key's array dims and int values. `kernel` is its data
    (autotune.codegen.handwritten, canonical JSON), so it travels to workers and logs as data;
    `run` (JSON, not part of its identity) tells a measuring worker where the arguments and
    expected outputs are: {"dir", "prefix", "expected": {name: file} or null, "against"}.

    SECURITY: `build` compiles the kernel's source; a task made from a log (Record.task) may be
    looked at, never built, unless the user vouched for its source (autotune.numba_tune).

    Example::

        >>> from autotune.codegen.handwritten import check_spec
        >>> spec = check_spec({"name": "f", "source": "def f(x):\\n    x[0] = C\\n", "globals": {}, "constants": ["C"],
        ...     "args": [{"name": "x", "array": {"shape": [4], "dtype": "float64"}}], "key": ["x"], "outputs": None,
        ...     "restore": [], "zero": [], "fastmath": False, "rtol": None})
        >>> t = NumbaTask.of(spec, threads=1)
        >>> t.key().split("|")[1:], t.speed_unit(), Task.from_data(t.to_data()) == t
        (['x0=4', 'float64', 'threads=1'], (1.0, 'calls/s'), True)
    """
    kernel: str = "{}"
    run: str = field(default="{}", compare=False)

    @classmethod
    def of(cls, spec: Mapping[str, Any], threads: int = 1, run: Mapping[str, Any] | None = None) -> "NumbaTask":
        """The task of checked kernel data (handwritten.check_spec)."""
        from autotune.codegen.handwritten import canonical, op_name
        shape: list[tuple[str, int]] = []
        for a in spec["args"]:
            if a["name"] not in spec["key"]:
                continue
            if "array" in a:
                shape += [(f"{a['name']}{d}", n) for d, n in enumerate(a["array"]["shape"])]
            elif isinstance(a["value"], int) and not isinstance(a["value"], complex):
                shape.append((a["name"], int(a["value"])))
        dtypes = [a["array"]["dtype"] for a in spec["args"] if "array" in a]
        return cls(op_name(spec), tuple(shape), dtypes[0] if dtypes else "none", threads,
                   kernel=canonical(spec), run=json.dumps(dict(run or {})))

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> "NumbaTask":
        """The task of to_data()'s output; the kernel data is checked (never compiled here)."""
        from autotune.codegen.handwritten import check_spec
        return cls.of(check_spec(d["numba"]), int(d["threads"]), d.get("numba_run") or {})

    def to_data(self) -> dict[str, Any]:
        return {"op": self.op, "shape": self.shape_dict, "dtype": self.dtype, "threads": self.threads,
                "numba": self.spec, "numba_run": self.run_data}

    @property
    def spec(self) -> dict[str, Any]:
        return json.loads(self.kernel)  # type: ignore[no-any-return]

    @property
    def run_data(self) -> dict[str, Any]:
        return json.loads(self.run)  # type: ignore[no-any-return]

    @property
    def template(self) -> Template:
        raise AutotuneError(f"{self.op} is a hand-written Numba kernel: it has no template")

    def space(self) -> NumbaSpace:  # type: ignore[override]
        return NumbaSpace(self.spec)

    def presets(self) -> list[Config]:
        return []

    def flops(self) -> float:
        return 0.0

    def speed_unit(self) -> tuple[float, str]:
        return speed_unit(0.0)

    def build(self, cfg: Config | Mapping[str, Any]) -> Any:  # type: ignore[override]
        """The compiled kernel of a config (autotune.codegen.handwritten.build): only for a kernel
        whose source the user vouched for (see the class docstring)."""
        from autotune.codegen.handwritten import build
        spec = self.spec
        return build(spec, self.space().validate(cfg))
