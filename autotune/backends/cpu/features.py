"""Features of a lowered loop nest, for cost models that transfer across shapes and operators.

Schema version 3: a fixed-length float32 vector. The statement executed most often (the hot
statement, by trip count) is described in detail; totals cover every statement.

Hot statement:
  trip      log2 trip count; flops per execution; log2 total flops
  loop[l]   for the 6 innermost enclosing loops (l=0 innermost): log2 extent and a one-hot of
            the kind (serial, unroll, vectorize, parallel)
  buf[b]    for up to 4 buffers (the stored one first, then reads by bytes touched): at 6 loop
            levels (inside loop 0, 1, 2, 3, 5, and all), log2 bytes touched and log2 reuse
            (iterations / distinct elements); the innermost stride class (0, 1, other); the
            scope (global, stack, heap)
  ai[l]     arithmetic intensity (flops / bytes touched) at the same 6 levels
  cache     the first of those levels whose footprint exceeds 32 KiB, 1 MiB, 32 MiB (L1, L2, L3)
  misc      log2 accumulator tile elements, log2 product of unrolled extents, innermost
            vectorized extent, log2 parallel extent, log2 work per thread
Totals: number of statements, log2 total trip count, log2 bytes of local buffers.
Streaming (schema 3): log2 bytes of the outputs written with non-temporal stores (step `stream`).
Structure (schema 2), the last columns: packing, materialised stages, reductions as partial sums,
  fused epilogues (autotune/backends/cpu/structure.py, STRUCTURE_NAMES).
"""
from __future__ import annotations

import math
import numpy as np

from autotune.dtypes import ITEMSIZE
from autotune.ir import expr as te
from autotune.backends.cpu.loops import Loop, flops, stores, stride, touched
from autotune.backends.cpu.structure import STRUCTURE_NAMES, structure_features
from autotune.ir.expr import Expr, Tensor
from autotune.ir.stmt import Function, LoopNest, Store

FEATURE_VERSION = 3
LEVELS = (0, 1, 2, 3, 5, 99)
N_LOOPS = 6
N_BUFS = 4
KINDS = ("serial", "unroll", "vectorize", "parallel")


def _log2(x: float) -> float:
    return math.log2(x + 1.0)


def _functions(nest: LoopNest) -> list[Function]:
    return [f for f in (nest.prologue, nest.main) if f is not None]


def extract(nest: LoopNest) -> np.ndarray:
    """The feature vector (schema FEATURE_VERSION) of a lowered loop nest."""
    stmts: list[tuple[list[Loop], Store]] = []
    scopes: dict[int, str] = {}
    local_bytes = 0
    for fn in _functions(nest):
        stmts += stores(fn.body)
        for lb in fn.locals:
            scopes[id(lb.tensor)] = lb.scope
            local_bytes += math.prod(lb.tensor.shape) * ITEMSIZE[lb.tensor.dtype]
    feats: list[float] = []
    trips = [math.prod(lp.extent for lp in loops) for loops, _ in stmts] or [1]
    hot = int(np.argmax(trips)) if stmts else -1
    if hot < 0:
        return np.zeros(feature_length(), np.float32)
    loops, st = stmts[hot]
    trip = trips[hot]
    fl = max(flops(st.value), 1)
    feats += [_log2(trip), float(fl), _log2(trip * fl)]
    inner_first = list(reversed(loops))
    for l in range(N_LOOPS):
        if l < len(inner_first):
            lp = inner_first[l]
            feats += [_log2(lp.extent)] + [float(lp.kind == k) for k in KINDS]
        else:
            feats += [0.0] * (1 + len(KINDS))
    accesses = [(st.buffer, st.indices)] + [(ld.tensor, ld.indices) for ld in te.loads(st.value)]
    uniq: dict[tuple, tuple[Tensor, tuple[Expr, ...]]] = {}
    for b, ix in accesses:
        uniq.setdefault((id(b), tuple(map(repr, ix))), (b, ix))
    accs = list(uniq.values())
    store, reads = accs[0], accs[1:]
    reads.sort(key=lambda bi: -touched(bi[0], bi[1], loops) * ITEMSIZE[bi[0].dtype])
    bufs = [store] + reads
    level_bytes = [0.0] * len(LEVELS)
    for b in range(N_BUFS):
        if b < len(bufs):
            buf, ix = bufs[b]
            item = ITEMSIZE[buf.dtype]
            for li, lev in enumerate(LEVELS):
                inner = inner_first[:lev + 1] if lev < 99 else inner_first
                elems = touched(buf, ix, inner)
                iters = math.prod(lp.extent for lp in inner) if inner else 1
                level_bytes[li] += elems * item
                feats += [_log2(elems * item), _log2(iters / max(elems, 1))]
            s = stride(buf, ix, inner_first[0].var if inner_first else None)
            feats += [float(s == 0), float(s == 1), float(s > 1)]
            scope = scopes.get(id(buf), "global")
            feats += [float(scope == "global"), float(scope == "stack"), float(scope == "heap")]
        else:
            feats += [0.0] * (2 * len(LEVELS) + 6)
    for li, lev in enumerate(LEVELS):
        inner = inner_first[:lev + 1] if lev < 99 else inner_first
        iters = math.prod(lp.extent for lp in inner) if inner else 1
        feats.append(math.log2(1 + fl * iters / max(level_bytes[li], 1.0)))
    for cap in (32 << 10, 1 << 20, 32 << 20):
        first = next((i for i, b in enumerate(level_bytes) if b > cap), len(LEVELS))
        feats.append(first / len(LEVELS))
    acc = math.prod(st.buffer.shape) if scopes.get(id(st.buffer)) == "stack" else 0
    unrolled = math.prod(lp.extent for lp in loops if lp.kind == "unroll")
    vec = inner_first[0].extent if inner_first and inner_first[0].kind == "vectorize" else 0
    par = next((lp.extent for lp in loops if lp.kind == "parallel"), 1)
    feats += [_log2(acc), _log2(unrolled), float(vec), _log2(par), _log2(trip / par)]
    feats += [float(len(stmts)), _log2(sum(trips)), _log2(local_bytes)]
    feats.append(_log2(sum(math.prod(t.shape) * ITEMSIZE[t.dtype] for fn in _functions(nest) for t in fn.streamed)))
    feats += structure_features(stmts, hot, scopes)
    return np.asarray(feats, np.float32)


def feature_length() -> int:
    return 3 + N_LOOPS * (1 + len(KINDS)) + N_BUFS * (2 * len(LEVELS) + 6) + len(LEVELS) + 3 + 5 + 3 + 1 + len(STRUCTURE_NAMES)
