"""Lower a Schedule to a loop nest (autotune.ir.stmt). Deterministic: same trace, equal tree.

Tails: an axis whose splits do not divide it (or whose bound is dynamic, as for a region
computed at a consumer's loop) gets each inner loop clamped to the valid range. A clamped loop
that is unrolled or vectorized is versioned: a full-extent copy with a constant trip count runs
whenever the tile is whole, and a rolled copy handles the tail, so the main loop is not slowed.
Inside a cache_write tile, loops that only read zero-padded packed panels run whole; only the
write-back is clamped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotune.dtypes import ITEMSIZE
from autotune.errors import ScheduleError
from autotune.ir import expr as te
from autotune.ir.affine import Affine, from_affine, interval, simplify, to_affine
from autotune.ir.expr import BinOp, Cmp, Const, Expr, Load, Reduce, Select, Tensor, Var
from autotune.ir.stmt import For, Function, If, LocalBuffer, LoopNest, Seq, Stmt, Store, seq
from autotune.schedule.schedule import Schedule, Stage

STACK_LIMIT_BYTES = 16 * 1024


def init_value(op: str, dtype: str) -> Const:
    if op == "sum":
        return Const(0, dtype)
    # the largest finite value, not inf: kernels compile with fastmath ninf, and the printer rejects inf
    big = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308, "int32": 2**31 - 1}.get(dtype, 2**63 - 1)
    return Const(-big if op == "max" else big, dtype)


def combine(op: str, acc: Expr, value: Expr) -> Expr:
    if op == "sum":
        return BinOp("+", acc, value)
    return BinOp(op, acc, value)


def ceildiv(a: Expr, c: int) -> Expr:
    return a if c == 1 else BinOp("//", BinOp("+", a, Const(c - 1)), Const(c))


@dataclass
class Region:
    """Where an attached stage is computed: per root axis an offset, a max extent and a bound."""
    offset: dict[str, Expr]
    extent: dict[str, int]
    bound: dict[str, Expr]
    buffer: Tensor


@dataclass
class StageNest:
    """What lowering one stage works out, phase by phase, before and while it emits the loops."""
    st: Stage
    region: Region | None
    ext: dict[str, int]                   # extent of every axis, root and derived
    axis_expr: dict[str, Expr]            # each root axis as an expression of the leaf loops
    bound: dict[str, Expr]                # where each root axis ends
    reduce_op: str | None
    value: Expr                           # the stage's value over its leaf loops
    padded: dict[str, list[int]]          # see Lowerer.padded_axes
    spatial: list[str]                    # the spatial root axes
    out_buf: Tensor                       # where the stage stores: its tensor or its local region
    store_idx: tuple[Expr, ...]
    pos: dict[str, int]                   # leaf -> position in the loop order
    forms: dict[str, Affine | None]       # each root axis as an affine form of the leaves, if it is one
    cache_pos: int | None                 # position of the cache_write loop
    first_red: int | None                 # position of the outermost reduction loop
    # _clamp_leaves
    needs_bound: dict[str, bool] = field(default_factory=dict)
    guards: list[Expr] = field(default_factory=list)
    clamp: dict[str, Expr] = field(default_factory=dict)  # leaf -> its trip-count limit
    # tile loops that may run whole: they only read zero-padded panels
    padded_ok: set[str] = field(default_factory=set)
    # _cache_tile
    acc: Tensor | None = None
    acc_dims: list[str] = field(default_factory=list)
    acc_index: tuple[Expr, ...] = ()
    acc_base: dict[str, Expr] = field(default_factory=dict)
    acc_ext: dict[str, int] = field(default_factory=dict)
    # emitting
    inner_stmt: Stmt | None = None
    attached: list[Stage] = field(default_factory=list)   # stages computed at one of this stage's loops
    hoist: list[str] = field(default_factory=list)        # see Lowerer._hoisted_tails
    # leaf -> "full" | "part" while emitting a versioned cache tile
    tile_mode: dict[str, str] = field(default_factory=dict)


class Lowerer:
    def __init__(self, sched: Schedule) -> None:
        self.s = sched
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.locals: list[LocalBuffer] = []
        self.local_of: dict[str, Tensor] = {}   # attached stage -> its local buffer

    # ---- expression expansion -------------------------------------------------------------
    def expand(self, st: Stage, e: Expr) -> Expr:
        """Inline compute_inline producers and redirect reads of packed tensors to their packs."""
        s = self.s

        def fn(n: Expr) -> Expr | None:
            if not isinstance(n, Load):
                return None
            t = n.tensor
            if t.name in s.packs and st.packed_from is None:
                pst = s.stages[s.packs[t.name]]
                _, dim, f = pst.packed_from  # type: ignore[misc]
                idx = n.indices
                others = [idx[d] for d in range(len(idx)) if d != dim]
                return Load(pst.tensor, (BinOp("//", idx[dim], Const(f)), *others, BinOp("%", idx[dim], Const(f))))
            if t.name in s.stages and s.stages[t.name].attach[0] == "inline":
                body = self.expand(s.stages[t.name], t.body)  # type: ignore[arg-type]
                return te.substitute(body, {a.var: i for a, i in zip(t.axes, n.indices)})
            return None

        return te.transform(e, fn)

    def padded_axes(self, st: Stage, body: Expr, sub: dict[Var, Expr], value: Expr) -> dict[str, list[int]]:
        """Root axes whose loops may run whole inside a cache tile, because every read they index
        stays inside its buffer: reads through the packed dimension of zero-padded packs (axis -> the
        pack factors, which the tile must divide), reads of a stage computed at this one whose local
        buffer spans whole tiles, and reads whose index stays in bounds over the loops' whole ranges
        (axis -> []). Garbage computed past the end is never written back."""
        root_vars = {a.var: a.name for a in list(st.tensor.axes) + list(st.tensor.reduce_axes)}
        spatial = {a.var for a in st.tensor.axes}
        padded: dict[str, list[int]] = {}
        unsafe: set[str] = set()
        for ld in te.loads(body):
            pst = self.s.stages.get(ld.tensor.name)
            pack = pst.packed_from if pst is not None else None
            attached_here = pst is not None and pst.attach[:2] == ("at", st.name)
            if (self.spans_whole_tiles(pst, st, value) if attached_here  # type: ignore[arg-type]
                    else self.in_bounds(ld, sub)):
                # a spatial axis past its end only computes outputs that are dropped; a reduction
                # axis would add what it reads there to real outputs (fine only for zero padding)
                for ix in ld.indices:
                    for v in te.walk(ix):
                        if isinstance(v, Var) and v in root_vars:
                            if v in spatial:
                                padded.setdefault(root_vars[v], [])
                            else:
                                unsafe.add(root_vars[v])
                continue
            for d, ix in enumerate(ld.indices):
                names = {root_vars[v] for v in te.walk(ix) if isinstance(v, Var) and v in root_vars}
                if (pack and d in (0, len(ld.indices) - 1) and isinstance(ix, BinOp) and ix.op in ("//", "%")
                        and isinstance(ix.a, Var) and ix.a in root_vars):
                    padded.setdefault(root_vars[ix.a], []).append(pack[2])
                else:
                    unsafe |= names
        return {a: f for a, f in padded.items() if a not in unsafe}

    def in_bounds(self, ld: Load, sub: dict[Var, Expr]) -> bool:
        """Whether a read stays inside its tensor over the whole ranges of the loops (unclamped)."""
        for ix, n in zip(ld.indices, ld.tensor.shape):
            iv = interval(simplify(te.substitute(ix, sub), self.ranges), self.ranges)
            if iv is None or iv[0] < 0 or iv[1] >= n:
                return False
        return True

    def spans_whole_tiles(self, p: Stage, cons: Stage, cons_value: Expr) -> bool:
        """Whether the local buffer of p (computed at cons) holds every read of whole tiles: its
        region, bounded with the consumer's loops unclamped, is not cut to p's own extent."""
        try:
            _, lo, hi = self.region_span(p, cons, p.attach[2], cons_value)
        except ScheduleError:
            return False
        return all(h - l + 1 <= n for l, h, n in zip(lo, hi, p.tensor.shape))

    # ---- stage lowering -------------------------------------------------------------------
    def lower_stage(self, st: Stage, region: Region | None) -> Stmt:
        """The loop nest of one stage (computed into `region`'s buffer when it is attached)."""
        n = self._stage_nest(st, region)
        self._clamp_leaves(n)
        self._check_annotations(n)
        self._cache_tile(n)
        n.inner_stmt = self._innermost(n)
        n.attached = self.attached_to(st)
        n.hoist = self._hoisted_tails(n)
        top: list[Stmt | None] = []
        if n.reduce_op and n.first_red == 0 and n.acc is None:
            top.append(self._init_nest(n, 0))
        top.append(self._emit(n, 0))
        return seq(*top)

    def attached_to(self, st: Stage) -> list[Stage]:
        """The stages computed at st's loops, producers before the stages (at the same loop) that
        read them."""
        todo = [o for o in self.s.stages.values() if o.attach[0] == "at" and o.attach[1] == st.name]
        out: list[Stage] = []
        while todo:
            names = {o.name for o in todo}
            ready = [o for o in todo if not any(ld.tensor.name in names and ld.tensor.name != o.name
                                                for ld in te.loads(o.tensor.body))]  # type: ignore[arg-type]
            if not ready:
                raise ScheduleError("compute_at", None, f"stages {sorted(names)} at {st.name!r} read each other")
            out += ready
            todo = [o for o in todo if o not in ready]
        return out

    def check_sibling_reads(self, p: Stage, stmt: Stmt) -> None:
        """Every read of a stage computed at the same loop as p stays inside that stage's local
        buffer (its region was made for the consumer's reads, not for p's)."""
        def check(e: Expr) -> Expr:
            for ld in te.loads(e):
                q = self.s.stages.get(ld.tensor.name)
                if q is None or q is p or q.attach != p.attach:
                    continue
                if q.name not in self.rebase:
                    raise ScheduleError("compute_at", p.attach[2], f"{p.name!r} reads {q.name!r} before it is computed")
                buf, off = self.rebase[q.name]
                for d, (ix, o) in enumerate(zip(ld.indices, off)):
                    iv = interval(simplify(BinOp("-", ix, o), self.ranges), self.ranges)
                    if iv is None or iv[0] < 0 or iv[1] >= buf.shape[d]:
                        raise ScheduleError("compute_at", p.attach[2], f"{p.name!r} reads {q.name!r} outside the "
                                                                       f"part computed at {p.attach[1]}.{p.attach[2]}")
            return e
        map_exprs(stmt, check)

    def _stage_nest(self, st: Stage, region: Region | None) -> StageNest:
        """Extents and ranges of the stage's loops, its root axes as expressions of them, where each
        root axis ends, and the stage's value over its loops."""
        t = st.tensor
        root_ext = {n: e for n, e, _ in st.root}
        if region is not None:
            root_ext.update(region.extent)
        ext, exprs = self._loops(st, root_ext)
        axis_expr = {a: simplify(e, self.ranges) for a, e in exprs.items()}
        bound: dict[str, Expr] = {a: Const(root_ext[a]) for a in root_ext}
        offset: dict[str, Expr] = {a: Const(0) for a in root_ext}
        if region is not None:
            bound.update(region.bound)
            offset.update(region.offset)
        reduce_op = t.body.op if isinstance(t.body, Reduce) else None
        raw = t.body.body if isinstance(t.body, Reduce) else t.body
        expanded = self.expand(st, raw)  # type: ignore[arg-type]
        root_vars = {a.var: a.name for a in list(t.axes) + list(t.reduce_axes)}
        sub = {v: simplify(offset[n] + axis_expr[n], self.ranges) for v, n in root_vars.items()}
        value = simplify(te.substitute(expanded, sub), self.ranges)
        spatial = [a.name for a in t.axes]
        red_leaves = [leaf for leaf in st.order if st.axis_kind[leaf] == "reduce"]
        pos = {leaf: p for p, leaf in enumerate(st.order)}
        return StageNest(
            st=st, region=region, ext=ext, axis_expr=axis_expr, bound=bound, reduce_op=reduce_op, value=value,
            padded=self.padded_axes(st, expanded, sub, value), spatial=spatial,
            out_buf=region.buffer if region is not None else t, store_idx=tuple(axis_expr[a] for a in spatial),
            pos=pos, forms={a: to_affine(axis_expr[a]) for a in root_ext},
            cache_pos=pos[st.cache_at] if st.cache_at else None,
            first_red=pos[red_leaves[0]] if red_leaves else None)

    def _clamp_leaves(self, n: StageNest) -> None:
        """Which root axes can run past their end, the guard of each axis that is not affine in the
        loops, the clamp of each leaf loop, and which clamped loops may still run whole in a cache tile."""
        for a in n.forms:
            iv = interval(n.axis_expr[a], self.ranges)
            b = n.bound[a]
            n.needs_bound[a] = not (isinstance(b, Const) and iv is not None and iv[1] < b.value)
        for a, f in n.forms.items():
            if f is None and n.needs_bound[a]:
                n.guards.append(Cmp("<", n.axis_expr[a], n.bound[a]))
        for a, f in n.forms.items():
            if f is None or not n.needs_bound[a]:
                continue
            vs = sorted(f.terms, key=lambda v: n.pos[v.name])
            for k, v in enumerate(vs):
                c = f.terms[v]
                if c <= 0:
                    raise ScheduleError("lower", v.name, "negative loop coefficient")
                rest = Affine({u: f.terms[u] for u in vs[:k]}, f.const)
                e_v = n.ext[v.name]
                lim = simplify(ceildiv(BinOp("-", n.bound[a], from_affine(rest)), c), self.ranges)
                if isinstance(lim, Const) and lim.value >= e_v:
                    continue
                n.clamp[v.name] = lim
                if n.cache_pos is not None and n.pos[v.name] > n.cache_pos and a in n.padded:
                    tile = c * e_v
                    outer_coefs = [f.terms[u] for u in vs[:k]]
                    if not n.padded[a] or (all(p % tile == 0 for p in n.padded[a])
                                           and all(x % tile == 0 for x in outer_coefs)):
                        n.padded_ok.add(v.name)

    @staticmethod
    def _check_annotations(n: StageNest) -> None:
        """A vectorized loop must be innermost; the parallel loop outermost, in the output stage."""
        st = n.st
        for leaf, kind in st.loop_kind.items():
            if kind == "vectorize" and n.pos[leaf] != len(st.order) - 1:
                raise ScheduleError("vectorize", leaf, f"only the innermost loop of stage {st.name!r} can be "
                                                       f"vectorized; loop order is {st.order}")
            if kind == "parallel" and (n.pos[leaf] != 0 or n.region is not None):
                raise ScheduleError("parallel", leaf, f"the parallel loop must be the outermost loop of the "
                                                      f"output stage; loop order is {st.order}")

    def _cache_tile(self, n: StageNest) -> None:
        """The local accumulator of a cache_write: one dimension per spatial axis with loops inside the
        tile, each indexed by the part of the axis those loops make (the rest is the tile's base)."""
        st = n.st
        if n.cache_pos is None:
            return
        inner = {st.var(leaf) for leaf in st.order[n.cache_pos + 1:]}
        dims: list[tuple[int, str, int, Expr, Expr]] = []
        for a in n.spatial:
            f = n.forms[a]
            if f is None:
                raise ScheduleError("cache_write", st.cache_at, f"axis {a!r} is fused across the tile; "
                                                                "cache_write needs split/reorder only")
            o, i = f.split(inner)
            n.acc_base[a] = from_affine(o)
            if not i.terms:
                continue
            iv = i.interval(self.ranges)
            assert iv is not None
            gap = i.first_gap(self.ranges)
            if gap is not None:  # the write-back copies the whole box: a gap would overwrite other tiles
                raise ScheduleError("cache_write", st.cache_at,
                                    f"the loops inside {st.cache_at!r} cover axis {a!r} with gaps ({gap[0].name!r} "
                                    f"steps by {gap[1]}), and its write-back would overwrite other tiles; reorder so that "
                                    f"{gap[0].name!r} is outside {st.cache_at!r}")
            last = max(n.pos[v.name] for v in i.terms)
            dims.append((last, a, iv[1] + 1, from_affine(i), from_affine(o)))
        dims.sort()
        n.acc_dims = [d[1] for d in dims]
        n.acc = Tensor(f"{st.name}_acc", tuple(d[2] for d in dims) or (1,), st.tensor.dtype)
        self.declare(n.acc)
        n.acc_index = tuple(d[3] for d in dims) or (Const(0),)
        n.acc_ext = {d[1]: d[2] for d in dims}

    @staticmethod
    def _innermost(n: StageNest) -> Stmt:
        """The statement in the innermost loop: accumulate (or store) the value, guarded if needed."""
        if n.acc is not None:
            target, tidx = n.acc, n.acc_index
        else:
            target, tidx = n.out_buf, n.store_idx
        val = combine(n.reduce_op, Load(target, tidx), n.value) if n.reduce_op else n.value
        inner_stmt: Stmt = Store(target, tidx, val)
        if n.guards:
            inner_stmt = If(te.all_of(*n.guards), inner_stmt)
        return inner_stmt

    @staticmethod
    def _hoisted_tails(n: StageNest) -> list[str]:
        """Clamped unrolled/vectorized loops inside a cache tile, whose tails are versioned once, at
        the tile: a whole tile runs them with their constant extent, a partial one runs them guarded.
        (Versioning each such loop where it stands would put a branch in the reduction loop and keep
        the accumulators out of registers.) Clamped serial loops stay min() loops."""
        st, cache_pos = n.st, n.cache_pos
        hoist: list[str] = []
        if cache_pos is not None and not any(o.attach[2] in st.order[cache_pos + 1:] for o in n.attached):
            inner_vars = {st.var(x) for x in st.order[cache_pos + 1:]}
            for x in st.order[cache_pos + 1:]:
                if (x in n.clamp and x not in n.padded_ok and st.loop_kind.get(x) in ("unroll", "vectorize")
                        and not any(isinstance(e, Var) and e in inner_vars for e in te.walk(n.clamp[x]))):
                    hoist.append(x)
        return hoist

    def _loop(self, n: StageNest, leaf: str, body: Stmt, kind: str | None = None, whole_tile: bool = False) -> Stmt:
        """The loop of `leaf` around body, clamped to its axis' end where it may run past it."""
        st = n.st
        v, e_v = st.var(leaf), n.ext[leaf]
        kind = kind or st.loop_kind.get(leaf, "serial")
        lim = None if whole_tile and leaf in n.padded_ok else n.clamp.get(leaf)
        mode = n.tile_mode.get(leaf)
        if mode == "full":    # inside a cache tile known to be whole: constant trip count
            lim = None
        elif mode == "part":  # inside a partial tile: the full loop, each iteration guarded, so
            # accumulator indices stay constants once unrolled (a rolled clamped loop would index
            # the tile with a variable and keep the whole tile out of registers)
            return For(v, Const(e_v), kind, If(Cmp("<", v, lim), body))
        if lim is None:
            return For(v, Const(e_v), kind, body)
        if kind == "parallel":
            raise ScheduleError("parallel", leaf, "a parallel loop must cover its whole axis; "
                                                  "parallelise the outermost part of a split")
        if kind in ("unroll", "vectorize"):
            full = For(v, Const(e_v), kind, body)
            return If(simplify(Cmp(">=", lim, Const(e_v)), self.ranges), full, For(v, lim, "serial", body))
        return For(v, simplify(BinOp("min", Const(e_v), lim), self.ranges), kind, body)

    def _init_nest(self, n: StageNest, start: int) -> Stmt:
        """out[...] = init over the spatial loops inside position `start`, under the innermost
        statement's guards on spatial loops (a fused loop over a split's tail runs past the axis'
        end: unguarded, its init would write outside the output)."""
        st = n.st
        body: Stmt = Store(n.out_buf, n.store_idx, init_value(n.reduce_op, st.tensor.dtype))  # type: ignore[arg-type]
        reduce_vars = {st.var(leaf) for leaf in st.order if st.axis_kind[leaf] == "reduce"}
        spatial = [g for g in n.guards if not any(isinstance(x, Var) and x in reduce_vars for x in te.walk(g))]
        if spatial:
            body = If(te.all_of(*spatial), body)
        for leaf in reversed(st.order[start:]):
            if st.axis_kind[leaf] == "spatial":
                kind = st.loop_kind.get(leaf, "serial")
                body = self._loop(n, leaf, body, "serial" if kind in ("parallel", "unroll") else kind)
        return body

    def _acc_init(self, n: StageNest) -> Stmt:
        """acc[...] = init over the whole accumulator tile."""
        acc = n.acc
        ws = [Var(f"{n.st.name}_w{k}") for k in range(len(acc.shape))]  # type: ignore[union-attr]
        body: Stmt = Store(acc, tuple(ws), init_value(n.reduce_op or "sum", n.st.tensor.dtype))  # type: ignore[arg-type]
        for w, e in reversed(list(zip(ws, acc.shape))):  # type: ignore[union-attr]
            self.ranges[w] = (0, e - 1)
            body = For(w, Const(e), "serial", body)
        return body

    def _first_visit(self, n: StageNest) -> Expr | None:
        """With reduction loops outside the accumulator tile, the condition under which a tile's
        write-back is the first for its outputs (each of those loops at 0): that write-back reads the
        output as the identity, and the output needs no init pass. None when there are no such loops
        of more than one iteration (every write-back is the only one: it stores)."""
        st = n.st
        if n.reduce_op is None or n.first_red is None or n.cache_pos is None or n.first_red > n.cache_pos:
            return None
        firsts = [Cmp("==", st.var(leaf), Const(0)) for leaf in st.order[n.first_red:n.cache_pos + 1]
                  if st.axis_kind[leaf] == "reduce" and n.ext[leaf] > 1]
        return te.all_of(*firsts) if firsts else None

    def _writeback(self, n: StageNest) -> Stmt:
        """Store the accumulator tile into the output, clamped to the axes' ends; with reduction
        loops outside the tile, combine (e.g. add) it with the output, which the first visit reads
        as the reduction's identity. (A store nest and a combine nest, each with its tails, made
        GEMM's 4x24 tiles compile 25% slower, for no faster kernel.)"""
        first = self._first_visit(n)
        ws = {a: Var(f"{n.st.name}_w{k}") for k, a in enumerate(n.acc_dims)}
        idx = []
        for a in n.spatial:
            idx.append(simplify(n.acc_base[a] + ws[a], self.ranges) if a in ws else n.axis_expr[a])
        src = Load(n.acc, tuple(ws[a] for a in n.acc_dims) or (Const(0),))  # type: ignore[arg-type]
        if first is None:
            val: Expr = src
        else:
            old = Select(first, init_value(n.reduce_op, n.st.tensor.dtype), Load(n.out_buf, tuple(idx)))  # type: ignore[arg-type]
            val = combine(n.reduce_op, old, src)  # type: ignore[arg-type]
        body: Stmt = Store(n.out_buf, tuple(idx), val)
        for k, a in reversed(list(enumerate(n.acc_dims))):
            w, e = ws[a], n.acc_ext[a]
            self.ranges[w] = (0, e - 1)
            kind = "vectorize" if k == len(n.acc_dims) - 1 else "serial"
            lim = None
            if n.needs_bound[a] and not (kind == "vectorize" and self._room_for_whole_tiles(n, a, e)):
                lim = simplify(BinOp("-", n.bound[a], n.acc_base[a]), self.ranges)
                if isinstance(lim, Const) and lim.value >= e:
                    lim = None
            if lim is None:
                body = For(w, Const(e), kind, body)
            elif kind == "vectorize":
                body = If(simplify(Cmp(">=", lim, Const(e)), self.ranges), For(w, Const(e), kind, body),
                          For(w, lim, "serial", body))
            else:
                body = For(w, simplify(BinOp("min", Const(e), lim), self.ranges), kind, body)
        return body

    def _loops(self, st: Stage, extent: dict[str, int]) -> tuple[dict[str, int], dict[str, Expr]]:
        """The extents of stage st's loops and its root axes as expressions of them, for root
        extents `extent` (the stage's own where it names none); records the loops' ranges."""
        root_ext = {n: e for n, e, _ in st.root}
        root_ext.update(extent)
        ext = st.extents(root_ext)
        for leaf in st.order:
            self.ranges[st.var(leaf)] = (0, ext[leaf] - 1)
        return ext, st.axis_exprs(root_ext)

    def _span(self, p: Stage, extent: dict[str, int], axis: str) -> int:
        """How far stage p's loops reach along root `axis` (its splits rounded up) for a region
        of the given extents."""
        iv = interval(self._loops(p, extent)[1][axis], self.ranges)
        return iv[1] + 1 if iv is not None else extent[axis]

    def _room_for_whole_tiles(self, n: StageNest, a: str, e: int) -> bool:
        """Whether every tile's write-back along axis `a` (the innermost, `e` wide) can run whole:
        the stage stores into a local region buffer allocated for the widest region, and the last
        tile ends inside it. What a partial tile then writes past the axis' end lands in that
        buffer's unused room, which no reader looks at; the write-back needs no tail copy."""
        if n.region is None or n.out_buf is not n.region.buffer:
            return False
        iv = interval(n.acc_base[a], self.ranges)
        return iv is not None and iv[1] + e <= n.out_buf.shape[n.spatial.index(a)]

    def _emit(self, n: StageNest, p: int) -> Stmt:
        """The loops from position p inwards, with what runs at each: attached stages, the reduction
        init, the accumulator tile's init and write-back, and the versioned cache tile."""
        st = n.st
        if p == len(st.order):
            return n.inner_stmt  # type: ignore[return-value]
        leaf = st.order[p]
        parts: list[Stmt | None] = []
        if n.cache_pos == p and n.hoist:
            n.tile_mode.update({x: "full" for x in n.hoist})
            whole = self._emit(n, p + 1)
            n.tile_mode.update({x: "part" for x in n.hoist})
            partial = self._emit(n, p + 1)
            n.tile_mode.clear()
            conds = [simplify(Cmp(">=", n.clamp[x], Const(n.ext[x])), self.ranges) for x in n.hoist]
            inside: Stmt = If(te.all_of(*conds), whole, partial)
        else:
            inside = self._emit(n, p + 1)
        parts += [self.lower_attached(o, st, leaf, n.value, n.out_buf) for o in n.attached if o.attach[2] == leaf]
        if n.cache_pos == p:
            parts.append(self._acc_init(n))
        if n.reduce_op and n.first_red == p + 1 and n.acc is None:
            parts.append(self._init_nest(n, p + 1))
        parts.append(inside)
        if n.cache_pos == p:
            parts.append(self._writeback(n))
        return self._loop(n, leaf, seq(*parts), whole_tile=True)

    def declare(self, buf: Tensor) -> None:
        nbytes = math.prod(buf.shape) * ITEMSIZE[buf.dtype]
        self.locals.append(LocalBuffer(buf, "stack" if nbytes <= STACK_LIMIT_BYTES else "heap"))

    def region_span(self, p: Stage, cons: Stage, leaf: str,
                    cons_value: Expr) -> tuple[list[Affine], list[int], list[int]]:
        """Per dimension of p, the part of cons's read index fixed outside `leaf` and the range
        [lo, hi] the loops inside it add: the region of p that one iteration of `leaf` reads."""
        inner = {cons.var(x) for x in cons.order[cons.order.index(leaf) + 1:]}
        accesses = [ld for ld in te.loads(cons_value) if ld.tensor is p.tensor]
        if not accesses:
            accesses = self.reads_inside(p, cons, leaf, cons_value, inner)
        nd = p.tensor.ndim
        outer_parts: list[Affine | None] = [None] * nd
        lo = [0] * nd
        hi = [0] * nd
        for ld in accesses:
            for d, ix in enumerate(ld.indices):
                f = to_affine(ix)
                if f is None:
                    raise ScheduleError("compute_at", leaf, f"{cons.name!r} reads {p.name!r} with a non-affine index "
                                                           f"in dimension {d}; cannot bound the region")
                o, i = f.split(inner)
                iv = i.interval(self.ranges)
                assert iv is not None
                base = Affine(o.terms, 0)
                if outer_parts[d] is None:
                    outer_parts[d], lo[d], hi[d] = base, iv[0] + o.const, iv[1] + o.const
                elif not outer_parts[d].same_terms(base):  # type: ignore[union-attr]
                    raise ScheduleError("compute_at", leaf, f"{cons.name!r} reads {p.name!r} at unrelated places")
                else:
                    lo[d], hi[d] = min(lo[d], iv[0] + o.const), max(hi[d], iv[1] + o.const)
        return outer_parts, lo, hi  # type: ignore[return-value]

    def reads_inside(self, p: Stage, cons: Stage, leaf: str, cons_value: Expr, inner: set[Var]) -> list[Load]:
        """The reads of p by the stages computed at cons's loops inside `leaf` (p computed at a loop
        of its consumer's consumer), as expressions of cons's loops and theirs; adds their loops
        to `inner`. Each such stage's region is the one `lower_attached` gives it."""
        pos = cons.order.index(leaf)
        readers = [q for q in self.attached_to(cons) if q is not p and q.attach[2] in cons.order[pos + 1:]
                   and any(ld.tensor is p.tensor for ld in te.loads(self.expand(q, q.tensor.body)))]  # type: ignore[arg-type]
        if not readers:
            raise ScheduleError("compute_at", leaf, f"neither {cons.name!r} nor a stage computed inside its loop "
                                                    f"{leaf!r} reads {p.name!r}")
        out: list[Load] = []
        for q in readers:
            offset, extent, _ = self.region_of(q, cons, q.attach[2], cons_value)
            _, axis_expr = self._loops(q, extent)
            inner.update(q.var(x) for x in q.order)
            t = q.tensor
            sub = {a.var: simplify(offset.get(a.name, Const(0)) + axis_expr[a.name], self.ranges)
                   for a in list(t.axes) + list(t.reduce_axes)}
            raw = t.body.body if isinstance(t.body, Reduce) else t.body
            value = simplify(te.substitute(self.expand(q, raw), sub), self.ranges)  # type: ignore[arg-type]
            out += [ld for ld in te.loads(value) if ld.tensor is p.tensor]
        return out

    def region_of(self, p: Stage, cons: Stage, leaf: str,
                  cons_value: Expr) -> tuple[dict[str, Expr], dict[str, int], dict[str, Expr]]:
        """Per axis of attached stage p, the offset, extent and bound of the region that consumer
        `cons` reads inside `leaf`."""
        outer_parts, lo, hi = self.region_span(p, cons, leaf, cons_value)
        offset: dict[str, Expr] = {}
        extent: dict[str, int] = {}
        bnd: dict[str, Expr] = {}
        for d, a in enumerate([ax.name for ax in p.tensor.axes]):
            off = simplify(from_affine(outer_parts[d] + Affine({}, lo[d])), self.ranges)  # type: ignore[operator]
            e = min(hi[d] - lo[d] + 1, p.tensor.shape[d])
            offset[a], extent[a] = off, e
            iv = interval(off, self.ranges)
            if iv is not None and iv[1] + e <= p.tensor.shape[d] and iv[0] >= 0:
                bnd[a] = Const(e)
            else:
                bnd[a] = simplify(BinOp("min", Const(e), BinOp("-", Const(p.tensor.shape[d]), off)), self.ranges)
        return offset, extent, bnd

    def lower_attached(self, p: Stage, cons: Stage, leaf: str, cons_value: Expr, cons_out: Tensor) -> Stmt:
        """The nest computing the region of attached stage p that consumer `cons` reads inside `leaf`."""
        offset, extent, bnd = self.region_of(p, cons, leaf, cons_value)
        axes = [a.name for a in p.tensor.axes]
        shape = [extent[a] for a in axes]
        if p.cache_at is not None:  # room for the last register tile's whole write-back (_room_for_whole_tiles)
            shape[-1] = max(shape[-1], self._span(p, extent, axes[-1]))
        buf = Tensor(f"{p.name}_local", tuple(shape), p.tensor.dtype)
        self.declare(buf)
        # the consumer reads the local buffer at (index - offset)
        self.local_of[p.name] = buf
        self.rebase[p.name] = (buf, [offset[a] for a in axes])
        stmt = self.lower_stage(p, Region(offset, extent, bnd, buf))
        self.check_sibling_reads(p, stmt)
        return stmt

    # ---- whole program ------------------------------------------------------------------------
    def run(self) -> LoopNest:
        s = self.s
        self.rebase: dict[str, tuple[Tensor, list[Expr]]] = {}
        out = s.stages[s.output.name]
        roots = [st for st in s.stages.values() if st.attach[0] == "root" and st is not out]
        order = self.topo(roots)
        parallel = any(k == "parallel" for k in out.loop_kind.values())
        pro_body = seq(*(self.lower_stage(s.stages[n], None) for n in order)) if order else None
        pro_locals = tuple(self.locals)
        self.locals = []
        main_body = self.lower_stage(out, None)
        main_body = self.rebase_loads(main_body)
        if pro_body is not None:
            pro_body = self.rebase_loads(pro_body)
        inputs = tuple(t for t in s.tensors.values() if t.is_placeholder)
        inter = tuple(s.stages[n].tensor for n in order)
        args = inputs + (s.output,) + inter
        par_ext = None
        if parallel:
            leaf = out.order[0]
            par_ext = out.extents()[leaf]
        streamed = (s.output,) if out.stream else ()
        prefetched = ((out.var(out.prefetch[0]), s.tensors[out.prefetch[1]], out.prefetch[2]),) if out.prefetch else ()
        if pro_body is not None and parallel:
            prologue = Function("prologue", args, pro_locals, pro_body)
            main = Function("kernel", args, tuple(self.locals), main_body, par_ext, streamed, prefetched)
        else:
            body = seq(pro_body, main_body) if pro_body is not None else main_body
            prologue = None
            main = Function("kernel", args, pro_locals + tuple(self.locals), body, par_ext, streamed, prefetched)
        return LoopNest(inputs, s.output, inter, prologue, main)

    def topo(self, roots: list[Stage]) -> list[str]:
        """Root stages, producers first, following reads after packing and inlining."""
        names = {r.name for r in roots}
        done: list[str] = []

        def visit(st: Stage) -> None:
            if st.name in done:
                return
            deps = [ld.tensor.name for ld in te.loads(self.expand(st, st.tensor.body))]  # type: ignore[arg-type]
            for o in self.s.stages.values():  # stages attached to st compute inside it: their inputs too
                if o.attach[0] == "at" and o.attach[1] == st.name:
                    deps += [ld.tensor.name for ld in te.loads(self.expand(o, o.tensor.body))]  # type: ignore[arg-type]
            for d in deps:
                if d in names and d != st.name:
                    visit(self.s.stages[d])
            done.append(st.name)

        for st in roots + [self.s.stages[self.s.output.name]]:
            visit(st)
        return [n for n in done if n in names]

    def rebase_loads(self, stmt: Stmt) -> Stmt:
        """Point reads of attached stages at their local buffers, shifted by the region offset."""
        def fix(e: Expr) -> Expr:
            def fn(n: Expr) -> Expr | None:
                if isinstance(n, Load) and n.tensor.name in self.rebase:
                    buf, off = self.rebase[n.tensor.name]
                    return Load(buf, tuple(simplify(BinOp("-", i, o), self.ranges) for i, o in zip(n.indices, off)))
                return None
            return te.transform(e, fn)
        return map_exprs(stmt, fix)


def map_exprs(stmt: Stmt, fn) -> Stmt:
    """Apply fn to every expression of a statement tree."""
    if isinstance(stmt, For):
        return For(stmt.var, fn(stmt.extent), stmt.kind, map_exprs(stmt.body, fn))
    if isinstance(stmt, Store):
        return Store(stmt.buffer, tuple(fn(i) for i in stmt.indices), fn(stmt.value))
    if isinstance(stmt, Seq):
        return Seq(tuple(map_exprs(x, fn) for x in stmt.stmts))
    if isinstance(stmt, If):
        return If(fn(stmt.cond), map_exprs(stmt.then, fn), map_exprs(stmt.orelse, fn) if stmt.orelse else None)
    return stmt


def lower(sched: Schedule) -> LoopNest:
    """Lower a schedule to a loop nest."""
    return Lowerer(sched).run()
