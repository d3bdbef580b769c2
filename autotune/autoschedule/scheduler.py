"""The auto-scheduler: picks a program's sketch by the rules and applies its configs."""
from __future__ import annotations

from typing import Any

from autotune.ir.expr import Tensor
from autotune.schedule import Schedule
from autotune.space import Config
from autotune.codegen.options import CodegenOptions

from .analysis import Gemm, Window, match_gemm, match_window
from .gemm import GemmSketch
from .program import Program
from .rows import RowsSketch, row_like
from .sketch import Sketch
from .tiled import TiledSketch
from .window import WindowSketch


class AutoScheduler:
    """Derives a ConfigSpace for a compute definition and applies a Config of it to a Schedule:
    a GEMM (with or without an elementwise epilogue) gets the gemm sketch, else a direct
    convolution the window sketch, else a program reducing along rows the rows sketch, else the
    tiled sketch."""

    def __init__(self, output: Tensor, threads: int = 1) -> None:
        self.output = output
        self.threads = threads
        self.program = p = Program(output, threads)
        self.gemm: Gemm | None
        self.window: Window | None = None
        self.gemm, self.epilogue = p.with_epilogue(match_gemm)
        if self.gemm is None:
            self.window, self.epilogue = p.with_epilogue(match_window)
        self.impl: Sketch
        if self.gemm is not None:
            self.impl = GemmSketch(p, self.gemm, self.epilogue)
        elif self.window is not None:
            self.impl = WindowSketch(p, self.window, self.epilogue)
        elif row_like(p):
            self.impl = RowsSketch(p)
        else:
            self.impl = TiledSketch(p)
        self.sketch = self.impl.name
        self.space = self.impl.space

    def presets(self) -> list[dict[str, Any]]:
        """Known-good points of the space, best guess first: for GEMM the largest register tiles
        with k blocks of 256 and 512; otherwise one sensible config."""
        return self.impl.presets()

    def default_config(self) -> dict[str, Any]:
        """A sensible schedule: for GEMM the largest register tile, k blocks of 256, row blocks of
        16 panels, column panels outer, A packed, parallel; row programs in blocks of 8 rows;
        otherwise tiles of 8 x 16, 8 x 4 and 8 x 1 (the last axis, the one before it, the others:
        an unrolled body of at most 4 vector loops; 32 with inlined padding took LLVM 90 s),
        cache, vectorize, producers inlined."""
        return self.impl.default_config()

    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """Apply the primitives a config chooses; returns the code generator's options."""
        return self.impl.apply(s, cfg)

    def register_tiles(self) -> list[str]:
        """The gemm sketch's register tiles (`GemmSketch.register_tiles`)."""
        assert isinstance(self.impl, GemmSketch)
        return self.impl.register_tiles()

    def window_layouts(self) -> list[str]:
        """The window sketch's input layouts (`WindowSketch.window_layouts`)."""
        assert isinstance(self.impl, WindowSketch)
        return self.impl.window_layouts()


def auto_schedule(output: Tensor, cfg: Config, threads: int = 1) -> Schedule:
    """The schedule a config of the derived space gives."""
    auto = AutoScheduler(output, threads)
    s = Schedule(output)
    auto.apply(s, auto.space.validate(cfg))
    return s
