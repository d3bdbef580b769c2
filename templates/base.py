"""What a template is: a compute definition, its knob space, a schedule per config, a reference.

Example::

    >>> from autotune.templates import get_template
    >>> t = get_template("matmul")
    >>> t.parse_shape("64x32x16")
    {'M': 64, 'N': 32, 'K': 16}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from autotune.errors import ShapeError
from autotune.ir.expr import Tensor
from autotune.ir.serialize import MAX_RANK
from autotune.schedule import Schedule
from autotune.codegen.options import CodegenOptions
from autotune.space import Config, ConfigSpace

Shape = dict[str, int]
MAX_ELEMENTS = 1 << 28  # 256 Mi elements per tensor: a bound on what a shape may allocate
_PROBE = (251, 241, 239, 233, 229, 227, 223, 211, 199, 197)  # distinct dim values to see where each dim lands


@dataclass(frozen=True)
class Template:
    """An operator the tuner can search.

    define(shape, dtype) -> output tensor of the compute definition
    space(shape, dtype, threads) -> ConfigSpace of its knobs
    schedule(sched, cfg, shape) applies primitives for a config (and returns codegen options)
    define_for(shape, dtype, cfg) -> the definition that config schedules, when not define's;
        its inputs and output may be other shapes of the same C-ordered elements as define's (a
        flattened image): the kernel still takes and returns define's shapes, as reshaped views
    reference(*inputs) -> the expected output, in NumPy
    flops(shape) -> floating-point operations (or bytes moved, for memory-bound operators)
    backend: where its kernels run, the name of an autotune.backends backend ("cpu": Numba on
    this CPU; "tpu_emulator": the emulated TPU core); cost-model features, program graphs, the
    search's prior and the default runner are that backend's
    """
    name: str
    description: str
    dims: tuple[str, ...]
    define: Callable[[Shape, str], Tensor]
    space: Callable[[Shape, str, int], ConfigSpace]
    schedule: Callable[[Schedule, Config, Shape, int], "CodegenOptions"]
    reference: Callable[..., np.ndarray]
    flops: Callable[[Shape], float]
    default_shape: str
    metric: str = "GFLOP/s"
    extra_dims: Mapping[str, int] = field(default_factory=dict)  # optional dims with defaults
    presets: Callable[[Shape, str, int], list[dict]] | None = None  # known-good configs to try first
    torch_reference: Callable[..., object] | None = None  # the same op in PyTorch (a baseline)
    shape_of: Callable[..., Mapping[str, int]] | None = None  # input arrays -> shape dims (for the decorator)
    free_dims: Callable[[str], bool] | None = None  # accepts dim names beyond `dims` (template-free ops)
    # the definition a config schedules, where a knob chooses between equivalent definitions (same
    # inputs, same output; e.g. conv2d over a flattened padded image); default: define
    define_for: Callable[[Shape, str, Config], Tensor] | None = None
    backend: str = "cpu"
    # template-free ops: the definition at a shape and dtype as data (autotune.ir.serialize), what
    # measurement workers and tuning logs receive instead of code; and every dim in the order a
    # shape string gives them (each input's dims in turn), () while an input's rank is unknown
    definition: Callable[[Shape, str], dict] | None = None
    dim_names: Callable[[], tuple[str, ...]] | None = None
    # template-free ops: the placeholders a call passes, in the op's argument order (the definition
    # function's signature; an argument the definition never reads is still one); default
    # (call_args): the placeholders define() reads, in the order it first reads them
    arguments: Callable[[Shape, str], list[Tensor]] | None = None

    def call_args(self, shape: Shape, dtype: str) -> list[Tensor]:
        """The placeholders a call of the op passes, in order: what a kernel of Task.build, the
        reference and Template.inputs take.

        >>> from autotune.templates import get_template
        >>> [t.name for t in get_template("dense_bias_relu").call_args({"M": 4, "N": 3, "K": 8}, "float32")]
        ['A', 'W', 'bias']
        """
        if self.arguments is not None:
            return list(self.arguments(shape, dtype))
        from autotune.ir.expr import input_tensors
        return [t for t in input_tensors(self.define(shape, dtype)) if t.is_placeholder]

    def argument_names(self) -> list[str]:
        """The names of the op's arguments, in order (a template-free op's: its parameters).

        >>> from autotune.templates import get_template
        >>> get_template("matmul").argument_names()
        ['A', 'B']
        """
        if self.dim_names is not None:  # a template-free op: its dims are each input's axis 0
            return [d[:-1] for d in self.dims]
        probe = {**self.extra_dims, **dict(zip(self.dims, _PROBE))}
        return [t.name for t in self.call_args(probe, "float32")]

    def parse_shape(self, shape: str | Sequence[int] | Mapping[str, int], dtype: str = "float32") -> Shape:
        """'1024x1024x1024', (1024, 1024, 1024) or {'M': 1024, ...} -> {'M': 1024, ...}, validated
        (the definition is built once at `dtype`)."""
        if isinstance(shape, Mapping):
            vals = dict(shape)
            unknown = {k for k in set(vals) - set(self.dims) - set(self.extra_dims)
                       if not (self.free_dims and isinstance(k, str) and self.free_dims(k))}
            if unknown:
                raise ShapeError(f"{self.name}: unknown shape dims {sorted(unknown)}; expected {self.dims_help()}")
            out = {**self.extra_dims, **vals}
        else:
            if isinstance(shape, str):
                parts = [p for p in shape.lower().replace(",", "x").split("x") if p.strip()]
                try:
                    nums = [int(p) for p in parts]
                except ValueError:
                    raise ShapeError(f"{self.name}: bad shape {shape!r}; expected integers like "
                                     f"{self.default_shape!r} for {self.dims_help()}") from None
            else:
                nums = list(shape)
            if self.dim_names is not None:
                return self.parse_shape(self._dims_of(shape, nums), dtype)
            names = list(self.dims) + list(self.extra_dims)
            if not len(self.dims) <= len(nums) <= len(names):
                raise ShapeError(f"{self.name}: shape {shape!r} has {len(nums)} numbers; expected "
                                 f"{len(self.dims)} ({self.dims_help()}), e.g. {self.default_shape!r}")
            out = {**self.extra_dims, **dict(zip(names, nums))}
        for d in self.dims:
            if d not in out:
                raise ShapeError(f"{self.name}: shape is missing {d!r}; expected {self.dims_help()}")
        for k, v in out.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if k in self.extra_dims else 1):
                raise ShapeError(f"{self.name}: {k} must be a positive integer, got {v!r}")
            if v > MAX_ELEMENTS:
                raise ShapeError(f"{self.name}: {k}={v} is too large (at most {MAX_ELEMENTS})")
        # one canonical order (declared dims, then extra dims, then any others by name; a template-
        # free op's: each input's dims in turn, as its shape strings give them): task keys must not
        # depend on how the user ordered a mapping
        order = list(self.dims) + [k for k in self.extra_dims if k not in self.dims]
        order += sorted(set(out) - set(order))
        if self.dim_names is not None:
            order = argument_dims(order) or order
        out = {k: int(out[k]) for k in order if k in out}
        self.check(out, dtype)
        return out

    def _dims_of(self, shape: object, nums: list[int]) -> dict[str, int]:
        names = self.dim_names() if self.dim_names is not None else ()
        if not names:
            raise ShapeError(f"{self.name}: a shape as numbers needs each input's rank, known once the op has run or "
                             f"a log with it is loaded; pass a mapping like {{'{self.dims[0]}': 64, ...}} instead")
        if len(nums) != len(names):
            raise ShapeError(f"{self.name}: shape {shape!r} has {len(nums)} numbers; expected {len(names)} "
                             f"({self.dims_help()})")
        return dict(zip(names, nums))

    def dims_help(self) -> str:
        if self.dim_names is not None and self.dim_names():
            return "x".join(self.dim_names())
        extra = "".join(f"[x{k}={v}]" for k, v in self.extra_dims.items())
        return "x".join(self.dims) + extra

    def check(self, shape: Shape, dtype: str = "float32") -> None:
        """Build the definition once (at `dtype`: a definition read as data may be known at no
        other) to reject impossible shapes with a clear message."""
        out = self.define(shape, dtype)
        from autotune.ir.expr import input_tensors
        for t in input_tensors(out):
            n = int(np.prod(t.shape))
            if n > MAX_ELEMENTS:
                raise ShapeError(f"{self.name}: tensor {t.name} would have {n} elements (at most {MAX_ELEMENTS})")

    def shape_from(self, *arrays: np.ndarray) -> Shape:
        """The shape dims of a call on these input arrays: `shape_of` when the template has one, else
        read off the definition's placeholders; dims no input shows (a pooling window) and extra dims
        take the default shape's values. The number of arrays and their ranks are checked (a one-line
        ShapeError naming the input and the rank it needs); the rest is the caller's to check against
        the task's arguments (Task.arguments).

        >>> from autotune.templates import get_template
        >>> get_template("dense_bias_relu").shape_from(np.zeros((4, 8)), np.zeros((8, 3)), np.zeros(3))
        {'M': 4, 'K': 8, 'N': 3}
        >>> get_template("matmul").shape_from(np.zeros(4), np.zeros((4, 3)))
        Traceback (most recent call last):
        ...
        autotune.errors.ShapeError: matmul: input A must have 2 dimensions [MxK], got shape (4,)
        """
        phs: list[Tensor] = []
        probe = {**self.extra_dims, **dict(zip(self.dims, _PROBE))}
        dim_of = {v: d for d, v in probe.items() if d in self.dims}
        if self.dim_names is None:  # fixed ranks (a template-free op's shape_of checks its own)
            phs = self.call_args(probe, "float32")
            if len(arrays) != len(phs):
                raise ShapeError(f"{self.name} takes {len(phs)} arrays ({', '.join(t.name for t in phs)}), "
                                 f"got {len(arrays)}")
            for t, a in zip(phs, arrays):
                if np.ndim(a) != t.ndim:
                    dims = "x".join(dim_of.get(n, "?") for n in t.shape)
                    raise ShapeError(f"{self.name}: input {t.name} must have {t.ndim} dimensions"
                                     f"{f' [{dims}]' if '?' not in dims else ''}, got shape {np.shape(a)}")
        if self.shape_of is not None:
            try:
                return dict(self.shape_of(*arrays))
            except (IndexError, KeyError, TypeError, AttributeError) as e:  # a shape_of of a user's template
                raise ShapeError(f"{self.name}: cannot read its shape off these inputs ({type(e).__name__}: {e}); "
                                 f"pass {len(phs) or 'its'} arrays of the ranks its definition reads") from None
        read: dict[str, int] = {}
        for t, a in zip(phs, arrays):
            for n, got in zip(t.shape, np.shape(a)):
                if n in dim_of:
                    read.setdefault(dim_of[n], int(got))
        default = self.parse_shape(self.default_shape) if self.default_shape else {}
        return {**{k: v for k, v in default.items() if k not in read}, **read}

    def inputs(self, shape: Shape, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
        """Random inputs in [-1, 1) of the op's arguments (call_args), in argument order."""
        return [rng.uniform(-1, 1, t.shape).astype(dtype) for t in self.call_args(shape, dtype)]


def argument_dims(names: Iterable[str]) -> list[str] | None:
    """The dims of a template-free op (an input's name and its axis, 0 to MAX_RANK - 1: X0, X1,
    W0) input by input, the inputs in the order their axis 0 comes: the order a shape string gives
    them, and task keys. None when a name is no such dim or an input has no axis 0.

    >>> argument_dims(["X0", "W0", "X1"]), argument_dims(["M", "N"])
    (['X0', 'X1', 'W0'], None)
    """
    names = list(names)
    axes = {str(d) for d in range(MAX_RANK)}
    if not names or any(len(n) < 2 or n[-1] not in axes for n in names):
        return None
    inputs = [n[:-1] for n in names if n[-1] == "0"]
    if {n[:-1] for n in names} != set(inputs):
        return None
    have = set(names)
    return [f"{p}{d}" for p in inputs for d in range(MAX_RANK) if f"{p}{d}" in have]
