"""The schedule of a compute definition: stages, their loop axes, and the trace of steps.

Example::

    >>> from autotune.ir import expr as te
    >>> from autotune.schedule import Schedule
    >>> A = te.placeholder((64, 64), name="A"); B = te.placeholder((64, 64), name="B")
    >>> k = te.reduce_axis(64, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = Schedule(C)
    >>> io, ii = s.split("C", "i", 8)
    >>> s.reorder("C", io, "k", ii, "j")
    >>> [l for l in s.stages["C"].order]
    ['i_o', 'k', 'i_i', 'j']
    >>> Schedule.from_trace(C, s.trace).stages["C"].order == s.stages["C"].order
    True
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Iterable

from autotune.errors import DefinitionError, ScheduleError
from autotune.ir import expr as te
from autotune.ir.expr import Expr, Tensor, Var
from autotune.schedule.steps import (CacheWrite, ComputeAt, ComputeInline, Fuse, Pack, Parallel, Reorder,
                                     Prefetch, Split, Step, Stream, Tile, Unroll, Vectorize, check_name,
                                     step_from_json)

MAX_UNROLL = 64


@dataclass
class Stage:
    """Mutable loop structure of one tensor while a trace is applied."""
    name: str
    tensor: Tensor
    root: list[tuple[str, int, str]]                      # (axis name, extent, spatial|reduce)
    order: list[str] = field(default_factory=list)        # leaf axes, outermost first
    relations: list[tuple] = field(default_factory=list)  # ("split", p, o, i, f) | ("fuse", o, i, f)
    loop_kind: dict[str, str] = field(default_factory=dict)  # leaf -> serial|unroll|vectorize|parallel
    attach: tuple = ("root",)                             # ("root",) | ("inline",) | ("at", consumer, axis)
    cache_at: str | None = None
    stream: bool = False                                  # stores go around the caches (Stream)
    prefetch: tuple[str, str, int] | None = None          # (axis, input tensor, rows ahead) (Prefetch)
    packed_from: tuple[str, int, int] | None = None       # (tensor, dim, factor) for pack stages

    def __post_init__(self) -> None:
        if not self.order:
            self.order = [n for n, _, _ in self.root]
        self.axis_kind = {n: k for n, _, k in self.root}
        self.leaf_vars: dict[str, Var] = {}

    def copy(self) -> Stage:
        """A copy that a step can change without touching this stage: every list, dict and set
        attribute is copied (they hold only immutable values: names, tuples, IR nodes)."""
        new = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, (list, dict, set)):
                setattr(new, name, copy.copy(value))
        return new

    @property
    def reduce_root(self) -> list[str]:
        return [n for n, _, k in self.root if k == "reduce"]

    def var(self, leaf: str) -> Var:
        if leaf not in self.leaf_vars:
            self.leaf_vars[leaf] = Var(leaf)
        return self.leaf_vars[leaf]

    def extents(self, root_extents: dict[str, int] | None = None) -> dict[str, int]:
        """Extent of every axis (root and derived) for the given root extents."""
        ext = {n: e for n, e, _ in self.root}
        if root_extents:
            ext.update(root_extents)
        for rel in self.relations:
            if rel[0] == "split":
                _, p, o, i, f = rel
                ext[o], ext[i] = math.ceil(ext[p] / f), f
            else:
                _, o, i, fz = rel
                ext[fz] = ext[o] * ext[i]
        return ext

    def axis_exprs(self, root_extents: dict[str, int] | None = None) -> dict[str, Expr]:
        """Each root axis as an expression of the leaf variables."""
        ext = self.extents(root_extents)
        expr: dict[str, Expr] = {}
        # walk the relations backwards: each derived axis expressed by the axes it produced
        sub: dict[str, Expr] = {leaf: self.var(leaf) for leaf in self.order}
        for rel in reversed(self.relations):
            if rel[0] == "split":
                _, p, o, i, f = rel
                sub[p] = sub[o] * te.Const(f) + sub[i]
            else:
                _, o, i, fz = rel
                sub[o] = sub[fz] // te.Const(ext[i])
                sub[i] = sub[fz] % te.Const(ext[i])
        for n, _, _ in self.root:
            expr[n] = sub[n]
        return expr


@dataclass
class ScheduleState:
    """Everything a step may change. `Schedule.apply` runs each step on a copy of it."""
    stages: dict[str, Stage]
    tensors: dict[str, Tensor]
    packs: dict[str, str]  # packed tensor name -> pack stage name

    def copy(self) -> ScheduleState:
        """A copy that a step can change without touching this state (IR nodes are shared)."""
        return ScheduleState({n: st.copy() for n, st in self.stages.items()}, dict(self.tensors), dict(self.packs))


class Schedule:
    """Stages of a compute definition plus the trace of steps applied to them.

    Every primitive validates its arguments, raises ScheduleError naming the step, the axis and
    why, and appends a frozen step to `trace`. `Schedule.from_trace` replays a trace.
    """

    def __init__(self, output: Tensor) -> None:
        if not isinstance(output, Tensor) or output.is_placeholder:
            raise DefinitionError(f"a schedule needs the output of te.compute, got {output!r}")
        self.output = output
        tensors: dict[str, Tensor] = {}
        for t in te.input_tensors(output):
            check_name("compute definition", t.name, "tensor name")
            if t.name in tensors and tensors[t.name] is not t:
                raise DefinitionError(f"two different tensors are both named {t.name!r}; give each a unique name")
            tensors[t.name] = t
        stages = {t.name: self._new_stage(t) for t in tensors.values() if not t.is_placeholder}
        self._state = ScheduleState(stages, tensors, {})
        self.trace: list[Step] = []

    @property
    def stages(self) -> dict[str, Stage]:
        return self._state.stages

    @property
    def tensors(self) -> dict[str, Tensor]:
        return self._state.tensors

    @property
    def packs(self) -> dict[str, str]:
        return self._state.packs

    @staticmethod
    def _new_stage(t: Tensor) -> Stage:
        root = [(a.name, a.extent, "spatial") for a in t.axes] + [(a.name, a.extent, "reduce") for a in t.reduce_axes]
        names = [n for n, _, _ in root]
        for n in names:  # axis names are printed into the kernel source: identifiers only
            check_name("compute definition", n, f"axis name of {t.name!r}")
        if len(set(names)) != len(names):
            raise DefinitionError(f"compute {t.name!r}: axis names must be distinct, got {names}")
        return Stage(t.name, t, root)

    # ---- replay -------------------------------------------------------------------------
    @classmethod
    def from_trace(cls, output: Tensor, trace: Iterable[Step | dict]) -> "Schedule":
        """Rebuild a schedule by replaying steps (objects or their JSON forms)."""
        s = cls(output)
        for st in trace:
            s.apply(st if isinstance(st, Step) else step_from_json(st))
        return s

    def trace_json(self) -> list[dict]:
        return [st.to_json() for st in self.trace]

    def apply(self, step: Step) -> None:
        """Validate and apply one step, then record it. The step runs on a copy of the state, kept only
        if it succeeds, so a rejected step leaves the schedule as it was (tile splits twice: a failing
        second split must not leave the first one applied but unrecorded, or replaying the trace would
        give a different loop nest)."""
        step.validate()
        trial = copy.copy(self)  # shares output and trace
        trial._state = self._state.copy()
        getattr(trial, "_" + step.op)(step)
        self._state = trial._state
        self.trace.append(step)

    # ---- helpers ------------------------------------------------------------------------
    def stage(self, op: str, name: str) -> Stage:
        if name not in self.stages:
            known = ", ".join(self.stages) or "none"
            raise ScheduleError(op, None, f"no stage named {name!r} (stages: {known})")
        st = self.stages[name]
        if st.attach[0] == "inline":
            raise ScheduleError(op, None, f"stage {name!r} was inlined with compute_inline and has no loops")
        return st

    @staticmethod
    def _leaf(op: str, st: Stage, axis: str) -> None:
        if axis not in st.order:
            raise ScheduleError(op, axis, f"stage {st.name!r} has no loop {axis!r}; its loops are {st.order}")

    def _not_anchor(self, op: str, st: Stage, axis: str) -> None:
        """Split and fuse remove a loop: refuse if a cache_write or an attached stage sits at it."""
        if st.cache_at == axis:
            raise ScheduleError(op, axis, f"loop {axis!r} holds the cache_write of stage {st.name!r}; "
                                          f"{op} before cache_write")
        for o in self.stages.values():
            if o.attach[0] == "at" and o.attach[1] == st.name and o.attach[2] == axis:
                raise ScheduleError(op, axis, f"stage {o.name!r} is computed at loop {axis!r}; {op} before compute_at")
        if st.prefetch is not None and st.prefetch[0] == axis:
            raise ScheduleError(op, axis, f"loop {axis!r} of stage {st.name!r} prefetches; {op} before prefetch")

    @staticmethod
    def _tail_ok(st: Stage, axis: str, ext: dict[str, int]) -> bool:
        """May `axis` run past its extent? Only if every overshoot lands past the root axis' end (where
        lowering clamps it): true along outer loops of splits and fuses, false inside an inner loop
        (whose overshoot would alias the next outer iteration), unless that outer loop runs once."""
        up: dict[str, tuple[str, str | None]] = {}
        for rel in st.relations:
            if rel[0] == "split":
                _, p, o, i, _f = rel
                up[o], up[i] = (p, None), (p, o)
            else:
                _, o, i, fz = rel
                up[fz] = (o, None)  # a fused loop overshoots through its outer part
        a = axis
        while a in up:
            a, outer_sibling = up[a]
            if outer_sibling is not None and ext[outer_sibling] != 1:
                return False
        return True

    def _fresh(self, op: str, st: Stage, name: str) -> str:
        check_name(op, name, "axis name")
        if name in st.axis_kind:
            raise ScheduleError(op, name, f"stage {st.name!r} already has an axis named {name!r}")
        return name

    # ---- primitives (public API) ----------------------------------------------------------
    def split(self, stage: str, axis: str, factor: int, outer: str | None = None,
              inner: str | None = None) -> tuple[str, str]:
        """Split `axis` into an outer loop and an inner loop of extent `factor`."""
        outer, inner = outer or f"{axis}_o", inner or f"{axis}_i"
        self.apply(Split(stage, axis, factor, outer, inner))
        return outer, inner

    def tile(self, stage: str, x: str, y: str, x_factor: int, y_factor: int) -> tuple[str, str, str, str]:
        """Split x and y and order the loops (xo, yo, xi, yi)."""
        self.apply(Tile(stage, x, y, x_factor, y_factor))
        return f"{x}_o", f"{y}_o", f"{x}_i", f"{y}_i"

    def fuse(self, stage: str, outer: str, inner: str, name: str | None = None) -> str:
        """Fuse two adjacent loops."""
        name = name or f"{outer}_{inner}"
        self.apply(Fuse(stage, outer, inner, name))
        return name

    def reorder(self, stage: str, *order: str) -> None:
        self.apply(Reorder(stage, tuple(order)))

    def unroll(self, stage: str, axis: str) -> None:
        self.apply(Unroll(stage, axis))

    def vectorize(self, stage: str, axis: str) -> None:
        self.apply(Vectorize(stage, axis))

    def parallel(self, stage: str, axis: str) -> None:
        self.apply(Parallel(stage, axis))

    def stream(self, stage: str) -> None:
        """Store the output stage's rows with non-temporal (streaming) stores; see steps.Stream."""
        self.apply(Stream(stage))

    def prefetch(self, stage: str, axis: str, tensor: str, rows: int) -> None:
        """Prefetch input `tensor`'s row `rows` ahead inside loop `axis` of the output stage; see
        steps.Prefetch."""
        self.apply(Prefetch(stage, axis, tensor, rows))

    def cache_write(self, stage: str, at: str) -> None:
        self.apply(CacheWrite(stage, at))

    def compute_at(self, stage: str, consumer: str, axis: str) -> None:
        """Compute the part of `stage` that `consumer` reads in one iteration of its loop `axis`
        there, into a local buffer. `consumer` must be the stage's only reader, or its other readers
        must already be computed at the same loop (softmax's exp, read by the row sum and the
        output: attach the sum first, then the exp). Or `consumer` reads it only through stages
        already computed at its loops inside `axis` (conv + relu: the padded input computed at
        the output's loop over threads, the convolution at the output's register tile): the
        region is then what those stages read in one iteration of `axis`."""
        self.apply(ComputeAt(stage, consumer, axis))

    def compute_inline(self, stage: str) -> None:
        self.apply(ComputeInline(stage))

    def pack(self, tensor: str, dim: int, factor: int, name: str | None = None) -> str:
        """Repack `tensor` so dimension `dim` is blocked by `factor`; returns the packed stage's name."""
        name = name or f"{tensor}_pack"
        self.apply(Pack(tensor, dim, factor, name))
        return name

    # ---- step implementations ---------------------------------------------------------------
    def _split(self, s: Split) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.axis)
        self._not_anchor(s.op, st, s.axis)
        o, i = self._fresh(s.op, st, s.outer or f"{s.axis}_o"), self._fresh(s.op, st, s.inner or f"{s.axis}_i")
        if o == i:
            raise ScheduleError(s.op, s.axis, "outer and inner names must differ")
        if st.loop_kind.get(s.axis, "serial") != "serial":
            raise ScheduleError(s.op, s.axis, f"loop is already marked {st.loop_kind[s.axis]}; split before annotating")
        ext = st.extents()
        if ext[s.axis] % s.factor and not self._tail_ok(st, s.axis, ext):
            raise ScheduleError(s.op, s.axis, f"factor {s.factor} does not divide the extent {ext[s.axis]} of "
                                              f"{s.axis!r}, which lies inside another split or fuse: its tail would "
                                              "overlap the next tile; use a dividing factor or split the root axis")
        pos = st.order.index(s.axis)
        st.order[pos:pos + 1] = [o, i]
        kind = st.axis_kind[s.axis]
        st.axis_kind[o] = st.axis_kind[i] = kind
        st.relations.append(("split", s.axis, o, i, s.factor))

    def _tile(self, s: Tile) -> None:
        if s.x == s.y:
            raise ScheduleError(s.op, s.x, "x and y must be different axes")
        self._split(Split(s.stage, s.x, s.x_factor, f"{s.x}_o", f"{s.x}_i"))
        self._split(Split(s.stage, s.y, s.y_factor, f"{s.y}_o", f"{s.y}_i"))
        self._reorder(Reorder(s.stage, (f"{s.x}_o", f"{s.y}_o", f"{s.x}_i", f"{s.y}_i")))

    def _fuse(self, s: Fuse) -> None:
        st = self.stage(s.op, s.stage)
        for a in (s.outer, s.inner):
            self._leaf(s.op, st, a)
            self._not_anchor(s.op, st, a)
        po, pi = st.order.index(s.outer), st.order.index(s.inner)
        if pi != po + 1:
            raise ScheduleError(s.op, s.inner, f"{s.outer!r} must directly enclose {s.inner!r} to fuse them; "
                                               f"loop order is {st.order}")
        if st.axis_kind[s.outer] != st.axis_kind[s.inner]:
            raise ScheduleError(s.op, s.inner, "cannot fuse a spatial loop with a reduction loop")
        for a in (s.outer, s.inner):
            if st.loop_kind.get(a, "serial") != "serial":
                raise ScheduleError(s.op, a, f"loop is marked {st.loop_kind[a]}; fuse before annotating")
        name = self._fresh(s.op, st, s.name or f"{s.outer}_{s.inner}")
        st.order[po:pi + 1] = [name]
        st.axis_kind[name] = st.axis_kind[s.outer]
        st.relations.append(("fuse", s.outer, s.inner, name))

    def _reorder(self, s: Reorder) -> None:
        st = self.stage(s.op, s.stage)
        if len(set(s.order)) != len(s.order):
            raise ScheduleError(s.op, None, f"axes repeat in {list(s.order)}")
        for a in s.order:
            self._leaf(s.op, st, a)
        slots = sorted(st.order.index(a) for a in s.order)
        for slot, a in zip(slots, s.order):
            st.order[slot] = a

    def _annotate(self, s: Step, kind: str) -> Stage:
        st = self.stage(s.op, s.stage)  # type: ignore[attr-defined]
        axis = s.axis  # type: ignore[attr-defined]
        self._leaf(s.op, st, axis)
        prev = st.loop_kind.get(axis, "serial")
        if prev != "serial":
            raise ScheduleError(s.op, axis, f"loop is already marked {prev}")
        st.loop_kind[axis] = kind
        return st

    def _unroll(self, s: Unroll) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.axis)
        ext = st.extents()[s.axis]
        if ext > MAX_UNROLL:
            raise ScheduleError(s.op, s.axis, f"extent {ext} is too large to unroll (at most {MAX_UNROLL}); split it first")
        self._annotate(s, "unroll")

    def _vectorize(self, s: Vectorize) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.axis)
        if st.axis_kind[s.axis] != "spatial":
            raise ScheduleError(s.op, s.axis, "only a spatial loop can be vectorized (a reduction would need reassociation)")
        self._annotate(s, "vectorize")

    def _parallel(self, s: Parallel) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.axis)
        if st.name != self.output.name:
            raise ScheduleError(s.op, s.axis, f"only the output stage {self.output.name!r} can run in parallel")
        if st.axis_kind[s.axis] != "spatial":
            raise ScheduleError(s.op, s.axis, "a reduction loop cannot run in parallel")
        if any(k == "parallel" for k in st.loop_kind.values()):
            raise ScheduleError(s.op, s.axis, "the stage already has a parallel loop; one parallel region only")
        self._annotate(s, "parallel")

    def _stream(self, s: Stream) -> None:
        st = self.stage(s.op, s.stage)
        if st.name != self.output.name:
            raise ScheduleError(s.op, None, f"only the output stage {self.output.name!r} can be streamed; "
                                            f"{st.name!r} is read back by the kernel")
        if st.stream:
            raise ScheduleError(s.op, None, f"stage {st.name!r} is streamed already")
        st.stream = True

    def _prefetch(self, s: Prefetch) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.axis)
        if st.name != self.output.name:
            raise ScheduleError(s.op, s.axis, f"only the output stage {self.output.name!r} prefetches")
        t = self.tensors.get(s.tensor)
        if t is None or not t.is_placeholder or t.ndim < 2:
            inputs = [n for n, x in self.tensors.items() if x.is_placeholder and x.ndim >= 2]
            raise ScheduleError(s.op, s.tensor, f"prefetch needs an input of 2 or more dimensions (rows); "
                                                f"those are {inputs}")
        if st.prefetch is not None:
            raise ScheduleError(s.op, s.axis, f"stage {st.name!r} prefetches already")
        st.prefetch = (s.axis, s.tensor, s.rows)

    def _cache_write(self, s: CacheWrite) -> None:
        st = self.stage(s.op, s.stage)
        self._leaf(s.op, st, s.at)
        if st.cache_at is not None:
            raise ScheduleError(s.op, s.at, f"stage {st.name!r} already has a cache_write at {st.cache_at!r}")
        if st.order.index(s.at) == len(st.order) - 1:
            raise ScheduleError(s.op, s.at, "there are no loops inside it to accumulate over; pick an outer loop")
        st.cache_at = s.at

    def consumers(self, name: str) -> list[str]:
        """Stages that read `name` (after packing redirects reads to the packed tensor)."""
        out = []
        for st in self.stages.values():
            if st.attach[0] == "inline" or st.name == name:
                continue
            for ld in te.loads(st.tensor.body):  # type: ignore[arg-type]
                src = ld.tensor.name
                if src in self.packs and st.packed_from is None:
                    src = self.packs[src]
                if src == name:
                    out.append(st.name)
                    break
        return out

    def _compute_at(self, s: ComputeAt) -> None:
        st = self.stage(s.op, s.stage)
        if st.name == self.output.name:
            raise ScheduleError(s.op, s.axis, "the output stage cannot be computed at another stage")
        if st.attach[0] != "root":
            raise ScheduleError(s.op, s.axis, f"stage {st.name!r} is already attached ({st.attach})")
        cons = self.stage(s.op, s.consumer)
        self._leaf(s.op, cons, s.axis)
        users = self.consumers(st.name)
        # other readers must already be computed at the same loop: they run after st there (stages
        # at one loop run producers first) and read its local buffer, which lowering checks holds
        # what they read
        others = [u for u in users if u != cons.name]
        if cons.name in users:
            ok = all(self.stages[u].attach == ("at", cons.name, s.axis) for u in others)
        else:  # a consumer's consumer: every reader computed at a loop of it inside `axis`
            inside = cons.order[cons.order.index(s.axis) + 1:]
            ok = bool(users) and all(self.stages[u].attach[:2] == ("at", cons.name)
                                     and self.stages[u].attach[2] in inside for u in users)
        if not ok:
            raise ScheduleError(s.op, s.axis, f"stage {st.name!r} is read by {users}; compute_at needs "
                                              f"{cons.name!r} to be its only consumer, or its other readers "
                                              f"computed at {cons.name}.{s.axis} first, or every reader "
                                              f"computed at a loop of {cons.name!r} inside {s.axis!r}")
        # no cycles: the consumer must not be attached (directly or not) inside `st`
        c = cons
        while c.attach[0] == "at":
            if c.attach[1] == st.name:
                raise ScheduleError(s.op, s.axis, "attaching would make a cycle")
            c = self.stages[c.attach[1]]
        st.attach = ("at", cons.name, s.axis)

    def _compute_inline(self, s: ComputeInline) -> None:
        st = self.stage(s.op, s.stage)
        if st.name == self.output.name:
            raise ScheduleError(s.op, None, "the output stage cannot be inlined")
        if st.reduce_root:
            raise ScheduleError(s.op, None, f"stage {st.name!r} has a reduction and cannot be inlined; use compute_at")
        if st.packed_from is not None:
            raise ScheduleError(s.op, None, f"stage {st.name!r} is a packed layout; inlining it would undo the pack")
        # a packed stage may be inlined: every other read of it goes to its pack, so the pack stage
        # computes it directly (one pass, e.g. zero padding and a layout change together)
        if st.attach[0] != "root" or any(
                o.attach[0] == "at" and o.attach[1] == st.name for o in self.stages.values()):
            raise ScheduleError(s.op, None, f"stage {st.name!r} is attached or hosts other stages")
        if st.order != [n for n, _, _ in st.root] or st.loop_kind or st.cache_at:
            raise ScheduleError(s.op, None, f"stage {st.name!r} has loop transformations; inline it before scheduling it")
        st.attach = ("inline",)

    def _pack(self, s: Pack) -> None:
        if s.tensor not in self.tensors:
            raise ScheduleError(s.op, s.tensor, f"no tensor named {s.tensor!r}; tensors are {list(self.tensors)}")
        t = self.tensors[s.tensor]
        if t is self.output:
            raise ScheduleError(s.op, s.tensor, "the output cannot be packed")
        if s.tensor in self.packs:
            raise ScheduleError(s.op, s.tensor, f"{s.tensor!r} is already packed")
        if s.tensor in self.stages and self.stages[s.tensor].attach[0] != "root":
            raise ScheduleError(s.op, s.tensor, f"{s.tensor!r} is not a root stage")
        if not 0 <= s.dim < t.ndim:
            raise ScheduleError(s.op, s.tensor, f"dim {s.dim} is out of range for a {t.ndim}-d tensor")
        if s.name in self.tensors or s.name in self.stages:
            raise ScheduleError(s.op, s.tensor, f"name {s.name!r} is taken")
        n, f = t.shape[s.dim], s.factor
        if f > n:
            raise ScheduleError(s.op, s.tensor, f"factor {f} exceeds the extent {n} of dimension {s.dim}")
        others = [d for d in range(t.ndim) if d != s.dim]
        shape = (math.ceil(n / f),) + tuple(t.shape[d] for d in others) + (f,)
        names = ["p_o"] + [f"d{d}" for d in others] + ["p_i"]
        axes = tuple(te.IterVar(Var(nm), e, "spatial") for nm, e in zip(names, shape))
        idx: list[Expr] = [None] * t.ndim  # type: ignore[list-item]
        src = axes[0].var * te.Const(f) + axes[-1].var
        idx[s.dim] = src
        for d, a in zip(others, axes[1:-1]):
            idx[d] = a.var
        body: Expr = te.Load(t, tuple(idx))
        if n % f:
            body = te.Select(te.Cmp("<", src, te.Const(n)), body, te.Const(0, t.dtype))
        packed = Tensor(s.name, shape, t.dtype, axes, body)
        st = self._new_stage(packed)
        st.packed_from = (s.tensor, s.dim, f)
        self.stages[s.name] = st
        self.tensors[s.name] = packed
        self.packs[s.tensor] = s.name
