"""An HLO kernel and a tile config, lowered to the emulator's tiled kernel (grid, blocks, per-step
work): what XLA's TPU backend does with the dataset's tile bounds, as far as the emulator needs it.

- The output bounds tile the anchor (a convolution's output, a reduction's operand, or the root
  output; see `hlo.anchor`); the grid walks its physical dims major to minor, the kept dims of a
  reduction outside the reduced ones, and a convolution's contraction innermost (tiled by the kernel
  bounds).
- Every instruction is mapped onto the anchor's dims (`dim_maps`): back through broadcasts (their
  `dimensions`), convolutions (their dimension numbers), nested fusions (parameters to operands) and
  elementwise ops; forward through reductions to the outputs. A tensor's block is the tile of the
  dims it maps to, its full extent elsewhere, laid out in its own physical order: so a broadcast
  vector is a small block fetched once, a transposing copy reads its blocks in another order. A
  convolution input's spatial dim maps to its output spatial dim through the window (`Windowed`):
  its block is the output tile plus the halo, (t - 1) * stride + (size - 1) * dilation + 1 rows.
- Per step: the convolution's matmul on the MXU (rows: the batch times the output spatial tile; f32
  in `f32_mxu_passes` bf16 passes; one pass per window position), and every
  other computing instruction on the VPU, one vector-register op per (8, 128) of its block
  (transcendentals cost `transcendental_cost`), work recomputed each step as a fusion does.
  Blocks count their average padded extent over the array, so a tile that does not divide a dim
  pays only the remainder in its last block (emulator.Block.mean_padded).

Example::

    >>> from autotune.backends.tpu.hlo import HloKernel, TileConfig
    >>> from autotune.backends.tpu.emulator import PRESETS
    >>> # see tests/autotune/backends/test_tpu_hlo.py for real kernels
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

from autotune.backends.tpu.emulator import Block, TiledKernel, TileError, TpuCoreConfig
from autotune.backends.tpu.hlo import ArrayShape, Computation, HloError, HloKernel, Instruction, TileConfig, TileSpace



@dataclass(frozen=True)
class Windowed:
    """A convolution input's spatial dim, tiled through the output spatial dim `axis`: a tile of t
    outputs reads the input rows its windows cover, (t - 1) * stride + (size - 1) * dilation + 1
    (in base-dilated coordinates), so neighbouring tiles overlap by the halo and re-read it."""
    axis: int
    stride: int = 1
    size: int = 1
    dilation: int = 1
    base_dilation: int = 1

    def rows(self, t: int) -> int:
        """Input rows one output tile of t rows reads, halo included."""
        span = (t - 1) * self.stride + (self.size - 1) * self.dilation + 1
        return -(-span // self.base_dilation)

    @classmethod
    def of(cls, axis: "Axis", window: dict[str, Any]) -> "Axis":
        """The map of an input spatial dim whose output dim maps to `axis`, under one window dim
        (XLA's WindowDimension fields: size, stride, window_dilation, base_dilation)."""
        stride, size = int(window.get("stride", 1)), int(window.get("size", 1))
        dilation, base = int(window.get("window_dilation", 1)), int(window.get("base_dilation", 1))
        if type(axis) is not int or (stride, size, base) == (1, 1, 1):
            return axis  # not tiled, or a 1x1 window: the input dim is tiled like the output's
        return cls(axis, stride, size, dilation, base)


# an anchor logical dim, "K" (the contraction), a windowed anchor dim, or None (not tiled)
Axis = Union[int, str, Windowed, None]
FREE = {"parameter", "constant", "broadcast", "bitcast", "tuple", "get-tuple-element", "fusion", "reshape",
        "convolution", "dot", "iota"}
TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "divide", "tanh", "rsqrt", "sqrt",
                  "power", "logistic", "sine", "cosine", "rng", "atan2", "remainder"}


def _operand_maps(ins: Instruction, m: tuple[Axis, ...], operand: Instruction, j: int) -> tuple[Axis, ...] | None:
    """The map of operand j of ins, given ins's own map m (None where it cannot be told)."""
    if operand.is_tuple:
        return None
    r = operand.shape.rank
    if r == 0:
        return ()
    op = ins.opcode
    if op == "broadcast":
        dims = ins.dimensions or tuple(range(r))
        return tuple(m[d] for d in dims) if len(dims) == r else None
    if op == "transpose" and len(ins.dimensions) == r:
        out: list[Axis] = [None] * r
        for k, d in enumerate(ins.dimensions):
            out[d] = m[k]
        return tuple(out)
    if op == "convolution":
        cd = ins.conv_dims
        out = [None] * r
        if j == 0:
            out[cd["in_batch"]], out[cd["in_feat"]] = m[cd["out_batch"]], "K"
            window = list(ins.window) + [{}] * len(cd.get("in_spatial", ()))
            for a, b, w in zip(cd.get("in_spatial", ()), cd.get("out_spatial", ()), window):
                out[a] = Windowed.of(m[b], w)
        else:
            out[cd["k_in"]], out[cd["k_out"]] = "K", m[cd["out_feat"]]
        return tuple(out)
    if op == "dot":
        dd = ins.dot_dims
        contract = dd.get("lhs_contracting" if j == 0 else "rhs_contracting", ())
        batch = dd.get("lhs_batch" if j == 0 else "rhs_batch", ())
        free = [d for d in range(r) if d not in contract and d not in batch]
        nb = len(batch)
        lhs_free = (ins.shape.rank - nb) - len(free) if j == 1 else 0
        out = [None] * r
        for i, d in enumerate(batch):
            out[d] = m[i]
        for d in contract:
            out[d] = "K"
        for i, d in enumerate(free):
            out[d] = m[nb + lhs_free + i]
        return tuple(out)
    if op == "reduce":
        if j != 0:
            return ()
        kept = iter(m)
        return tuple(None if d in ins.dimensions else next(kept, None) for d in range(r))
    if ins.is_tuple or operand.shape.dims != ins.shape.dims:
        return None
    return m


def dim_maps(k: HloKernel, anchor_ins: Instruction, anchor_rank: int) -> dict[int, tuple[Axis, ...]]:
    """instruction id -> the anchor dim (or "K") each of its logical dims maps to."""
    comps: dict[int, Computation] = {}
    for comp, ins in k.walk():
        comps[ins.id] = comp
    maps: dict[int, tuple[Axis, ...]] = {anchor_ins.id: tuple(range(anchor_rank))}
    callers: dict[int, Instruction] = {}
    for comp, ins in [(k.entry, k.root), *k.walk()]:
        if ins.opcode == "fusion":
            for c in ins.called:
                callers[c] = ins
    everything = [(k.entry, p) for p in k.parameters()] + [(k.entry, k.root)] + list(k.walk())
    for _ in range(8):  # propagate to a fixed point (graphs are small)
        changed = False
        for comp, ins in everything:
            m = maps.get(ins.id)
            if m is None:
                continue
            if ins.opcode == "fusion":  # into the callee: its root gets the fusion's map
                callee = k.computation(ins.called[0])
                if callee.root_id not in maps and not ins.is_tuple:
                    maps[callee.root_id] = m
                    changed = True
            if ins.opcode == "parameter" and comp.id in callers:  # out to the caller's operand
                caller = callers[comp.id]
                outer = caller.operands[ins.parameter_number]
                if outer not in maps:
                    maps[outer] = m
                    changed = True
            by_id = comp.by_id if comp.id != k.entry_id else {**k.entry.by_id}
            for j, o in enumerate(ins.operands):
                if o in maps or o not in by_id:
                    continue
                om = _operand_maps(ins, m, by_id[o], j)
                if om is not None:
                    maps[o] = om
                    changed = True
        # forward: an instruction whose operand is mapped and whose shape it shares, or a reduction of it
        for comp, ins in everything:
            if ins.id in maps or ins.is_tuple:
                continue
            by_id = comp.by_id
            for j, o in enumerate(ins.operands):
                if o not in maps or by_id.get(o) is None or by_id[o].is_tuple:
                    continue
                src = by_id[o]
                if ins.opcode == "reduce" and j == 0:
                    maps[ins.id] = tuple(a for d, a in enumerate(maps[o]) if d not in ins.dimensions)
                elif src.shape.dims == ins.shape.dims and ins.opcode not in ("broadcast", "reshape"):
                    maps[ins.id] = maps[o]
                else:
                    continue
                changed = True
                break
        if not changed:
            break
    return maps


def _block(name: str, shape: ArrayShape, m: tuple[Axis, ...] | None, tile: dict[Axis, int],
           axis_of: dict[Axis, int], vreg: bool = False) -> Block:
    m = m if m is not None else (None,) * shape.rank

    def extent(d: int, a: Axis) -> int:
        if isinstance(a, Windowed):  # a convolution input's spatial dim: the output tile plus its halo
            return a.rows(tile[a.axis]) if a.axis in tile else shape.dims[d]
        return tile.get(a, shape.dims[d]) if a is not None else shape.dims[d]
    elems = [min(extent(d, a), shape.dims[d]) for d, a in enumerate(m)]
    grid_axis = [axis_of.get(a.axis if isinstance(a, Windowed) else a) for a in m]
    phys = shape.physical
    mt = shape.vreg_tile if vreg else shape.memory_tile
    return Block(name, shape.physical_shape or (1,), tuple(elems[d] for d in phys) or (1,),
                 tuple(grid_axis[d] for d in phys) or (None,), shape.itemsize, mt or (1,))


def epilogue_ids(k: HloKernel) -> set[int]:
    """Ids of the instructions that use a contraction's or reduction's result (directly, through
    other instructions, or through a nested fusion's parameter): a fusion runs them once per output
    block, on the finished sum, not at every step of the contraction."""
    callers: dict[int, Instruction] = {}
    for _, ins in k.walk():
        if ins.opcode == "fusion":
            for c in ins.called:
                callers[c] = ins
    seeds = {ins.id for _, ins in k.walk() if ins.opcode in ("convolution", "dot", "reduce")}
    after: set[int] = set()
    for _ in range(8):  # to a fixed point (graphs are small)
        grew = False
        for comp, ins in k.walk():
            if ins.id in after:
                continue
            uses = any(o in seeds or o in after for o in ins.operands)
            if ins.opcode == "parameter" and comp.id in callers:
                outer = callers[comp.id].operands[ins.parameter_number]
                uses = outer in seeds or outer in after
            if uses:
                after.add(ins.id)
                grew = True
        if not grew:
            break
    return after


STREAM_BLOCK_BYTES = 1 << 20
# the core's constants lower() reads (calibration caches lowered kernels by them)
LOWERING_FIELDS = ("f32_mxu_passes", "transcendental_cost")


def _stream_bounds(shape: ArrayShape) -> tuple[int, ...]:
    """The bounds XLA would pick itself for a kernel without tile parameters: whole minor dims,
    the major dims split until a block holds at most STREAM_BLOCK_BYTES."""
    b = list(shape.max_bounds())
    for i in range(len(b)):
        while b[i] > 1 and shape.padded_bytes() * math.prod(b) / math.prod(shape.max_bounds()) > STREAM_BLOCK_BYTES:
            b[i] = -(-b[i] // 2)
    return tuple(b)


def _tuple_outputs(k: HloKernel) -> list[tuple[str, ArrayShape, int | None]]:
    """(name, shape, id of the fused instruction producing it) per output of the kernel."""
    fused = k.fused()
    root = fused.root
    if root.opcode == "tuple":
        return [(f"{k.name}[{i}]", fused.by_id[o].shape, o) for i, o in enumerate(root.operands)]
    return [(k.name, root.shape, root.id)]


def lower(k: HloKernel, cfg: TileConfig, core: TpuCoreConfig, space: TileSpace | None = None) -> TiledKernel:
    """The tiled kernel XLA runs for this config (TileError if the config does not fit the kernel)."""
    space = space or TileSpace(k)
    try:
        space.validate(cfg)
    except HloError as e:
        raise TileError(str(e)) from None
    an = space.anchor
    ashape = an.shape
    ob = cfg.output_bounds or (ashape.max_bounds() if space.tileable else _stream_bounds(ashape))
    tile: dict[Axis, int] = dict(ashape.tile_elements(ob))
    extent: dict[Axis, int] = {d: ashape.dims[d] for d in range(ashape.rank)}
    conv = an.conv
    if conv is not None and space.kshape is not None:
        kd = int(conv.conv_dims["k_in"])
        extent["K"] = space.kshape.dims[kd]
        kb = cfg.kernel_bounds or space.kshape.max_bounds()
        tile["K"] = space.kshape.tile_elements(kb)[kd]
    order = [d for d in ashape.physical if d not in an.reduced] + [d for d in ashape.physical if d in an.reduced]
    axes: list[Axis] = [*order, *(["K"] if "K" in extent else [])]
    grid = tuple(-(-extent[a] // tile[a]) for a in axes)
    axis_of = {a: i for i, a in enumerate(axes)}
    maps = dim_maps(k, an.instruction, ashape.rank) if an.instruction is not None else {}
    # the entry's operands: the kernel's parameters, mapped through the root fusion's parameters
    inputs = []
    for p in k.parameters():
        if p.is_tuple:
            continue
        inputs.append(_block(p.name, p.shape, maps.get(p.id), tile, axis_of))
    outs = [_block(n, s, maps.get(i) if i is not None else None, tile, axis_of) for n, s, i in _tuple_outputs(k)]
    if not space.tileable:  # a reshape streams its operand in as many steps as its output
        steps = math.prod(grid)
        inputs = [Block(b.name, b.shape, (-(-b.shape[0] // steps), *b.shape[1:]), (0 if steps > 1 else None,
                        *(None,) * (len(b.shape) - 1)), b.itemsize, b.tile) for b in inputs]
    # per-step work, and the epilogue done once per output block
    vregs = epilogue = 0.0
    after = epilogue_ids(k) if conv is not None or an.reduced else set()
    for _, ins in k.walk():
        if ins.opcode in FREE or ins.is_tuple or ins.shape.rank == 0:
            continue
        b = _block(ins.name, ins.shape, maps.get(ins.id), tile, axis_of, vreg=True)
        cost = core.transcendental_cost if ins.opcode in TRANSCENDENTAL else 1.0
        if ins.id in after:
            epilogue += math.prod(b.mean_padded()) / (8 * 128) * cost
        else:
            vregs += math.prod(b.mean_padded()) / (8 * 128) * cost
    mxu = None
    passes = 1
    flops = 0.0
    if conv is not None:
        cd = conv.conv_dims
        # the step's matmul: rows are the batch and output spatial tile, one pass per window position
        bm = tile[int(cd["out_batch"])] * math.prod(tile[int(d)] for d in cd.get("out_spatial", ()))
        bn = tile[int(cd["out_feat"])]
        mxu = (bm, tile["K"], bn)
        positions = math.prod(int(w.get("size", 1)) for w in conv.window)
        passes = (core.f32_mxu_passes if conv.shape.dtype == "f32" else 1) * positions
        flops = 2.0 * math.prod(conv.shape.dims) * extent["K"] * positions
    red_axes = tuple(axis_of[d] for d in an.reduced) + ((axis_of["K"],) if "K" in axis_of else ())
    return TiledKernel(grid, tuple(inputs), outs[0], mxu=mxu, reduction_axes=red_axes, name=k.name, flops=flops,
                       extra_outputs=tuple(outs[1:]), vpu_vreg_ops=vregs, mxu_passes=passes,
                       epilogue_vreg_ops=epilogue,
                       meta={"axes": axes, "tile": tile})
