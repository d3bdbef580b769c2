"""The tiled sketch: anything else (stencils, column reductions, convolutions the window rule does
not recognise): multi-level tiling of the output stage, S_o R_o S_m R_i S_i, with a register
accumulator, the innermost spatial loop vectorised, the inputs read along it packed into panels,
elementwise producers inlined."""
from __future__ import annotations

import math
from typing import Any

from autotune.ir import expr as te
from autotune.ir.expr import Var
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, Knob, SplitKnob, powers_of_two
from autotune.codegen.options import CodegenOptions
from autotune.space import fit

from .program import Program
from .sketch import Sketch
from .vectors import lanes

MAX_INNER = 64


def packable_inputs(p: Program) -> dict[str, dict[str, int]]:
    """Inputs of a reduction output read with a spatial axis as a whole index of a dimension
    that is not already contiguous in it: tensor -> {axis: dim}. Packing along that dim makes
    the axis contiguous, so it can be the vectorised one."""
    if p.output.body is None or not p.reduce:
        return {}
    axis_of = {a.var: a.name for a in p.output.axes}
    out: dict[str, dict[str, int]] = {}
    for ld in te.loads(p.output.body):
        t = ld.tensor
        if not t.is_placeholder:
            continue
        for d, ix in enumerate(ld.indices[:-1]):
            if isinstance(ix, Var) and ix in axis_of and ld.indices.count(ix) == 1:
                out.setdefault(t.name, {}).setdefault(axis_of[ix], d)
    return out


class TiledSketch(Sketch):
    """Multi-level tiling of the output stage. The default config: tiles of 8 x 16, 8 x 4 and
    8 x 1 (the last axis, the one before it, the others: an unrolled body of at most 4 vector
    loops; 32 with inlined padding took LLVM 90 s), reductions in blocks of 64, cache, vectorize,
    producers inlined."""

    name = "tiled"

    def __init__(self, p: Program) -> None:
        self.packable = packable_inputs(p)
        super().__init__(p)

    def vector_axes(self) -> list[str]:
        """Spatial axes the tiled sketch may vectorize (innermost): the last one, and any an input
        can be packed along."""
        last = [self.p.spatial[-1][0]] if self.p.spatial else []
        packed = sorted({a for axes in self.packable.values() for a in axes} - set(last))
        return last + packed

    def knobs(self) -> list[Knob]:
        knobs: list[Knob] = []
        lane = lanes(self.p.dtype)
        vec = self.vector_axes()
        for name, ext in self.p.spatial:
            inner = powers_of_two(min(ext, MAX_INNER))
            if name in vec and ext >= lane:  # may be the vectorised loop: whole vectors, up to four
                inner = sorted(set(inner) | set(fit([lane, 2 * lane, 3 * lane, 4 * lane], ext)))
            mid = powers_of_two(max(1, min(ext, 1024)))
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=2, candidates=[mid, inner], nested=False))
        for name, ext in self.p.reduce:
            cands = powers_of_two(min(ext, 1024))
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=1, candidates=[sorted(set(cands) | {ext})]))
        if len(vec) > 1:
            knobs.append(ChoiceKnob("vector_axis", vec))
        if self.p.reduce:
            knobs.append(ChoiceKnob("cache", [True, False]))
        for t in sorted(self.packable):
            knobs.append(ChoiceKnob(f"pack_{t}", [True, False]))
        if len(self.p.spatial) >= 2:
            knobs.append(ChoiceKnob("unroll", [True, False]))
        knobs.append(ChoiceKnob("vectorize", [True, False]))
        if self.p.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        for st in self.p.stages:
            t = self.p.tensors.get(st)
            if t is not None and not t.reduce_axes:
                knobs.append(ChoiceKnob(f"inline_{st}", [True, False]))
        return knobs

    def presets(self) -> list[dict[str, Any]]:
        """The default config, then `_tiled_presets`."""
        return [self.default_config()] + self._tiled_presets()

    def _tiled_presets(self) -> list[dict[str, Any]]:
        """For each packable vector axis: two vectors of it innermost, the last axis' tile of 4 or 8
        unrolled above it (the register tile of a direct convolution), whole reduction axes,
        producers materialised or inlined."""
        out = []
        lane = lanes(self.p.dtype)
        last = self.p.spatial[-1][0]
        for vec in self.vector_axes()[1:]:
            for ow in (4, 8):
                for inline in (False, True):
                    cfg = self.default_config()
                    cfg["vector_axis"] = vec
                    for k in self.space.knobs:
                        if k.name.startswith("inline_"):
                            cfg[k.name] = inline
                        if not k.name.startswith("tile_"):
                            continue
                        axis = k.name[5:]
                        ext = dict(self.p.spatial + self.p.reduce)[axis]
                        want = ((ext,) if axis in dict(self.p.reduce) else
                                (1, 2 * lane) if axis == vec else (1, ow) if axis == last else (1, 1))
                        cfg[k.name] = min(k.values(), key=lambda v: sum(abs(math.log2(a) - math.log2(b))
                                                                         for a, b in zip(v, want)))
                    if cfg not in out:
                        out.append(cfg)
        return out

    def default_value(self, k: Knob) -> Any:
        """A tile knob's default is the nearest to 8 x 16, 8 x 4 or 8 x 1 (64 for a reduction)."""
        if not k.name.startswith("tile_"):
            return super().default_value(k)
        names = [a for a, _ in self.p.spatial]
        inner = dict(zip(reversed(names), (16, 4)))
        want = (8, inner.get(k.name[5:], 1)) if getattr(k, "levels", 1) == 2 else (64,)
        return min(k.values(), key=lambda v: sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(v, want)))

    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """S_o R_o S_m R_i S_i: every spatial axis in three levels, every reduction axis in two; the
        vector axis' inner tile innermost (vectorized, its operands packed along it), the other inner
        tiles unrolled above it, an accumulator over the S_m loops; the outer loops ordered so the
        first one has work for every thread, and it runs in parallel."""
        out = self.p.output.name
        for st in self.p.stages:
            if cfg.get(f"inline_{st}"):
                s.compute_inline(st)
        vec = cfg.get("vector_axis", self.p.spatial[-1][0])
        for t, axes in sorted(self.packable.items()):
            if cfg.get(f"pack_{t}") and vec in axes:
                f = min(cfg[f"tile_{vec}"][1], s.tensors[t].shape[axes[vec]])
                s.pack(t, axes[vec], f, f"{t}_pack")
        outer, mid, inner, red_o, red_i = [], [], [], [], []
        ext_of: dict[str, int] = {}
        for name, ext in self.p.spatial:
            m, i = cfg[f"tile_{name}"]
            i = min(i, ext)
            m = max(1, min(m, -(-ext // i)))
            o_, rest = s.split(out, name, m * i, f"{name}_o", f"{name}_r")
            m_, i_ = s.split(out, rest, i, f"{name}_m", f"{name}_i")
            outer.append(o_); mid.append(m_); inner.append(i_)
            ext_of[o_], ext_of[i_] = -(-ext // (m * i)), i
        for name, ext in self.p.reduce:
            (f,) = cfg[f"tile_{name}"]
            o_, i_ = s.split(out, name, min(f, ext), f"{name}_o", f"{name}_i")
            red_o.append(o_); red_i.append(i_)
        v = [a for a, _ in self.p.spatial].index(vec)
        unrolled = [x for k, x in enumerate(inner) if k != v]
        busy = [x for x in outer if ext_of[x] >= self.p.threads]
        if busy:
            outer.remove(busy[0])
            outer.insert(0, busy[0])
        s.reorder(out, *outer, *red_o, *mid, *red_i, *unrolled, inner[v])
        if self.p.reduce and cfg["cache"]:
            s.cache_write(out, mid[-1])
        if cfg.get("unroll"):  # the innermost tiles, as long as the unrolled body stays small
            body = 1
            for x in reversed(unrolled):
                if 1 < ext_of[x] <= 16 and body * ext_of[x] <= 32:
                    s.unroll(out, x)
                    body *= ext_of[x]
        if cfg["vectorize"]:
            s.vectorize(out, inner[v])
        if cfg.get("parallel"):
            s.parallel(out, outer[0])
        return CodegenOptions()
