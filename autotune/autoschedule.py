"""A template-free search space: rules derive knobs from a compute definition.

For the output stage: multi-level tiling of every spatial axis (outer, middle, inner) and of
every reduction axis (outer, inner) in the order S_o R_o S_m R_i S_i; a register/stack
accumulator (cache_write) for reductions; the innermost spatial loop vectorized; the loop
above it unrolled; the outermost loop parallel. For inputs read along a tiled spatial axis,
packing into panels of the inner tile. Elementwise producers may be inlined.

Example::

    >>> from autotune.ir import te
    >>> from autotune.autoschedule import AutoScheduler
    >>> A = te.placeholder((64, 64), name="A"); B = te.placeholder((64, 64), name="B")
    >>> k = te.reduce_axis(64, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> auto = AutoScheduler(C, threads=1)
    >>> sorted(auto.space.by_name)[:3]
    ['cache', 'pack_A', 'pack_B']
"""
from __future__ import annotations

from autotune.ir import expr as te
from autotune.ir.expr import Tensor, Var
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace, Knob, SplitKnob, powers_of_two

MAX_INNER = 64


class AutoScheduler:
    """Derives a ConfigSpace for a compute definition and applies a Config of it to a Schedule."""

    def __init__(self, output: Tensor, threads: int = 1) -> None:
        self.output = output
        self.threads = threads
        base = Schedule(output)  # validates names
        self.stages = [n for n in base.stages if n != output.name]
        out = output
        self.spatial = [(a.name, a.extent) for a in out.axes]
        self.reduce = [(a.name, a.extent) for a in out.reduce_axes]
        self.packable = self._packable()
        self.space = ConfigSpace(self._knobs())

    def _packable(self) -> dict[str, tuple[int, str]]:
        """Inputs of the output read with a spatial axis as a whole index: tensor -> (dim, axis)."""
        if self.output.body is None:
            return {}
        axis_of = {a.var: a.name for a in self.output.axes}
        last = self.output.axes[-1].name if self.output.axes else None
        out: dict[str, tuple[int, str]] = {}
        for ld in te.loads(self.output.body):
            t = ld.tensor
            if t.name in out or (not t.is_placeholder):
                continue
            for d, ix in enumerate(ld.indices):
                if isinstance(ix, Var) and ix in axis_of and (d < t.ndim - 1 or axis_of[ix] == last):
                    if len(self.reduce) and ld.indices.count(ix) == 1:
                        out[t.name] = (d, axis_of[ix])
                        break
        return out

    def _knobs(self) -> list[Knob]:
        knobs: list[Knob] = []
        n = len(self.spatial)
        for p, (name, ext) in enumerate(self.spatial):
            inner = [c for c in powers_of_two(min(ext, MAX_INNER))]
            if p == n - 1 and ext >= 16:
                inner = sorted(set([c for c in inner if c >= 8] + ([48] if ext >= 48 else [])))
            mid = powers_of_two(max(1, min(ext, 1024)))
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=2, candidates=[mid, inner], nested=False))
        for name, ext in self.reduce:
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=1, candidates=[powers_of_two(min(ext, 1024))]))
        if self.reduce:
            knobs.append(ChoiceKnob("cache", [True, False]))
        for t in sorted(self.packable):
            knobs.append(ChoiceKnob(f"pack_{t}", [True, False]))
        if n >= 2:
            knobs.append(ChoiceKnob("unroll", [True, False]))
        knobs.append(ChoiceKnob("vectorize", [True, False]))
        if self.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        for st in self.stages:
            t = self._tensor(st)
            if t is not None and not t.reduce_axes:
                knobs.append(ChoiceKnob(f"inline_{st}", [True, False]))
        return knobs

    def _tensor(self, name: str) -> Tensor | None:
        for t in te.input_tensors(self.output):
            if t.name == name:
                return t
        return None

    def apply(self, s: Schedule, cfg: Config) -> None:
        """Apply the primitives a config chooses."""
        out = self.output.name
        for st in self.stages:
            if cfg.get(f"inline_{st}"):
                s.compute_inline(st)
        packs = []
        for t, (dim, axis) in sorted(self.packable.items()):
            if cfg.get(f"pack_{t}"):
                f = min(cfg[f"tile_{axis}"][1], s.tensors[t].shape[dim])
                packs.append(s.pack(t, dim, f, f"{t}_pack"))
        outer, mid, inner, red_o, red_i = [], [], [], [], []
        for name, ext in self.spatial:
            m, i = cfg[f"tile_{name}"]
            i = min(i, ext)
            m = max(1, min(m, -(-ext // i)))
            o_, rest = s.split(out, name, m * i, f"{name}_o", f"{name}_r")
            m_, i_ = s.split(out, rest, i, f"{name}_m", f"{name}_i")
            outer.append(o_); mid.append(m_); inner.append(i_)
        for name, ext in self.reduce:
            (f,) = cfg[f"tile_{name}"]
            o_, i_ = s.split(out, name, min(f, ext), f"{name}_o", f"{name}_i")
            red_o.append(o_); red_i.append(i_)
        s.reorder(out, *outer, *red_o, *mid, *red_i, *inner)
        if self.reduce and cfg["cache"]:
            s.cache_write(out, mid[-1])
        if cfg.get("unroll") and len(inner) >= 2 and cfg[f"tile_{self.spatial[-2][0]}"][1] <= 16:
            s.unroll(out, inner[-2])
        if cfg["vectorize"]:
            s.vectorize(out, inner[-1])
        if cfg.get("parallel"):
            s.parallel(out, outer[0])


def auto_schedule(output: Tensor, cfg: Config, threads: int = 1) -> Schedule:
    """The schedule a config of the derived space gives."""
    auto = AutoScheduler(output, threads)
    s = Schedule(output)
    auto.apply(s, auto.space.validate(cfg))
    return s
