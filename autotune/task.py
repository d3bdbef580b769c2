"""A Task: an operator at a shape and dtype. Configs of its space build kernels.

Example::

    >>> from autotune.task import Task
    >>> t = Task.create("matmul", "64x48x32", threads=2)
    >>> t.key()
    'matmul|M=64,N=48,K=32|float32|threads=2'
"""
from __future__ import annotations

import inspect
import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from autotune.codegen import Kernel, build, generate_source
from autotune.codegen.buffers import aligned_copy
from autotune.codegen.check import check_output, poisoned
from autotune.environment import settings
from autotune.errors import AutotuneError, ShapeError
from autotune.ir.expr import input_tensors
from autotune.schedule import Schedule
from autotune.space import Config, ConfigSpace
from templates import get_template
from templates.base import CodegenOptions, Template

DTYPES = ("float32", "float64")


def speed_unit(flops: float, metric: str = "GFLOP/s") -> tuple[float, str]:
    """(what one call counts for, unit): giga-operations of the template's metric, or calls/s for
    an op with no operation count.

    >>> speed_unit(2e9), speed_unit(2e9, "GOP/s"), speed_unit(0.0)
    ((2.0, 'GFLOP/s'), (2.0, 'GOP/s'), (1.0, 'calls/s'))
    """
    return (flops / 1e9, metric) if flops > 0 else (1.0, "calls/s")


def task_key(op: str, shape: Iterable[tuple[str, int]], dtype: str, threads: int) -> str:
    """The key of a task (Task.key) from its parts, e.g. for a record."""
    dims = ",".join(f"{k}={v}" for k, v in shape)
    return f"{op}|{dims}|{dtype}|threads={threads}"


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
        parsed = t.parse_shape(shape)
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

    def build(self, cfg: Config | Mapping[str, Any]) -> Kernel:
        s, opts = self.schedule(cfg)
        return build(s, threads=self.threads, reassoc=opts.reassoc, noalias=opts.noalias, views=self.views())

    def views(self) -> list[tuple[int, ...]]:
        """The shapes callers pass and get: the template's definition's inputs, then its output
        (a config's own definition, define_for, may compute on flat views of them)."""
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
        """Random inputs, placed alike in every process (aligned_copy), so timings compare."""
        return [aligned_copy(np.asarray(a))
                for a in self.template.inputs(self.shape_dict, self.dtype, np.random.default_rng(seed))]

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        # shape values the inputs cannot tell go as keywords: the template's extra dims (stride,
        # pad, ...) and any dim its reference names as a keyword-only parameter (a pooling window)
        t = self.template
        kw = {p.name for p in inspect.signature(t.reference).parameters.values() if p.kind is p.KEYWORD_ONLY}
        extra = {k: v for k, v in self.shape if k in t.extra_dims or k in kw}
        return t.reference(*inputs, **extra)
