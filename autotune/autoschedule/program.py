"""The definition a sketch schedules: its output, its stages and who reads each tensor."""
from __future__ import annotations

from typing import Callable, TypeVar

from autotune.ir import expr as te
from autotune.ir.expr import Tensor
from autotune.schedule import Schedule

from .analysis import is_identity_read

M = TypeVar("M")


class Program:
    """A compute definition as the sketch rules see it: the output, the other stages (computed
    tensors), the readers of every tensor, the output's spatial and reduction axes, its dtype, and
    the number of threads it is scheduled for."""

    def __init__(self, output: Tensor, threads: int = 1) -> None:
        self.output = output
        self.threads = threads
        base = Schedule(output)  # validates names
        self.tensors = {t.name: t for t in te.input_tensors(output)}
        self.stages = [n for n in base.stages if n != output.name]
        self.readers: dict[str, list[str]] = {n: [] for n in self.tensors}
        for t in self.tensors.values():
            for ld in te.loads(t.body) if t.body is not None else []:
                if t.name not in self.readers[ld.tensor.name]:
                    self.readers[ld.tensor.name].append(t.name)
        self.spatial = [(a.name, a.extent) for a in output.axes]
        self.reduce = [(a.name, a.extent) for a in output.reduce_axes]
        self.dtype = output.dtype

    def with_epilogue(self, match: Callable[[Tensor], M | None]) -> tuple[M | None, bool]:
        """The stage `match` recognises (a GEMM, a convolution), and whether the output is an
        elementwise epilogue of it: the output itself, or the one such stage, read only by the
        output and at the output's own indices, when every other stage is elementwise over inputs."""
        out = self.output
        m = match(out)
        if m is not None:
            return m, False
        if out.reduce_axes or out.body is None:
            return None, False
        computes = [t for t in self.tensors.values() if not t.is_placeholder and t is not out]
        found = [(t, r) for t, r in ((t, match(t)) for t in computes) if r is not None]
        if len(found) != 1:
            return None, False
        t, m = found[0]
        others = [c for c in computes if c is not t]
        if (self.readers[t.name] != [out.name] or not is_identity_read(out, t)
                or any(c.reduce_axes or any(not ld.tensor.is_placeholder for ld in te.loads(c.body))  # type: ignore[arg-type]
                       for c in others)):
            return None, False
        return m, True
