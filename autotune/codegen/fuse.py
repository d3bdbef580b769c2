"""Fuse adjacent innermost loops over the same range into one, where that changes no result.

Stages computed at one loop of their consumer print as sibling loops: softmax's exp loop, then the
row sum over what it wrote; layernorm's two row sums over the same row. Each is a pass over the
row; fused, the sum is added where the value is made (one loop, its loads and loop overhead once).
LLVM would not do it (its loop fusion pass is not in Numba's pipeline).

Two loops fuse when both are serial or vectorized, have the same constant extent and no loop
inside, and:
- the second writes nothing the first reads or writes;
- what the first writes and the second reads, the second reads at the very element the first
  wrote in the same iteration, and the first writes a distinct element in each iteration (so that
  element's last write is that iteration's);
- the statements between them (stores, like the sum's initial value) touch nothing the first loop
  writes and write nothing it reads: they move before it;
- a sum into one element (`s[0] += ...`, the same element in every iteration) is in neither, or
  the kernel allows reassociation (`reassoc`) and it is a sum: LLVM vectorizes a float sum only
  then (never a max or min from Numba), and a loop with a sum it cannot vectorize would keep the
  other loop's work scalar too.

    >>> from autotune.ir import te
    >>> from autotune.ir.stmt import For, Seq, Store
    >>> x, e, s = te.placeholder((8,), name="x"), te.placeholder((8,), name="e"), te.placeholder((1,), name="s")
    >>> j, k = te.Var("j"), te.Var("k")
    >>> loops = Seq((For(j, te.Const(8), "vectorize", Store(e, (j,), x[j] * 2.0)),
    ...              Store(s, (te.Const(0),), te.Const(0.0)),
    ...              For(k, te.Const(8), "serial", Store(s, (te.Const(0),), s[0] + e[k]))))
    >>> fused = fuse_siblings(loops, reassoc=True)
    >>> [type(t).__name__ for t in fused.stmts], [type(t).__name__ for t in fused.stmts[1].body.stmts]
    (['Store', 'For'], ['Store', 'Store'])
    >>> fuse_siblings(loops, reassoc=False) is loops  # the sum would not vectorize: unchanged
    True
"""
from __future__ import annotations

from collections.abc import Iterable

from autotune.ir import expr as te
from autotune.ir.affine import Affine, to_affine
from autotune.ir.expr import Expr, Tensor, Var
from autotune.ir.stmt import Comment, For, If, Seq, Stmt, Store, seq
from autotune.schedule.lower import map_exprs

_FUSIBLE = ("serial", "vectorize")

Access = dict[Tensor, list[tuple[Expr, ...]]]  # buffer -> the indices it is read (or written) at


def fuse_siblings(stmt: Stmt, *, reassoc: bool) -> Stmt:
    """`stmt` with every run of fusible sibling loops fused (see the module docstring); `stmt`
    itself when nothing fuses. reassoc: the kernel is compiled with the fast-math flag reassoc."""
    if isinstance(stmt, For):
        body = fuse_siblings(stmt.body, reassoc=reassoc)
        return stmt if body is stmt.body else For(stmt.var, stmt.extent, stmt.kind, body)
    if isinstance(stmt, If):
        then = fuse_siblings(stmt.then, reassoc=reassoc)
        orelse = fuse_siblings(stmt.orelse, reassoc=reassoc) if stmt.orelse else stmt.orelse
        return stmt if then is stmt.then and orelse is stmt.orelse else If(stmt.cond, then, orelse)
    if not isinstance(stmt, Seq):
        return stmt
    flat = _flat(stmt)  # nested sequences are one sequence
    items = [fuse_siblings(s, reassoc=reassoc) for s in flat]
    changed = any(a is not b for a, b in zip(items, flat))
    out: list[Stmt] = []
    i = 0
    while i < len(items):
        first = items[i]
        if _loop(first):
            j = i + 1
            while j < len(items) and isinstance(items[j], (Store, Comment)):
                j += 1
            fused = _fuse(first, items[i + 1:j], items[j], reassoc) if j < len(items) else None
            if fused is not None:
                changed = True
                out.extend(items[i + 1:j])  # the statements between move before the fused loop
                items[j] = fused            # which may fuse with the loop after it
                i = j
                continue
        out.append(first)
        i += 1
    return seq(*out) if changed else stmt


def _flat(s: Stmt) -> list[Stmt]:
    return [y for x in s.stmts for y in _flat(x)] if isinstance(s, Seq) else [s]


def _loop(s: Stmt) -> bool:
    return isinstance(s, For) and s.kind in _FUSIBLE and isinstance(s.extent, te.Const) and not _has_loop(s.body)


def _has_loop(s: Stmt) -> bool:
    if isinstance(s, For):
        return True
    if isinstance(s, Seq):
        return any(_has_loop(x) for x in s.stmts)
    if isinstance(s, If):
        return _has_loop(s.then) or (s.orelse is not None and _has_loop(s.orelse))
    return False


def _fuse(a: For, between: list[Stmt], b: Stmt, reassoc: bool) -> For | None:
    if not _loop(b):
        return None
    assert isinstance(b, For) and isinstance(a.extent, te.Const) and isinstance(b.extent, te.Const)
    if a.extent.value != b.extent.value:
        return None
    body_b = _substitute(b.body, b.var, a.var)
    if not (_vectorizable_sums(a.body, a.var, reassoc) and _vectorizable_sums(body_b, a.var, reassoc)):
        return None
    reads_a, writes_a = _accesses([a.body])
    reads_m, writes_m = _accesses(between)
    reads_b, writes_b = _accesses([body_b])
    touched_a = reads_a.keys() | writes_a.keys()
    if writes_b.keys() & touched_a or writes_m.keys() & touched_a or reads_m.keys() & writes_a.keys():
        return None
    for buf in writes_a.keys() & reads_b.keys():
        written = {_key(ix) for ix in writes_a[buf]}
        if len(written) != 1 or None in written:
            return None
        (w,) = written
        if not any(a.var in f.terms for f in _affine(writes_a[buf][0])):  # the same element in every iteration
            return None
        if any(_key(ix) != w for ix in reads_b[buf]):
            return None
    kind = "vectorize" if "vectorize" in (a.kind, b.kind) else "serial"
    return For(a.var, a.extent, kind, seq(a.body, body_b))


def _vectorizable_sums(body: Stmt, var: Var, reassoc: bool) -> bool:
    """Whether every store of the loop body into one element (its indices without `var`) is a sum
    LLVM vectorizes: `x[i] = x[i] + v` under reassoc."""
    def ok(s: Stmt) -> bool:
        if isinstance(s, Seq):
            return all(ok(x) for x in s.stmts)
        if isinstance(s, If):
            return ok(s.then) and (s.orelse is None or ok(s.orelse))
        if not isinstance(s, Store) or any(var in f.terms for f in _affine(s.indices)):
            return True
        v = s.value
        return reassoc and isinstance(v, te.BinOp) and v.op == "+" and any(
            isinstance(t, te.Load) and t.tensor is s.buffer and _key(t.indices) == _key(s.indices) is not None
            for t in (v.a, v.b))
    return ok(body)


def _substitute(s: Stmt, old: Var, new: Var) -> Stmt:
    return map_exprs(s, lambda e: te.substitute(e, {old: new}))


def _affine(ix: tuple[Expr, ...]) -> list[Affine]:
    return [f for f in map(to_affine, ix) if f is not None]


def _key(ix: tuple[Expr, ...]) -> tuple | None:
    """Indices in a comparable form (affine normal forms), None when one is not affine."""
    forms = [to_affine(e) for e in ix]
    if any(f is None for f in forms):
        return None
    return tuple((f.const, frozenset(f.terms.items())) for f in forms if f is not None)


def _accesses(stmts: Iterable[Stmt]) -> tuple[Access, Access]:
    """(reads, writes) of statements without loops: each buffer and the indices it is accessed at."""
    reads: Access = {}
    writes: Access = {}

    def read(e: Expr) -> None:
        for ld in te.loads(e):  # those inside indices too
            reads.setdefault(ld.tensor, []).append(ld.indices)

    def visit(s: Stmt) -> None:
        if isinstance(s, Store):
            writes.setdefault(s.buffer, []).append(s.indices)
            for i in s.indices:
                read(i)
            read(s.value)
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, If):
            read(s.cond)
            visit(s.then)
            if s.orelse is not None:
                visit(s.orelse)
    for s in stmts:
        visit(s)
    return reads, writes


__all__ = ["fuse_siblings"]
