"""Program graphs of lowered loop nests (autotune.cost_model.graph.ProgramGraph), for graph cost models.

Nodes: loops (one opcode per loop kind), stores, loads, arithmetic and math operations,
constants and buffers (one opcode per scope). Edges: nesting (loop -> what it contains) and
data flow (operand -> operation -> store -> buffer; buffer -> load). Each node carries NODE_FEATS
numbers: log2 extent, depth, log2 bytes of its buffer, innermost stride class, dtype size, ...
The per-config feature vector (features.extract) is joined to the graph, like TpuGraphs'
config_feat.

Example::

    >>> import random
    >>> from autotune.backends import config_graph
    >>> from autotune.task import Task
    >>> t = Task.create("matmul", "16x16x16", threads=1)
    >>> config_graph(t, t.space().sample(random.Random(0))).node_feat.shape[1] == NODE_FEATS
    True
"""
from __future__ import annotations

import math

import numpy as np

from autotune.backends.cpu.features import extract
from autotune.backends.cpu.loops import extent, stride
from autotune.cost_model.graph import NODE_FEATS, OPCODE, ProgramGraph
from autotune.dtypes import ITEMSIZE
from autotune.ir import expr as te
from autotune.ir.expr import BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Tensor, Var
from autotune.ir.stmt import For, If, LoopNest, Seq, Stmt, Store

BINOP = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "min": "min", "max": "max",
         "and": "and", "or": "or"}


class _Builder:
    def __init__(self, scopes: dict[int, str]) -> None:
        self.ops: list[int] = []
        self.feats: list[list[float]] = []
        self.edges: list[tuple[int, int]] = []
        self.buffers: dict[int, int] = {}
        self.scopes = scopes
        self.loops: list[tuple[Var, int]] = []

    def node(self, op: str, f: list[float]) -> int:
        self.ops.append(OPCODE.get(op, OPCODE["other"]))
        self.feats.append((f + [0.0] * NODE_FEATS)[:NODE_FEATS])
        return len(self.ops) - 1

    def buffer(self, t: Tensor) -> int:
        if id(t) not in self.buffers:
            scope = self.scopes.get(id(t), "global")
            nbytes = math.prod(t.shape) * ITEMSIZE[t.dtype]
            self.buffers[id(t)] = self.node(f"buffer_{scope}", [0, 0, math.log2(nbytes + 1), 0, ITEMSIZE[t.dtype],
                                                                 float(len(t.shape))])
        return self.buffers[id(t)]

    def access(self, t: Tensor, idx: tuple[Expr, ...]) -> list[float]:
        s = stride(t, idx, self.loops[-1][0] if self.loops else None)
        return [0, float(len(self.loops)), math.log2(math.prod(t.shape) * ITEMSIZE[t.dtype] + 1),
                float(min(s, 2)), ITEMSIZE[t.dtype], float(len(idx))]

    def expr(self, e: Expr) -> int:
        if isinstance(e, Load):
            n = self.node("load", self.access(e.tensor, e.indices))
            self.edges.append((self.buffer(e.tensor), n))
            return n
        if isinstance(e, Const):
            return self.node("const", [0, float(len(self.loops))])
        if isinstance(e, Var):
            return self.node("var", [0, float(len(self.loops))])
        if isinstance(e, BinOp):
            op = BINOP.get(e.op, "other")
        elif isinstance(e, Cmp):
            op = "cmp"
        elif isinstance(e, Select):
            op = "select"
        elif isinstance(e, Cast):
            op = "cast"
        elif isinstance(e, Call):
            op = e.func
        else:
            op = "other"
        n = self.node(op, [0, float(len(self.loops)), 0, 0, float(ITEMSIZE.get(e.dtype or "", 0))])
        for k in te.children(e):
            if isinstance(k, (Const, Var)) or (isinstance(e, Load)):
                continue
            self.edges.append((self.expr(k), n))
        return n

    def stmt(self, s: Stmt, parent: int | None) -> None:
        if isinstance(s, For):
            ext = extent(s.extent)
            n = self.node(f"loop_{s.kind}", [math.log2(ext + 1), float(len(self.loops)), 0, 0, 0, 0,
                                            float(not isinstance(s.extent, Const))])
            if parent is not None:
                self.edges.append((parent, n))
            self.loops.append((s.var, ext))
            self.stmt(s.body, n)
            self.loops.pop()
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, parent)
        elif isinstance(s, If):
            n = self.node("if", [0, float(len(self.loops))])
            if parent is not None:
                self.edges.append((parent, n))
            self.stmt(s.then, n)
        elif isinstance(s, Store):
            n = self.node("store", self.access(s.buffer, s.indices))
            if parent is not None:
                self.edges.append((parent, n))
            self.edges.append((self.expr(s.value), n))
            self.edges.append((n, self.buffer(s.buffer)))


def nest_graph(nest: LoopNest) -> ProgramGraph:
    """The program graph of a lowered loop nest, with its feature vector as config_feat."""
    scopes: dict[int, str] = {}
    fns = [f for f in (nest.prologue, nest.main) if f is not None]
    for fn in fns:
        for lb in fn.locals:
            scopes[id(lb.tensor)] = lb.scope
    b = _Builder(scopes)
    for fn in fns:
        root = b.node("loop_serial", [0.0])  # the function body
        b.stmt(fn.body, root)
    edges = np.asarray(b.edges, np.int64).reshape(-1, 2)
    return ProgramGraph(np.asarray(b.ops, np.int64), np.asarray(b.feats, np.float32), edges, extract(nest))
