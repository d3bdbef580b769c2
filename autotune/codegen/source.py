"""Print a loop nest as readable Python source for numba.njit.

Example::

    >>> from autotune.ir import expr as te
    >>> from autotune.schedule import Schedule
    >>> from autotune.codegen.source import generate_source
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> print(generate_source(Schedule(B)).split("def kernel")[1].strip())
    (A, B):
        for i in range(4):
            B[i] = A[i] * _f32_2
"""
from __future__ import annotations

import builtins
import dataclasses
import hashlib
import keyword
import math
import unicodedata

from autotune.codegen.fuse import fuse_siblings
from autotune.codegen.prefetch import prefetch_rows
from autotune.codegen.stream import stream_rows
from autotune.environment import FASTMATH
from autotune.ir import expr as te
from autotune.ir.affine import simplify
from autotune.ir.expr import BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Tensor, Var, promote
from autotune.ir.nonfinite import shows_nonfinite
from autotune.ir.stmt import Comment, For, Function, If, LoopNest, PrefetchRow, Seq, Stmt, Store, StreamRow
from autotune.schedule.lower import lower, map_exprs
from autotune.schedule.schedule import Schedule

NP_DTYPE = {"float32": "np.float32", "float64": "np.float64", "int64": "np.int64", "int32": "np.int32",
            "bool": "np.bool_"}
NB_DTYPE = {"float32": "float32", "float64": "float64", "int64": "int64", "int32": "int32", "bool": "boolean"}
# te's function -> the helper of autotune.codegen.runtime a kernel calls for it: inline code that LLVM
# vectorizes (np.exp, np.log, np.tanh are scalar libm calls; np.sqrt is llvm.sqrt, vectorized already)
TRANSCENDENTALS = {"exp": "vexp", "log": "vlog", "tanh": "vtanh", "sigmoid": "vsigmoid"}
RESERVED = set(dir(builtins)) | set(keyword.kwlist) | {"np", "numba", "njit", "stack_empty", "pow2", "prologue", "kernel", "KernelPipeline",
                                                    "NoAliasKernelPipeline", "vexp_nonpos", "stream_row", "stream_fence"} | set(TRANSCENDENTALS.values())
PREC = {"or": 1, "and": 2, "cmp": 4, "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7, "atom": 10}


def _clamped_nonpos(e: Expr) -> bool:
    """Whether e is min(max(v, lo), 0) or max(min(v, 0), lo) (either operand order) with a constant
    lo >= runtime.EXP_NONPOS_LO of its type: exp of it is printed as `vexp_nonpos`, which needs no
    clamps, NaN test or second 2**n factor of its own (softmax's exp(x - max))."""
    from autotune.codegen.runtime import EXP_NONPOS_LO

    def split(b: Expr, op: str) -> tuple[Expr, float] | None:
        if not (isinstance(b, BinOp) and b.op == op):
            return None
        for inner, c in ((b.a, b.b), (b.b, b.a)):
            if isinstance(c, Const) and isinstance(c.value, (int, float)) and not isinstance(c.value, bool):
                return inner, float(c.value)
        return None
    lo_bound = EXP_NONPOS_LO.get(e.dtype or "")
    if lo_bound is None:
        return False
    for outer, inner_op in (("min", "max"), ("max", "min")):
        out = split(e, outer)
        if out is None:
            continue
        inn = split(out[0], inner_op)
        if inn is None:
            continue
        lo, hi = (inn[1], out[1]) if outer == "min" else (out[1], inn[1])
        if hi == 0.0 and lo_bound <= lo <= 0.0:
            return True
    return False


def unroll(stmt: Stmt, ranges: dict[Var, tuple[int, int]] | None = None) -> Stmt:
    """Replace unrolled loops of constant extent by copies of their body, one per iteration;
    loops of one iteration (other than the threads' loop) by their body.

    Every copy is printed, even of a small tile: left as a loop for LLVM to unroll, a GEMM
    micro-kernel of 4-8 rows of one vector each ran 40-60x slower on AVX-512 (its accumulators not
    kept in registers; 2.5 against 100-160 ms at 512^3), and one of 8 rows of 8 floats 6x slower
    on AVX2. The loop form compiled faster (conv2d 3x3 s2 candidates by 45%), but no rule found so
    far tells which tiles LLVM unrolls (measure/experiments/RESULTS.md)."""
    if isinstance(stmt, For):
        if isinstance(stmt.extent, Const) and stmt.extent.value == 1 and stmt.kind != "parallel":
            # a loop of one iteration is its body with the index 0: less for Numba to type and lower
            # (GEMM, conv2d and Winograd candidates compiled 12-22% faster; measure/experiments/RESULTS.md)
            zero = Const(0)
            return unroll(map_exprs(stmt.body, lambda e: simplify(te.substitute(e, {stmt.var: zero}), ranges)), ranges)
        body = unroll(stmt.body, ranges)
        if stmt.kind == "unroll" and isinstance(stmt.extent, Const):
            copies = []
            for it in range(stmt.extent.value):
                c = Const(it)
                copies.append(map_exprs(body, lambda e, c=c: simplify(te.substitute(e, {stmt.var: c}), ranges)))
            return Seq(tuple(copies))
        return For(stmt.var, stmt.extent, stmt.kind, body)
    if isinstance(stmt, Seq):
        return Seq(tuple(unroll(s, ranges) for s in stmt.stmts))
    if isinstance(stmt, If):
        return If(stmt.cond, unroll(stmt.then, ranges), unroll(stmt.orelse, ranges) if stmt.orelse else None)
    return stmt


HOIST_CHARS = 40  # a repeated float subexpression printed at least this long gets a temporary


class Printer:
    def __init__(self) -> None:
        self.consts: dict[str, str] = {}
        self.names: dict[int, str] = {}
        self.taken: set[str] = set(RESERVED)
        # common subexpressions of the stored value being printed (see `value`)
        self.mode: str | None = None  # None, "count" or "hoist"
        self.counts: dict[str, int] = {}
        self.bound: dict[str, str] = {}
        self.pending: list[str] = []
        self.temps = 0
        self.guarded = 0  # inside a select's branch: nothing new is hoisted (it may be unsafe to evaluate)
        self.helpers = {"stack_empty"}  # what the kernels import from autotune.codegen.runtime (+ their pipeline)

    def name(self, obj: Var | Tensor) -> str:
        key = id(obj)
        if key not in self.names:
            # Python folds identifiers by NFKC (`ｉ` is `i`): print the folded name, and a plain
            # one for what is no ASCII identifier, so two names never print as one variable
            base = unicodedata.normalize("NFKC", obj.name)
            if not (base.isascii() and base.isidentifier()):
                base = "t" if isinstance(obj, Tensor) else "v"
            n, k = base, 1
            while n in self.taken:
                n, k = f"{base}_{k}", k + 1
            self.taken.add(n)
            self.names[key] = n
        return self.names[key]

    def const(self, c: Const, hint: str | None) -> str:
        dtype = c.dtype or hint
        v = c.value
        if dtype in ("float32", "float64") or isinstance(v, float):
            dtype = dtype if dtype in ("float32", "float64") else "float64"
            fv = float(v)
            if math.isinf(fv) or math.isnan(fv):
                raise ValueError("infinite constants are not allowed in kernels compiled with ninf/nnan")
            text = str(int(fv)) if fv.is_integer() and abs(fv) < 1e15 else repr(fv)
            key = f"_f{dtype[-2:]}_{text.replace('-', 'm').replace('.', 'p').replace('+', '')}"
            self.consts[key] = f"{NP_DTYPE[dtype]}({fv!r})"
            return key
        if dtype == "bool" or isinstance(v, bool):
            return "True" if v else "False"
        return str(int(v))

    def value(self, e: Expr, hint: str | None) -> tuple[list[str], str]:
        """(temporaries, text) of a stored value: a float subexpression printed at least
        HOIST_CHARS long that repeats (exp's argument inside its polynomial) is computed once into
        a temporary before the statement, so the source (and Numba's work) grows with the
        expression's size, not with its printed tree."""
        self.mode, self.counts = "count", {}
        try:
            text = self.expr(e, hint)[0]
            if not any(n > 1 and len(k) >= HOIST_CHARS for k, n in self.counts.items()):
                return [], text
            self.mode, self.bound, self.pending = "hoist", {}, []
            text = self.expr(e, hint)[0]
            return self.pending, text
        finally:
            self.mode, self.counts, self.bound, self.pending = None, {}, {}, []

    def expr(self, e: Expr, hint: str | None = None) -> tuple[str, int]:
        if self.mode is None or isinstance(e, (Const, Var, Load)) or (e.dtype or hint) not in ("float32", "float64"):
            return self.node(e, hint)
        if self.mode == "count":
            text, prec = self.node(e, hint)
            self.counts[text] = self.counts.get(text, 0) + 1
            return text, prec
        self.mode = None
        raw = self.node(e, hint)[0]
        self.mode = "hoist"
        if raw in self.bound:
            return self.bound[raw], PREC["atom"]
        text, prec = self.node(e, hint)
        if self.counts.get(raw, 0) > 1 and len(raw) >= HOIST_CHARS and not self.guarded:
            name = f"_c{self.temps}"
            self.temps += 1
            self.pending.append(f"{name} = {text}")
            self.bound[raw] = name
            return name, PREC["atom"]
        return text, prec

    def node(self, e: Expr, hint: str | None = None) -> tuple[str, int]:
        if isinstance(e, Const):
            s = self.const(e, hint)
            return s, (PREC["atom"] if not s.startswith("-") else PREC["+"])
        if isinstance(e, Var):
            return self.name(e), PREC["atom"]
        if isinstance(e, Load):
            idx = ", ".join(self.expr(i, "int64")[0] for i in e.indices)
            return f"{self.name(e.tensor)}[{idx}]", PREC["atom"]
        if isinstance(e, BinOp):
            d = promote(e.a.dtype, e.b.dtype) or hint
            if e.op in ("min", "max"):
                return f"{e.op}({self.expr(e.a, d)[0]}, {self.expr(e.b, d)[0]})", PREC["atom"]
            p = PREC[e.op]
            a, pa = self.expr(e.a, d)
            b, pb = self.expr(e.b, d)
            if pa < p:
                a = f"({a})"
            if pb <= p and not (pb == p and e.op in ("+", "*") and isinstance(e.b, BinOp) and e.b.op == e.op):
                b = f"({b})"
            return f"{a} {e.op} {b}", p
        if isinstance(e, Cmp):
            d = promote(e.a.dtype, e.b.dtype)
            a, pa = self.expr(e.a, d)
            b, pb = self.expr(e.b, d)
            return f"{a if pa > PREC['cmp'] else f'({a})'} {e.op} {b if pb > PREC['cmp'] else f'({b})'}", PREC["cmp"]
        if isinstance(e, Select):
            d = e.dtype or hint
            self.guarded += 1
            try:
                true = self.expr(e.true, d)[0]
                self.guarded -= 1
                cond = self.expr(e.cond)[0]
                self.guarded += 1
                return f"({true} if {cond} else {self.expr(e.false, d)[0]})", PREC["atom"]
            finally:
                self.guarded -= 1
        if isinstance(e, Cast):
            return f"{NP_DTYPE[e.dtype]}({self.expr(e.x)[0]})", PREC["atom"]  # type: ignore[index]
        if isinstance(e, Call):
            d = e.dtype or hint
            x = self.expr(e.args[0], d)
            if e.func == "neg":
                return f"-{x[0] if x[1] >= PREC['*'] else f'({x[0]})'}", PREC["*"]
            if e.func == "abs":
                return f"abs({x[0]})", PREC["atom"]
            if e.func == "pow2" or e.func in TRANSCENDENTALS:
                helper = "vexp_nonpos" if e.func == "exp" and _clamped_nonpos(e.args[0]) else TRANSCENDENTALS.get(e.func, e.func)
                self.helpers.add(helper)
                arg = x[0] if e.args[0].dtype in ("float32", "float64") else f"{NP_DTYPE[d]}({x[0]})"  # type: ignore[index]
                return f"{helper}({arg})", PREC["atom"]
            return f"np.{e.func}({x[0]})", PREC["atom"]
        raise TypeError(f"cannot print {type(e).__name__}")

    def stmt(self, s: Stmt, ind: int, out: list[str]) -> None:
        pad = "    " * ind
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, ind, out)
        elif isinstance(s, For):
            v = self.name(s.var)
            note = {"vectorize": "  # vectorize", "parallel": "  # parallel over threads"}.get(s.kind, "")
            out.append(f"{pad}for {v} in range({self.expr(s.extent, 'int64')[0]}):{note}")
            if s.kind == "parallel":  # this call runs [_lo, _hi); a constant range keeps the
                # indices provably non-negative, so Numba's wraparound folds away and reads stay
                # vector loads (range(_lo, _hi) made them gathers)
                out.append(f"{pad}    if {v} < _lo or {v} >= _hi:")
                out.append(f"{pad}        continue")
            self.stmt(s.body, ind + 1, out)
        elif isinstance(s, If):
            out.append(f"{pad}if {self.expr(s.cond)[0]}:")
            self.stmt(s.then, ind + 1, out)
            if s.orelse is not None:
                out.append(f"{pad}else:")
                self.stmt(s.orelse, ind + 1, out)
        elif isinstance(s, Store):
            idx = ", ".join(self.expr(i, "int64")[0] for i in s.indices)
            target = f"{self.name(s.buffer)}[{idx}]"
            v = s.value
            if (isinstance(v, BinOp) and v.op in ("+", "*") and isinstance(v.a, Load) and v.a.tensor is s.buffer
                    and len(v.a.indices) == len(s.indices)
                    and all(self.expr(x)[0] == self.expr(y)[0] for x, y in zip(v.a.indices, s.indices))):
                temps, text = self.value(v.b, s.buffer.dtype)
                out += [pad + t for t in temps] + [f"{pad}{target} {v.op}= {text}"]
            else:
                temps, text = self.value(v, s.buffer.dtype)
                out += [pad + t for t in temps] + [f"{pad}{target} = {text}"]
        elif isinstance(s, StreamRow):
            self.helpers.add("stream_row")
            idx = "".join(f"{self.expr(i, 'int64')[0]}, " for i in s.indices)
            out.append(f"{pad}stream_row({self.name(s.buffer)}, ({idx.rstrip()}), {self.name(s.src)}, {s.extent}, {s.vector_bytes})")
        elif isinstance(s, PrefetchRow):
            self.helpers.add("prefetch_row")
            idx = "".join(f"{self.expr(i, 'int64')[0]}, " for i in s.indices)
            out.append(f"{pad}prefetch_row({self.name(s.tensor)}, ({idx.rstrip()}), {s.extent}, {s.line_bytes})")
        elif isinstance(s, Comment):
            out.append(f"{pad}# {s.text}")
        else:
            raise TypeError(f"cannot print {type(s).__name__}")


def scratch(fn: Function) -> list[Tensor]:
    """Local buffers too big for the stack. They are arguments, allocated by the caller once per
    thread: allocating them in every call made the allocator map fresh pages each time (a page
    fault per 4 KiB, costly in a virtual machine)."""
    return [lb.tensor for lb in fn.locals if lb.scope == "heap"]


def signature(fn: Function) -> str:
    parts = []
    for t in list(fn.args) + scratch(fn):
        dims = ", ".join([":"] * (t.ndim - 1) + ["::1"])
        parts.append(f"{NB_DTYPE[t.dtype]}[{dims}]")
    if fn.parallel_extent is not None:
        parts += ["int64", "int64"]
    return f"void({', '.join(parts)})"


def print_function(p: Printer, fn: Function, fastmath: tuple[str, ...], noalias: bool = False) -> list[str]:
    fn = prefetch_rows(dataclasses.replace(fn, body=fuse_siblings(unroll(fn.body), reassoc="reassoc" in fastmath)))
    if fn.streamed:
        from autotune.target import current
        fn = stream_rows(fn, current().vector_bits // 8)
    body = fn.body
    pipeline = "NoAliasKernelPipeline" if noalias else "KernelPipeline"
    p.helpers.update((pipeline, "healing_njit"))  # numba.njit with a verified disk cache (codegen/healing.py)
    args = [p.name(t) for t in list(fn.args) + scratch(fn)] + (["_lo", "_hi"] if fn.parallel_extent is not None else [])
    flags = "{" + ", ".join(repr(f) for f in sorted(fastmath)) + "}"
    out = [f"@healing_njit(\"{signature(fn)}\", fastmath={flags}, nogil=True, cache=True, error_model=\"numpy\", "
           f"no_cpython_wrapper=True, pipeline_class={pipeline})",
           f"def {fn.name}({', '.join(args)}):"]
    for lb in fn.locals:
        if lb.scope == "stack":
            t = lb.tensor
            shape = "(" + ", ".join(str(s) for s in t.shape) + ("," if t.ndim == 1 else "") + ")"
            out.append(f"    {p.name(t)} = numba.carray(stack_empty({math.prod(t.shape)}, {NP_DTYPE[t.dtype]}), {shape})")
    p.stmt(body, 1, out)
    if fn.streamed:
        p.helpers.add("stream_fence")
        out.append("    stream_fence()")
    return out


def _header(helpers: set[str], consts: dict[str, str]) -> list[str]:
    return ["# Generated by autotune from a schedule; do not edit.",
            "import numba",
            "import numpy as np",
            "",
            f"from autotune.codegen.runtime import {', '.join(sorted(helpers))}",
            ""] + [f"{k} = {v}" for k, v in consts.items()] + ["", ""]


def fastmath_flags(nest: LoopNest, reassoc: bool) -> tuple[str, ...]:
    """The fast-math flags of a nest's functions: FASTMATH (and reassoc when asked), without nnan
    and ninf where no reassoc is asked and the nest's output shows every NaN and Inf of its inputs
    (autotune.ir.nonfinite): a call of such a kernel checks its output after the run instead of
    its inputs before (Kernel.checks_output)."""
    if not reassoc and shows_nonfinite(nest):
        return tuple(f for f in FASTMATH if f not in ("nnan", "ninf"))
    return FASTMATH + (("reassoc",) if reassoc else ())


def _printed(nest: LoopNest, reassoc: bool, noalias: bool) -> list[tuple[str, Printer, list[str]]]:
    """(name, printer, lines) of each function of a nest, prologue first. Each function has its
    own printer (its constants and helpers only); the nest's tensors are named first, the same in each."""
    fastmath = fastmath_flags(nest, reassoc)
    out = []
    for name, fn in (("prologue", nest.prologue), ("kernel", nest.main)):
        if fn is None:
            continue
        p = Printer()
        for t in list(nest.inputs) + [nest.output] + list(nest.intermediates):
            p.name(t)
        out.append((name, p, print_function(p, fn, fastmath, noalias)))
    return out


def generate_sources(sched: Schedule, nest: LoopNest | None = None, *, reassoc: bool = False,
                     noalias: bool = False) -> tuple[str, dict[str, str]]:
    """(`generate_source`, `generate_modules`) of a schedule, its functions printed once. noalias:
    compile them with NoAliasKernelPipeline (array arguments never overlap)."""
    printed = _printed(nest or lower(sched), reassoc, noalias)
    modules = {name: "\n".join(_header(p.helpers, p.consts) + lines) + "\n" for name, p, lines in printed}
    lines = _header(set().union(*(p.helpers for _, p, _ in printed)),
                    {k: v for _, p, _ in printed for k, v in p.consts.items()})
    for k, (_, _, body) in enumerate(printed):
        lines += ([""] if k else []) + body
    return "\n".join(lines) + "\n", modules


def generate_modules(sched: Schedule, nest: LoopNest | None = None, *, reassoc: bool = False,
                     noalias: bool = False) -> dict[str, str]:
    """One importable module source per function of a schedule's kernel ("prologue" if it has
    one, then "kernel"), each with just the constants and helpers it uses. Compiled one by one, a
    prologue that many candidates share (the same weight packing under other register tiles) is
    compiled once.

    >>> from autotune.ir import te
    >>> from autotune.schedule import Schedule
    >>> A = te.placeholder((8,), name="A")
    >>> list(generate_modules(Schedule(te.compute((8,), lambda i: A[i] + 1.0, name="B"))))
    ['kernel']
    """
    return generate_sources(sched, nest, reassoc=reassoc, noalias=noalias)[1]


def generate_source(sched: Schedule, nest: LoopNest | None = None, *, reassoc: bool = False,
                    noalias: bool = False) -> str:
    """The source of a schedule's kernel as one readable module: the functions of
    `generate_modules` under one header. Deterministic and importable."""
    return generate_sources(sched, nest, reassoc=reassoc, noalias=noalias)[0]


def source_hash(source: str, extra: str = "") -> str:
    return hashlib.sha256((source + "\0" + extra).encode()).hexdigest()[:20]
