"""Schedule steps: frozen, hashable, JSON-serialisable values. A schedule is a tuple of them.

Example::

    >>> from autotune.schedule.steps import Split, step_from_json
    >>> s = Split("C", "i", 8, "io", "ii")
    >>> step_from_json(s.to_json()) == s
    True
"""
from __future__ import annotations

import dataclasses
import keyword
from dataclasses import dataclass
from typing import Any, ClassVar

from autotune.errors import ScheduleError

MAX_FACTOR = 1 << 16
MAX_NAME = 64
MAX_PREFETCH_ROWS = 64


def check_name(step: str, name: object, what: str = "name") -> str:
    if (not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name)
            or len(name) > MAX_NAME or name.startswith("_")):
        raise ScheduleError(step, None, f"{what} must be a Python identifier of at most {MAX_NAME} "
                                        f"characters not starting with '_', got {name!r}")
    return name


def check_factor(step: str, axis: str, factor: object) -> int:
    if isinstance(factor, bool) or not isinstance(factor, int) or not 1 <= factor <= MAX_FACTOR:
        raise ScheduleError(step, axis, f"factor must be an integer in [1, {MAX_FACTOR}], got {factor!r}")
    return factor


@dataclass(frozen=True)
class Step:
    """Base of schedule steps; `op` names the step in JSON."""
    op: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("factor", "x_factor", "y_factor", "dim"):
                continue
            if isinstance(v, tuple):
                for x in v:
                    check_name(self.op, x, f.name)
            elif v is not None or f.default is not None:  # None only stands for an optional name
                check_name(self.op, v, f.name)


@dataclass(frozen=True)
class Split(Step):
    """Split axis into (outer, inner) with inner extent `factor`; the tail is handled."""
    op: ClassVar[str] = "split"
    stage: str
    axis: str
    factor: int
    outer: str | None = None
    inner: str | None = None

    def validate(self) -> None:
        super().validate()
        check_factor(self.op, self.axis, self.factor)


@dataclass(frozen=True)
class Tile(Step):
    """Split x and y and order them (xo, yo, xi, yi)."""
    op: ClassVar[str] = "tile"
    stage: str
    x: str
    y: str
    x_factor: int
    y_factor: int

    def validate(self) -> None:
        super().validate()
        check_factor(self.op, self.x, self.x_factor)
        check_factor(self.op, self.y, self.y_factor)


@dataclass(frozen=True)
class Fuse(Step):
    """Fuse two adjacent axes (outer immediately enclosing inner) into one."""
    op: ClassVar[str] = "fuse"
    stage: str
    outer: str
    inner: str
    name: str | None = None


@dataclass(frozen=True)
class Reorder(Step):
    """Put the named axes in this order, in the positions they occupy now."""
    op: ClassVar[str] = "reorder"
    stage: str
    order: tuple[str, ...]


@dataclass(frozen=True)
class Unroll(Step):
    """Unroll a constant-extent loop in the generated source."""
    op: ClassVar[str] = "unroll"
    stage: str
    axis: str


@dataclass(frozen=True)
class Vectorize(Step):
    """Mark the innermost loop for SIMD (constant trip count, left to LLVM)."""
    op: ClassVar[str] = "vectorize"
    stage: str
    axis: str


@dataclass(frozen=True)
class Parallel(Step):
    """Run the outermost loop of the output stage on several threads."""
    op: ClassVar[str] = "parallel"
    stage: str
    axis: str


@dataclass(frozen=True)
class Stream(Step):
    """Write the output stage's rows around the caches (non-temporal stores): for an output far
    larger than the caches that nothing reads soon, the store skips reading each line in first.
    Its innermost loops that store one contiguous row compute the row into a small local buffer,
    copied out with aligned streaming vector stores (autotune.codegen.stream)."""
    op: ClassVar[str] = "stream"
    stage: str


@dataclass(frozen=True)
class Prefetch(Step):
    """While loop `axis` of the output stage computes, fetch the row of input `tensor` that is
    `rows` rows ahead into the cache: a software prefetch of each cache line of that row, placed
    right after the loop body's first read of the tensor. A row-wise kernel (layernorm, softmax)
    waits on memory in its first pass over a row and computes from the cache in the others; the
    prefetch lets a later row's memory traffic overlap those (autotune.codegen.prefetch)."""
    op: ClassVar[str] = "prefetch"
    stage: str
    axis: str
    tensor: str
    rows: int

    def validate(self) -> None:
        for name in (self.stage, self.axis, self.tensor):
            check_name(self.op, name)
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or not 1 <= self.rows <= MAX_PREFETCH_ROWS:
            raise ScheduleError(self.op, self.axis, f"rows must be an integer in [1, {MAX_PREFETCH_ROWS}], got {self.rows!r}")


@dataclass(frozen=True)
class CacheWrite(Step):
    """Accumulate the stage's results inside loop `at` in a local tile, then write it back."""
    op: ClassVar[str] = "cache_write"
    stage: str
    at: str


@dataclass(frozen=True)
class ComputeAt(Step):
    """Compute the region of `stage` that `consumer` needs inside its loop `axis`, there."""
    op: ClassVar[str] = "compute_at"
    stage: str
    consumer: str
    axis: str


@dataclass(frozen=True)
class ComputeInline(Step):
    """Substitute the stage's expression into every consumer (no buffer)."""
    op: ClassVar[str] = "compute_inline"
    stage: str


@dataclass(frozen=True)
class Pack(Step):
    """Repack tensor into a blocked layout: dimension `dim` becomes (dim // factor, ..., dim % factor).

    The packed tensor (named `name`) is zero-padded to whole blocks and becomes a stage of its own.
    """
    op: ClassVar[str] = "pack"
    tensor: str
    dim: int
    factor: int
    name: str

    def validate(self) -> None:
        super().validate()
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 0 <= self.dim < 8:
            raise ScheduleError(self.op, self.tensor, f"dim must be a dimension index, got {self.dim!r}")
        check_factor(self.op, self.tensor, self.factor)


STEP_TYPES: dict[str, type[Step]] = {c.op: c for c in (
    Split, Tile, Fuse, Reorder, Unroll, Vectorize, Parallel, Stream, Prefetch, CacheWrite, ComputeAt, ComputeInline,
    Pack)}


def step_from_json(d: object) -> Step:
    """Rebuild a step from its JSON form, checking every field (the input may be untrusted)."""
    if not isinstance(d, dict) or d.get("op") not in STEP_TYPES:
        known = ", ".join(STEP_TYPES)
        raise ScheduleError("step", None, f"not a schedule step (expected an object with op in {known}): {d!r:.200}")
    cls = STEP_TYPES[d["op"]]
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(d) - names - {"op"}
    if extra:
        raise ScheduleError(cls.op, None, f"unknown fields {sorted(extra)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            v = d[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    try:
        step = cls(**kwargs)
    except TypeError as e:
        raise ScheduleError(cls.op, None, f"missing fields: {e}") from None
    step.validate()
    return step
