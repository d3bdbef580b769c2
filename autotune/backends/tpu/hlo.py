"""Kernels as XLA describes them: a fused HLO graph (computations of instructions with dtypes,
shapes, layouts and every operand and output) and tile configs as the TpuGraphs dataset records
them (kernel, output and input bounds, each in its tensor's physical order, major to minor, with
the two most minor dims counted in units of the (8, 128) hardware tile; a rank-1 tensor's one dim
in units of 1024 elements).

`load_real(path)` reads a file in the format of ../shared/tpu_real/kernels.json (timed runs of real
XLA kernels); `TileSpace(kernel)` is a kernel's space of tile configs, which contains every config
the dataset records for it.

Example::

    >>> k = HloKernel.from_json({"kernel": "copy.1", "entry_id": 2, "computations": [{"name": "copy.1",
    ...     "id": 2, "root_id": 2, "instructions": [
    ...     {"name": "p", "opcode": "parameter", "dtype": "f32", "shape": [64, 256], "id": 1, "operands": [],
    ...      "layout": {"minor_to_major": [1, 0], "tiles": [[8, 128]]}},
    ...     {"name": "copy.1", "opcode": "copy", "dtype": "f32", "shape": [64, 256], "id": 2, "operands": [1],
    ...      "layout": {"minor_to_major": [0, 1], "tiles": [[8, 128]]}}]}]})
    >>> k.root.outputs[0].physical_shape, TileSpace(k).output_max
    ((256, 64), (32, 1))
"""
from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from autotune.errors import AutotuneError

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
               "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
UNIT = (8, 128)      # bounds units of the two most minor dims
RANK1_UNIT = 1024    # bounds unit of a rank-1 tensor


class HloError(AutotuneError, ValueError):
    """A kernel description or tile config that does not follow the format; the message says where."""


@dataclass(frozen=True)
class ArrayShape:
    """One array: dtype, logical dims, layout (minor_to_major, memory tiles such as ((8, 128),))."""
    dtype: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ((8, 128),)
    memory_space: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str) -> "ArrayShape":
        dtype, dims = d.get("dtype"), tuple(int(x) for x in d.get("shape", ()))
        if dtype not in DTYPE_BYTES:
            raise HloError(f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
        lay = d.get("layout") or {}
        m2m = tuple(int(x) for x in lay.get("minor_to_major", range(len(dims) - 1, -1, -1)))
        if sorted(m2m) != list(range(len(dims))):
            raise HloError(f"{where}: minor_to_major {list(m2m)} is not a permutation of the {len(dims)} dims")
        tiles = tuple(tuple(int(x) for x in t) for t in lay.get("tiles", ())) or ((8, 128),)
        return cls(dtype, dims, m2m, tiles, int(lay.get("memory_space", 0)))

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def physical(self) -> tuple[int, ...]:
        """Logical dim indices, major to minor."""
        return tuple(reversed(self.minor_to_major))

    @property
    def physical_shape(self) -> tuple[int, ...]:
        return tuple(self.dims[d] for d in self.physical)

    @property
    def memory_tile(self) -> tuple[int, ...]:
        """The stored tile in elements: (rows, cols) for rank >= 2, (n,) for rank 1, () for a
        scalar. XLA tiles repeatedly ("Tiled layout", openxla.org/xla/tiled_layout): the first tile
        pads and orders the array in memory, the later ones only order elements inside it, so bf16
        T(8,128)(2,1) and pred T(8,128)(4,1) are 8 x 128 elements like f32 (2 KiB and 1 KiB tiles)."""
        if self.rank == 0:
            return ()
        first = self.tiles[0]
        if self.rank == 1 or len(first) == 1:
            return (math.prod(first),) if self.rank == 1 else (1, math.prod(first))
        return first[0], first[1]

    @property
    def vreg_tile(self) -> tuple[int, ...]:
        """The elements one vector register holds, for work on the VPU: 8 sublanes x 128 lanes of
        32 bits, so a sub-32-bit type packs 32 / bits rows per sublane (bf16 16 x 128, pred and
        8-bit types 32 x 128); rank 1 and scalars as stored."""
        if self.rank < 2:
            return self.memory_tile
        return 8 * max(1, 4 // self.itemsize), 128

    def units(self) -> tuple[int, ...]:
        """Elements per bound unit of each physical dim."""
        if self.rank == 0:
            return ()
        if self.rank == 1:
            return (RANK1_UNIT,)
        return (1,) * (self.rank - 2) + UNIT

    def max_bounds(self) -> tuple[int, ...]:
        return tuple(-(-e // u) for e, u in zip(self.physical_shape, self.units()))

    def tile_elements(self, bounds: Sequence[int]) -> dict[int, int]:
        """Logical dim -> tile extent in elements, for bounds in physical order (clipped to the dims)."""
        return {d: min(b * u, self.dims[d]) for d, b, u in zip(self.physical, bounds, self.units())}

    def padded_bytes(self) -> int:
        """Bytes the array occupies in HBM: its minor dims padded to whole memory tiles."""
        phys = list(self.physical_shape)
        for i, t in enumerate(reversed(self.memory_tile)):
            phys[-1 - i] = -(-phys[-1 - i] // t) * t
        return math.prod(phys) * self.itemsize


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction; `outputs` holds one ArrayShape, or one per element of a tuple."""
    id: int
    name: str
    opcode: str
    outputs: tuple[ArrayShape, ...]
    operands: tuple[int, ...] = ()
    called: tuple[int, ...] = ()
    dimensions: tuple[int, ...] = ()
    parameter_number: int = 0
    fusion_kind: str = ""
    window: tuple[dict, ...] = ()
    conv_dims: dict = field(default_factory=dict, hash=False, compare=False)
    feature_group_count: int = 1
    dot_dims: dict = field(default_factory=dict, hash=False, compare=False)
    # fields the TpuGraphs featurizer reads where an HLO has them (kernels.json carries them when set):
    # slice_dims [{start, stride, limit}], dynamic_slice_sizes, padding_config [{edge_padding_low,
    # edge_padding_high, interior_padding}], is_stable (sort), batch_group_count (convolution)
    slice_dims: tuple[dict, ...] = ()
    dynamic_slice_sizes: tuple[int, ...] = ()
    padding_config: tuple[dict, ...] = ()
    is_stable: bool = False
    batch_group_count: int = 1

    @property
    def is_tuple(self) -> bool:
        return len(self.outputs) != 1

    @property
    def shape(self) -> ArrayShape:
        if self.is_tuple:
            raise HloError(f"{self.name} is a tuple of {len(self.outputs)} arrays")
        return self.outputs[0]

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str) -> "Instruction":
        w = f"{where}/{d.get('name', '?')}"
        if d.get("dtype") == "tuple":
            outs = tuple(ArrayShape.from_json(e, f"{w}[{i}]") for i, e in enumerate(d.get("shape", ())))
        else:
            outs = (ArrayShape.from_json(d, w),)
        return cls(int(d["id"]), str(d["name"]), str(d["opcode"]), outs, tuple(d.get("operands", ())),
                   tuple(d.get("called", ())), tuple(d.get("dimensions", ())), int(d.get("parameter_number", 0)),
                   str(d.get("fusion_kind", "")), tuple(d.get("window") or ()), dict(d.get("conv_dims") or {}),
                   int(d.get("feature_group_count", 1)), dict(d.get("dot_dims") or {}),
                   tuple(d.get("slice_dims") or ()), tuple(int(x) for x in d.get("dynamic_slice_sizes") or ()),
                   tuple(d.get("padding_config") or ()), bool(d.get("is_stable", False)),
                   int(d.get("batch_group_count", 1)))


@dataclass(frozen=True)
class Computation:
    name: str
    id: int
    root_id: int
    instructions: tuple[Instruction, ...]

    @property
    def by_id(self) -> dict[int, Instruction]:
        return {i.id: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        return self.by_id[self.root_id]

    def parameters(self) -> list[Instruction]:
        return sorted((i for i in self.instructions if i.opcode == "parameter"), key=lambda i: i.parameter_number)


@dataclass(frozen=True)
class HloKernel:
    """A kernel: its computations (the entry one holds its parameters and root; a fusion root calls
    the fused computation, which may call nested fusions and reducers)."""
    name: str
    entry_id: int
    computations: tuple[Computation, ...]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HloKernel":
        name = str(d.get("kernel", "?"))
        try:
            comps = tuple(Computation(str(c["name"]), int(c["id"]), int(c["root_id"]),
                                      tuple(Instruction.from_json(i, f"{name}/{c['name']}") for i in c["instructions"]))
                          for c in d["computations"])
            k = cls(name, int(d["entry_id"]), comps)
        except KeyError as e:
            raise HloError(f"kernel {name}: missing field {e}") from None
        ids = {c.id for c in comps}
        if k.entry_id not in ids:
            raise HloError(f"kernel {name}: entry_id {k.entry_id} is none of its computations {sorted(ids)}")
        for c in comps:
            known = c.by_id
            if c.root_id not in known:
                raise HloError(f"kernel {name}/{c.name}: root_id {c.root_id} is not one of its instructions")
            for i in c.instructions:
                bad = [o for o in i.operands if o not in known] + [x for x in i.called if x not in ids]
                if bad:
                    raise HloError(f"kernel {name}/{c.name}/{i.name}: refers to unknown ids {bad}")
        return k

    def computation(self, cid: int) -> Computation:
        return next(c for c in self.computations if c.id == cid)

    @property
    def entry(self) -> Computation:
        return self.computation(self.entry_id)

    @property
    def root(self) -> Instruction:
        return self.entry.root

    def fused(self) -> Computation:
        """The computation doing the work: the root fusion's callee, or the entry itself."""
        r = self.root
        return self.computation(r.called[0]) if r.opcode == "fusion" and r.called else self.entry

    def walk(self, comp: Computation | None = None) -> Iterator[tuple[Computation, Instruction]]:
        """Every instruction of the work, nested fusions included (reducers excluded)."""
        comp = comp or self.fused()
        for ins in comp.instructions:
            yield comp, ins
            if ins.opcode == "fusion":
                for c in ins.called:
                    yield from self.walk(self.computation(c))

    def parameters(self) -> list[Instruction]:
        return self.entry.parameters()


@dataclass(frozen=True)
class TileConfig:
    """Tile bounds as the dataset records them (empty where a kernel has none)."""
    kernel_bounds: tuple[int, ...] = ()
    output_bounds: tuple[int, ...] = ()
    input_bounds: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TileConfig":
        return cls(*(tuple(int(x) for x in d.get(k, ())) for k in ("kernel_bounds", "output_bounds", "input_bounds")))

    def to_json(self) -> dict[str, list[int]]:
        return {"kernel_bounds": list(self.kernel_bounds), "output_bounds": list(self.output_bounds),
                "input_bounds": list(self.input_bounds)}

    def config_feat(self) -> np.ndarray:
        """The dataset's 24 tile config features: per bounds list 6 values (0-padded), sum, product."""
        out: list[float] = []
        for b in (self.kernel_bounds, self.output_bounds, self.input_bounds):
            out += [float(x) for x in (list(b) + [0] * 6)[:6]] + [float(sum(b)), float(math.prod(b)) if b else 0.0]
        return np.asarray(out, np.float32)

    def __str__(self) -> str:
        return f"k{list(self.kernel_bounds)} o{list(self.output_bounds)}"


@dataclass(frozen=True)
class RealRun:
    config: TileConfig
    ns: float
    error: bool = False
    default: bool = False


@dataclass(frozen=True)
class RealKernel:
    """A kernel and its timed runs. Repeated runs of one config are merged (median runtime)."""
    kernel: HloKernel
    runs: tuple[RealRun, ...]

    def configs(self) -> tuple[list[TileConfig], np.ndarray]:
        """Distinct configs that ran without error and their median runtime in ns."""
        times: dict[TileConfig, list[float]] = {}
        for r in self.runs:
            if not r.error:
                times.setdefault(r.config, []).append(r.ns)
        cfgs = list(times)
        return cfgs, np.asarray([statistics.median(times[c]) for c in cfgs], np.float64)

    @property
    def default(self) -> TileConfig | None:
        return next((r.config for r in self.runs if r.default), None)


def load_real(path: str | os.PathLike[str]) -> list[RealKernel]:
    """Kernels and timed runs from a file in the format of ../shared/tpu_real/kernels.json, failed
    runs included: a run with `"error": true`, no runtime (`"ns": null`) or one <= 0 is kept as
    failed (ns nan), counted but never ranked (RealKernel.configs() leaves failed runs out)."""
    p = os.fspath(path)
    try:
        with open(p) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise HloError(f"{p}: not JSON ({e}); expected a list of kernels like ../shared/tpu_real/kernels.json") from None
    if not isinstance(data, list):
        raise HloError(f"{p}: expected a JSON list of kernels, got {type(data).__name__}")
    out = []
    for d in data:
        k = HloKernel.from_json(d)
        runs = []
        for r in d.get("runs", ()):
            ns = r.get("ns")
            try:
                t = math.nan if ns is None else float(ns)
            except (TypeError, ValueError):
                raise HloError(f"{p}: kernel {k.name}: a run's ns is {ns!r}, not a number or null") from None
            failed = bool(r.get("error", False)) or not math.isfinite(t) or t <= 0
            runs.append(RealRun(TileConfig.from_json(r), math.nan if failed else t, failed, bool(r.get("default", False))))
        if not runs:
            raise HloError(f"{p}: kernel {k.name} has no runs")
        out.append(RealKernel(k, tuple(runs)))
    return out


# ---- the iteration space of a kernel, and its space of tile configs -----------------------------

@dataclass(frozen=True)
class Anchor:
    """What the output bounds tile: the convolution output, a reduction's operand, or the root output.
    `reduced`: logical dims of `shape` a reduction sums over; `conv`: the convolution, if any."""
    shape: ArrayShape
    reduced: tuple[int, ...] = ()
    conv: Instruction | None = None
    instruction: Instruction | None = None


def anchor(k: HloKernel) -> Anchor:
    comp_of: dict[int, Computation] = {}
    convs, reduces = [], []
    for comp, ins in k.walk():
        comp_of[ins.id] = comp
        if ins.opcode in ("convolution", "dot"):
            convs.append(ins)
        elif ins.opcode == "reduce":
            reduces.append(ins)
    if convs:
        return Anchor(convs[0].shape, (), convs[0], convs[0])
    if reduces:
        r = max(reduces, key=lambda i: math.prod(comp_of[i.id].by_id[i.operands[0]].shape.dims))
        op = comp_of[r.id].by_id[r.operands[0]]
        return Anchor(op.shape, tuple(r.dimensions), None, op)
    root = k.fused().root
    outs = root.outputs
    return Anchor(max(outs, key=lambda s: math.prod(s.dims)), (), None, root)


def conv_kernel_operand(k: HloKernel, conv: Instruction) -> ArrayShape:
    comp = next(c for c, i in k.walk() if i.id == conv.id)
    return comp.by_id[conv.operands[1]].shape


class TileSpace:
    """The tile configs of a kernel: output bounds over the anchor's physical dims and, for a
    convolution, kernel bounds over its kernel operand's physical dims. A kernel dim that is also an
    output dim (the output feature dim) must cover the same elements as the output bound does.

    Example::

        >>> # see the module docstring
    """

    def __init__(self, k: HloKernel) -> None:
        self.kernel = k
        self.anchor = anchor(k)
        self.output_max = self.anchor.shape.max_bounds()
        self.kshape = conv_kernel_operand(k, self.anchor.conv) if self.anchor.conv else None
        self.kernel_max = self.kshape.max_bounds() if self.kshape else ()
        # kernel logical dim tied to an output logical dim (the output feature dim)
        self.tied: dict[int, int] = {}
        # a reshape (or bitcast) kernel has no tile parameters: one config, the empty one
        self.tileable = k.root.opcode not in ("reshape", "bitcast")
        if not self.tileable:
            self.output_max = ()
        if self.anchor.conv is not None:
            cd = self.anchor.conv.conv_dims
            self.tied = {int(cd.get("k_out", 1)): int(cd.get("out_feat", 1))}

    def validate(self, cfg: TileConfig) -> TileConfig:
        """cfg, or HloError naming what is wrong with it."""
        name = self.kernel.name
        for label, b, mx in (("output_bounds", cfg.output_bounds, self.output_max),
                             ("kernel_bounds", cfg.kernel_bounds, self.kernel_max)):
            if b and len(b) != len(mx):
                raise HloError(f"{name}: {label} {list(b)} has {len(b)} dims; this kernel's have {len(mx)} "
                               f"(physical order, at most {list(mx)})")
            if any(x < 1 or x > m for x, m in zip(b, mx)):
                raise HloError(f"{name}: {label} {list(b)} outside [1, {list(mx)}]")
        if self.kshape is not None and cfg.kernel_bounds and cfg.output_bounds:
            ke = self.kshape.tile_elements(cfg.kernel_bounds)
            oe = self.anchor.shape.tile_elements(cfg.output_bounds)
            for kd, od in self.tied.items():
                if ke[kd] != oe[od]:
                    raise HloError(f"{name}: kernel_bounds {list(cfg.kernel_bounds)} tile the output feature dim "
                                   f"by {ke[kd]} elements but output_bounds {list(cfg.output_bounds)} by {oe[od]}")
        return cfg

    def contains(self, cfg: TileConfig) -> bool:
        try:
            self.validate(cfg)
        except HloError:
            return False
        return True

    def sample(self, rng: np.random.Generator, n: int) -> list[TileConfig]:
        """Up to n distinct valid configs drawn uniformly per dim (log-uniform over the bound)."""
        if not self.tileable:
            return [TileConfig()]

        def draw(mx: int) -> int:
            return int(min(mx, max(1, round(math.exp(rng.uniform(0, math.log(mx + 1))) - 0.5)) if mx > 1 else 1))
        out: dict[TileConfig, None] = {}
        for _ in range(n * 20):
            if len(out) >= n:
                break
            ob = tuple(draw(m) for m in self.output_max)
            kb: tuple[int, ...] = ()
            if self.kshape is not None:
                oe = self.anchor.shape.tile_elements(ob)
                units = dict(zip(self.kshape.physical, self.kshape.units()))
                kb = tuple(-(-oe[self.tied[d]] // units[d]) if d in self.tied else draw(m)
                           for d, m in zip(self.kshape.physical, self.kernel_max))
            cfg = TileConfig(kb, ob)
            if self.contains(cfg):
                out[cfg] = None
        return list(out)
