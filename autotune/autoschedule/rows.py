"""The rows sketch: programs whose reductions run along the contiguous axis (row sum, softmax,
layernorm). The output's rows are split into blocks ([rows], the block loop over threads); every
producer with one consumer is computed at a loop of it ([attach]: per block or per row), and so
is one read only by the output and by stages computed at its block (softmax's exp), so the rows
stay in cache; reductions along a contiguous axis are vectorised rfactor style (LLVM, allowed to
reassociate, keeps vector partial sums and reduces them horizontally once); stages whose last
axis is contiguous run their reductions outside it and vectorise it."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from autotune.codegen.stream import streamable_row, worth_streaming
from autotune.dtypes import ITEMSIZE
from autotune.ir import expr as te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, Knob
from autotune.target import current
from autotune.codegen.options import CodegenOptions

from .analysis import reduces_along_rows
from .program import Program
from .sketch import Sketch


def row_like(p: Program) -> bool:
    """Whether some reduction of the program runs along a contiguous axis."""
    reds = [t for t in p.tensors.values() if t.reduce_axes]
    along = [reduces_along_rows(t) for t in reds]
    return any(along) and bool(p.spatial) and not (p.output.reduce_axes and not along[-1])


class RowsSketch(Sketch):
    """Blocks of rows, producers computed at the output's block or row loop, in blocks of 8 rows
    by default."""

    name = "rows"
    nearest = {"rows": 8}
    added = {"stream": False, "prefetch": 0}

    def knobs(self) -> list[Knob]:
        ext = self.p.spatial[0][1] if self.p.spatial else 1
        rows = sorted({r for r in (1, 2, 4, 8, 16, 32) if r <= ext} | {min(ext, 32)})
        knobs: list[Knob] = [ChoiceKnob("rows", rows)]
        if self._attached_stages():
            knobs.append(ChoiceKnob("attach", ["block", "row"]))
        if self.p.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        if self._streamable():
            knobs.append(ChoiceKnob("stream", [False, True]))
        if self._attached_stages() and ext > 1 and self._row_input() is not None:
            knobs.append(ChoiceKnob("prefetch", [0, 2, 4]))  # rows ahead (steps.Prefetch), with attach "row"
        return knobs

    def prune_rule(self) -> Callable[[Mapping[str, Any]], str | None] | None:
        """With attach "block" a block's stages read its rows before the row loop: no prefetch there."""
        def rule(cfg: Mapping[str, Any]) -> str | None:
            if cfg.get("prefetch") and cfg.get("attach") == "block":
                return "prefetch with attach 'block': the row loop has no later pass to overlap"
            return None
        return rule

    def _inside_row_loop(self) -> list[str]:
        """The output and the stages computed inside its row loop under attach "row" (as `apply`
        places them), the output first."""
        out = self.p.output.name
        inside = [out]
        for n in reversed(self.p.stages):  # consumers before producers, as apply
            if self._inline(n):
                continue
            readers = self.p.readers[n]
            if (len(readers) == 1 and readers[0] in inside) or (out in readers and set(readers) - {out} <= set(inside)):
                inside.append(n)
        return inside

    def _row_input(self) -> str | None:
        """The input of 2 or more dimensions the row loop reads first (through inlined stages too),
        which `prefetch` fetches rows ahead; None when it reads none."""
        def reads(name: str) -> list[str]:
            t = self.p.tensors[name]
            out: list[str] = []
            for ld in te.loads(t.body) if t.body is not None else []:
                src = ld.tensor.name
                if ld.tensor.is_placeholder:
                    out.append(src)
                elif self._inline(src):
                    out += reads(src)
            return out
        for name in self._inside_row_loop():
            for src in reads(name):
                if self.p.tensors[src].ndim >= 2:
                    return src
        return None

    def _streamable(self) -> bool:
        """Whether the output's rows can be written with streaming stores (schedule step `stream`):
        an output without reductions, whose rows (its vectorized last axis) are a cache line or
        more and fit the stream's local buffer."""
        out = self.p.output
        return not out.reduce_axes and len(out.shape) >= 2 and streamable_row(out.shape[-1] * ITEMSIZE[out.dtype])

    def default_value(self, k: Knob) -> Any:
        """Streaming stores where `worth_streaming` says so for the target's L3; the rest as `Sketch`."""
        if k.name == "stream":
            out = self.p.output
            return worth_streaming(math.prod(out.shape) * ITEMSIZE[out.dtype], current().l3)
        return super().default_value(k)

    def _attached_stages(self) -> list[str]:
        """Stages (not inlined) with one reader: each is computed at a loop of it."""
        return [n for n in self.p.stages if len(self.p.readers[n]) == 1 and not self._inline(n)]

    def _inline(self, name: str) -> bool:
        """Row programs inline an elementwise stage read at full size whose inputs are all inlined
        or inputs; a stage read broadcast (per row) is computed once per row instead."""
        t = self.p.tensors[name]
        if t.reduce_axes:
            return False
        for r in self.p.readers[name]:
            rt = self.p.tensors[r]
            if len(t.shape) < len(rt.shape):
                return False
        return all(ld.tensor.is_placeholder or self._inline(ld.tensor.name) for ld in te.loads(t.body))  # type: ignore[arg-type]

    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        out = self.p.output.name
        for n in self.p.stages:
            if self._inline(n):
                s.compute_inline(n)
        s0 = self.p.spatial[0][0]
        rows = min(cfg["rows"], self.p.spatial[0][1])
        so, si = s.split(out, s0, rows, f"{s0}_o", f"{s0}_i")
        at = so if cfg.get("attach", "block") == "block" else si
        at_out: set[str] = set()  # stages computed at the output's block (or row) loop
        for n in reversed(self.p.stages):  # consumers before producers
            if self._inline(n):
                continue
            readers = self.p.readers[n]
            if len(readers) == 1 or (out in readers and set(readers) - {out} <= at_out):
                r = readers[0] if len(readers) == 1 else out
                s.compute_at(n, r, at if r == out else self.p.tensors[r].axes[0].name)
                if r == out:
                    at_out.add(n)
            self._stage_loops(s, n)
        self._stage_loops(s, out)
        if self.p.output.reduce_axes and len(s.stages[out].order) > len(self.p.output.reduce_axes) + 1:
            s.cache_write(out, si if len(self.p.spatial) == 1 else s.stages[out].order[-len(self.p.reduce) - 1])
        if self.workers(cfg) > 1:
            s.parallel(out, so)
        if cfg.get("stream"):
            s.stream(out)
        row_input = self._row_input() if cfg.get("prefetch") else None
        if row_input is not None:
            s.prefetch(out, si if rows > 1 else so, row_input, cfg["prefetch"])
        return CodegenOptions(reassoc=True)

    def _stage_loops(self, s: Schedule, name: str) -> None:
        """Within one stage of a row program: a stage whose last spatial axis is contiguous runs its
        reductions outside it and vectorizes it; one reducing along a contiguous axis keeps the
        reduction innermost (vectorized by reassociation)."""
        t = self.p.tensors[name]
        if not t.axes:
            return
        last = t.axes[-1].name
        red = [a.name for a in t.reduce_axes]
        if red and reduces_along_rows(t):
            return
        st = s.stages[name]
        if last not in st.order:
            return
        if red:
            order = [x for x in st.order if x != last] + [last]
            s.reorder(name, *order)
        elif st.order[-1] != last:
            return
        s.vectorize(name, last)
