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
from dataclasses import dataclass

from autotune.errors import ScheduleError
from autotune.ir import expr as te
from autotune.ir.affine import Affine, from_affine, interval, simplify, to_affine
from autotune.ir.expr import BinOp, Cmp, Const, Expr, Load, Reduce, Tensor, Var
from autotune.ir.stmt import For, Function, If, LocalBuffer, LoopNest, Seq, Stmt, Store, seq
from autotune.schedule.schedule import Schedule, Stage

STACK_LIMIT_BYTES = 16 * 1024
ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "bool": 1}


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
        s = self.s
        t = st.tensor
        root_ext = {n: e for n, e, _ in st.root}
        if region is not None:
            root_ext.update(region.extent)
        ext = st.extents(root_ext)
        for leaf in st.order:
            self.ranges[st.var(leaf)] = (0, ext[leaf] - 1)
        axis_expr = {a: simplify(e, self.ranges) for a, e in st.axis_exprs(root_ext).items()}
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
        padded = self.padded_axes(st, expanded, sub, value)
        spatial = [a.name for a in t.axes]
        out_buf = region.buffer if region is not None else t
        store_idx = tuple(axis_expr[a] for a in spatial)
        pos = {leaf: p for p, leaf in enumerate(st.order)}
        forms = {a: to_affine(axis_expr[a]) for a in root_ext}

        # ---- which axes need clamping, and the clamp of each leaf ---------------------------
        def axis_max(a: str) -> int | None:
            iv = interval(axis_expr[a], self.ranges)
            return None if iv is None else iv[1]

        needs_bound = {}
        for a in root_ext:
            b = bound[a]
            m = axis_max(a)
            needs_bound[a] = not (isinstance(b, Const) and m is not None and m < b.value)
        guards: list[Expr] = []
        clamp: dict[str, Expr] = {}
        padded_ok: set[str] = set()  # tile loops that may run whole: they only read zero-padded panels
        leaf_axis: dict[str, str] = {}
        for a, f in forms.items():
            if f is None:
                if needs_bound[a]:
                    guards.append(Cmp("<", axis_expr[a], bound[a]))
                continue
            for v in f.terms:
                leaf_axis[v.name] = a
        cache_pos = pos[st.cache_at] if st.cache_at else None
        for a, f in forms.items():
            if f is None or not needs_bound[a]:
                continue
            vs = sorted(f.terms, key=lambda v: pos[v.name])
            for k, v in enumerate(vs):
                c = f.terms[v]
                if c <= 0:
                    raise ScheduleError("lower", v.name, "negative loop coefficient")
                rest = Affine({u: f.terms[u] for u in vs[:k]}, f.const)
                e_v = ext[v.name]
                lim = simplify(ceildiv(BinOp("-", bound[a], from_affine(rest)), c), self.ranges)
                if isinstance(lim, Const) and lim.value >= e_v:
                    continue
                clamp[v.name] = lim
                if cache_pos is not None and pos[v.name] > cache_pos and a in padded:
                    tile = c * e_v
                    outer_coefs = [f.terms[u] for u in vs[:k]]
                    if not padded[a] or (all(p % tile == 0 for p in padded[a])
                                         and all(x % tile == 0 for x in outer_coefs)):
                        padded_ok.add(v.name)

        tile_mode: dict[str, str] = {}  # leaf -> "full" | "part" while emitting a versioned cache tile

        def loop(leaf: str, body: Stmt, kind: str | None = None, whole_tile: bool = False) -> Stmt:
            v, e_v = st.var(leaf), ext[leaf]
            kind = kind or st.loop_kind.get(leaf, "serial")
            lim = None if whole_tile and leaf in padded_ok else clamp.get(leaf)
            mode = tile_mode.get(leaf)
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

        for leaf, kind in st.loop_kind.items():
            if kind == "vectorize" and pos[leaf] != len(st.order) - 1:
                raise ScheduleError("vectorize", leaf, f"only the innermost loop of stage {st.name!r} can be "
                                                       f"vectorized; loop order is {st.order}")
            if kind == "parallel" and (pos[leaf] != 0 or region is not None):
                raise ScheduleError("parallel", leaf, f"the parallel loop must be the outermost loop of the "
                                                      f"output stage; loop order is {st.order}")

        # ---- reduction init and cache tile ----------------------------------------------------
        red_leaves = [leaf for leaf in st.order if st.axis_kind[leaf] == "reduce"]
        first_red = pos[red_leaves[0]] if red_leaves else None
        acc: Tensor | None = None
        acc_dims: list[str] = []
        acc_index: tuple[Expr, ...] = ()
        acc_base: dict[str, Expr] = {}
        if cache_pos is not None:
            inner = {st.var(leaf) for leaf in st.order[cache_pos + 1:]}
            dims: list[tuple[int, str, int, Expr, Expr]] = []
            for a in spatial:
                f = forms[a]
                if f is None:
                    raise ScheduleError("cache_write", st.cache_at, f"axis {a!r} is fused across the tile; "
                                                                    "cache_write needs split/reorder only")
                o, i = f.split(inner)
                acc_base[a] = from_affine(o)
                if not i.terms:
                    continue
                iv = i.interval(self.ranges)
                assert iv is not None
                last = max(pos[v.name] for v in i.terms)
                dims.append((last, a, iv[1] + 1, from_affine(i), from_affine(o)))
            dims.sort()
            acc_dims = [d[1] for d in dims]
            acc_shape = tuple(d[2] for d in dims) or (1,)
            acc = Tensor(f"{st.name}_acc", acc_shape, t.dtype)
            self.declare(acc)
            acc_index = tuple(d[3] for d in dims) or (Const(0),)
            acc_ext = {d[1]: d[2] for d in dims}

        def init_nest(start: int) -> Stmt:
            """out[...] = init over the spatial loops inside position `start`."""
            body: Stmt = Store(out_buf, store_idx, init_value(reduce_op, t.dtype))  # type: ignore[arg-type]
            for leaf in reversed(st.order[start:]):
                if st.axis_kind[leaf] == "spatial":
                    kind = st.loop_kind.get(leaf, "serial")
                    body = loop(leaf, body, "serial" if kind in ("parallel", "unroll") else kind)
            return body

        def acc_init() -> Stmt:
            ws = [Var(f"{st.name}_w{n}") for n in range(len(acc.shape))]  # type: ignore[union-attr]
            body: Stmt = Store(acc, tuple(ws), init_value(reduce_op or "sum", t.dtype))  # type: ignore[arg-type]
            for w, e in reversed(list(zip(ws, acc.shape))):  # type: ignore[union-attr]
                self.ranges[w] = (0, e - 1)
                body = For(w, Const(e), "serial", body)
            return body

        def writeback() -> Stmt:
            ws = {a: Var(f"{st.name}_w{n}") for n, a in enumerate(acc_dims)}
            idx = []
            for a in spatial:
                idx.append(simplify(acc_base[a] + ws[a], self.ranges) if a in ws else axis_expr[a])
            src = Load(acc, tuple(ws[a] for a in acc_dims) or (Const(0),))  # type: ignore[arg-type]
            accumulate = reduce_op is not None and first_red is not None and first_red <= cache_pos  # type: ignore[operator]
            val = combine(reduce_op, Load(out_buf, tuple(idx)), src) if accumulate else src  # type: ignore[arg-type]
            body: Stmt = Store(out_buf, tuple(idx), val)
            for n, a in reversed(list(enumerate(acc_dims))):
                w, e = ws[a], acc_ext[a]
                self.ranges[w] = (0, e - 1)
                kind = "vectorize" if n == len(acc_dims) - 1 else "serial"
                lim = None
                if needs_bound[a]:
                    lim = simplify(BinOp("-", bound[a], acc_base[a]), self.ranges)
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

        # ---- innermost statement ------------------------------------------------------------
        if acc is not None:
            target, tidx = acc, acc_index
        else:
            target, tidx = out_buf, store_idx
        val = combine(reduce_op, Load(target, tidx), value) if reduce_op else value
        inner_stmt: Stmt = Store(target, tidx, val)
        if guards:
            g = guards[0]
            for x in guards[1:]:
                g = BinOp("and", g, x)
            inner_stmt = If(g, inner_stmt)

        attached = [o for o in s.stages.values() if o.attach[0] == "at" and o.attach[1] == st.name]

        # Tails of unrolled/vectorized loops inside a cache tile are versioned once, at the tile: a
        # whole tile runs them with their constant extent, a partial one runs them guarded.
        # (Versioning each such loop where it stands would put a branch in the reduction loop and
        # keep the accumulators out of registers.) Clamped serial loops stay min() loops.
        hoist: list[str] = []
        if cache_pos is not None and not any(o.attach[2] in st.order[cache_pos + 1:] for o in attached):
            inner_vars = {st.var(x) for x in st.order[cache_pos + 1:]}
            for x in st.order[cache_pos + 1:]:
                if (x in clamp and x not in padded_ok and st.loop_kind.get(x) in ("unroll", "vectorize")
                        and not any(isinstance(n, Var) and n in inner_vars for n in te.walk(clamp[x]))):
                    hoist.append(x)

        def emit(p: int) -> Stmt:
            if p == len(st.order):
                return inner_stmt
            leaf = st.order[p]
            parts: list[Stmt | None] = []
            if cache_pos == p and hoist:
                tile_mode.update({x: "full" for x in hoist})
                whole = emit(p + 1)
                tile_mode.update({x: "part" for x in hoist})
                partial = emit(p + 1)
                tile_mode.clear()
                conds = [simplify(Cmp(">=", clamp[x], Const(ext[x])), self.ranges) for x in hoist]
                cond = conds[0]
                for c in conds[1:]:
                    cond = BinOp("and", cond, c)
                inside: Stmt = If(cond, whole, partial)
            else:
                inside = emit(p + 1)
            parts += [self.lower_attached(o, st, leaf, value, out_buf) for o in attached if o.attach[2] == leaf]
            if cache_pos == p:
                parts.append(acc_init())
            if reduce_op and first_red == p + 1 and (acc is None or first_red <= cache_pos):  # type: ignore[operator]
                parts.append(init_nest(p + 1))
            parts.append(inside)
            if cache_pos == p:
                parts.append(writeback())
            return loop(leaf, seq(*parts), whole_tile=True)

        top: list[Stmt | None] = []
        if reduce_op and first_red == 0 and (acc is None or first_red <= cache_pos):  # type: ignore[operator]
            top.append(init_nest(0))
        top.append(emit(0))
        return seq(*top)

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
            raise ScheduleError("compute_at", leaf, f"stage {cons.name!r} does not read {p.name!r} directly")
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

    def lower_attached(self, p: Stage, cons: Stage, leaf: str, cons_value: Expr, cons_out: Tensor) -> Stmt:
        """The nest computing the region of attached stage p that consumer `cons` reads inside `leaf`."""
        outer_parts, lo, hi = self.region_span(p, cons, leaf, cons_value)
        axes = [a.name for a in p.tensor.axes]
        offset: dict[str, Expr] = {}
        extent: dict[str, int] = {}
        bnd: dict[str, Expr] = {}
        for d, a in enumerate(axes):
            off = simplify(from_affine(outer_parts[d] + Affine({}, lo[d])), self.ranges)  # type: ignore[operator]
            e = min(hi[d] - lo[d] + 1, p.tensor.shape[d])
            offset[a], extent[a] = off, e
            iv = interval(off, self.ranges)
            if iv is not None and iv[1] + e <= p.tensor.shape[d] and iv[0] >= 0:
                bnd[a] = Const(e)
            else:
                bnd[a] = simplify(BinOp("min", Const(e), BinOp("-", Const(p.tensor.shape[d]), off)), self.ranges)
        buf = Tensor(f"{p.name}_local", tuple(extent[a] for a in axes), p.tensor.dtype)
        self.declare(buf)
        # the consumer reads the local buffer at (index - offset)
        self.local_of[p.name] = buf
        self.rebase[p.name] = (buf, [offset[a] for a in axes])
        return self.lower_stage(p, Region(offset, extent, bnd, buf))

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
        if pro_body is not None and parallel:
            prologue = Function("prologue", args, pro_locals, pro_body)
            main = Function("kernel", args, tuple(self.locals), main_body, par_ext)
        else:
            body = seq(pro_body, main_body) if pro_body is not None else main_body
            prologue = None
            main = Function("kernel", args, pro_locals + tuple(self.locals), body, par_ext)
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
