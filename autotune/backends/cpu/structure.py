"""Program-structure features of a lowered loop nest: what the auto-scheduler's sketches build
(packed operand panels, a local accumulator tile and the epilogue fused onto it, reductions kept
as vector partial sums) described from the statements alone, so a cost model sees them on any
definition, template or not.

The columns (`STRUCTURE_NAMES`), each for the loop nest as a whole around the hot statement:
  pack_bytes    log2 bytes written by copies into local buffers (operand packing)
  pack_ratio    those copies' trip count over the hot statement's
  stages        distinct buffers stored (materialised stages)
  accumulates   the hot statement reads the element it writes (a reduction)
  horizontal    ... with the innermost loop vectorised along which that element does not move
                (one vector reduced into a scalar: needs reassociation)
  partials      ... into a local buffer that another statement reads (a register/stack
                accumulator tile, or rfactor's vector partial sums, consumed afterwards)
  epilogue      log2 flops of the statements that read the hot buffer, directly or through the
                buffers they fill (the fused consumers: bias, relu, the horizontal sum, a scale)
  fused         those consumers run inside the hot statement's outermost loop (fused at a tile)
                rather than in a loop nest of their own

Example::

    >>> from autotune.ir import expr as te
    >>> from autotune.ir.stmt import For, Store
    >>> from autotune.backends.cpu.loops import stores
    >>> x = te.placeholder((8,), name="x"); s = te.placeholder((1,), name="s")
    >>> i = te.Var("i", "int64")
    >>> body = For(i, te.Const(8, "int64"), "vectorize",
    ...            Store(s, (te.Const(0, "int64"),), te.Load(s, (te.Const(0, "int64"),)) + te.Load(x, (i,))))
    >>> feats = structure_features(stores(body), 0, {})
    >>> dict(zip(STRUCTURE_NAMES, feats))["horizontal"]
    1.0
"""
from __future__ import annotations

import math
from typing import Sequence

from autotune.backends.cpu.loops import Loop, flops, stride
from autotune.dtypes import ITEMSIZE
from autotune.ir import expr as te
from autotune.ir.stmt import Store

STRUCTURE_NAMES = ("pack_bytes", "pack_ratio", "stages", "accumulates", "horizontal", "partials",
                   "epilogue", "fused")


def _trip(loops: Sequence[Loop]) -> int:
    return math.prod(lp.extent for lp in loops)


def _is_copy(st: Store, scopes: dict[int, str]) -> bool:
    """A store into a local buffer of elements of arguments with no arithmetic (a padded copy
    selects between a load and zero): packing."""
    lds = te.loads(st.value)
    return (id(st.buffer) in scopes and bool(lds) and all(id(ld.tensor) not in scopes for ld in lds)
            and flops(st.value) == 0)


def _consumers(stmts: Sequence[tuple[list[Loop], Store]], hot: int) -> list[tuple[list[Loop], Store]]:
    """The statements that read the hot statement's buffer, directly or through buffers they fill."""
    bufs, out, chosen = {id(stmts[hot][1].buffer)}, [], {hot}
    grew = True
    while grew:
        grew = False
        for i, (lp, s) in enumerate(stmts):
            if i not in chosen and any(id(ld.tensor) in bufs for ld in te.loads(s.value)):
                chosen.add(i)
                out.append((lp, s))
                bufs.add(id(s.buffer))
                grew = True
    return out


def structure_features(stmts: Sequence[tuple[list[Loop], Store]], hot: int, scopes: dict[int, str]) -> list[float]:
    """The STRUCTURE_NAMES columns for the statements (loops, store) with `hot` the index of the
    hot one and `scopes` the local buffers' scopes by id (global buffers absent)."""
    loops, st = stmts[hot]
    hot_trip = max(_trip(loops), 1)
    copies = [(lp, s) for lp, s in stmts if _is_copy(s, scopes)]
    pack_bytes = sum(_trip(lp) * ITEMSIZE[s.buffer.dtype] for lp, s in copies)
    pack_trip = sum(_trip(lp) for lp, _ in copies)
    stages = len({id(s.buffer) for _, s in stmts})
    accumulates = any(ld.tensor is st.buffer and tuple(map(repr, ld.indices)) == tuple(map(repr, st.indices))
                      for ld in te.loads(st.value))
    inner = loops[-1] if loops else None
    horizontal = (accumulates and inner is not None and inner.kind == "vectorize"
                  and stride(st.buffer, st.indices, inner.var) == 0)
    consumers = [(lp, s) for lp, s in _consumers(stmts, hot) if s.buffer is not st.buffer]
    partials = accumulates and id(st.buffer) in scopes and bool(consumers)
    epi_flops = sum(_trip(lp) * flops(s.value) for lp, s in consumers)
    outer = loops[0].var if loops else None
    fused = bool(consumers) and outer is not None and all(any(x.var is outer for x in lp) for lp, _ in consumers)
    return [math.log2(pack_bytes + 1.0), pack_trip / hot_trip, float(stages), float(accumulates),
            float(horizontal), float(partials), math.log2(epi_flops + 1.0), float(fused)]
