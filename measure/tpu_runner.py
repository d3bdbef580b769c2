"""TpuRunner: the Runner interface over the TPU emulator. Tiles that do not fit are compile errors.

Example::

    >>> from autotune.task import Task
    >>> from autotune.runner import MeasureInput
    >>> t = Task.create("tpu_matmul", "1024x1024x1024", threads=1)
    >>> r = TpuRunner().run([MeasureInput(t, t.space().validate({"bm": 256, "bn": 512, "bk": 512}))])
    >>> r[0].ok
    True
"""
from __future__ import annotations

from typing import Sequence

from autotune.runner import ErrorKind, MeasureInput, MeasureResult, config_error
from measure.tpu_emulator import PRESETS, TileError, TpuCoreConfig, emulate


class TpuRunner:
    def __init__(self, core: TpuCoreConfig | str = "v4") -> None:
        self.core = PRESETS[core] if isinstance(core, str) else core
        self.calls = 0

    def run(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        from templates.tpu import is_tpu, tiled_kernel
        out = []
        for inp in inputs:
            self.calls += 1
            if not is_tpu(inp.task.op):
                out.append(MeasureResult(None, ErrorKind.COMPILE_ERROR, f"{inp.task.op} is not a TPU kernel template"))
                continue
            bad = config_error(inp)
            if bad is not None:
                out.append(bad)
                continue
            try:
                t = emulate(tiled_kernel(inp.task, inp.config), self.core)
            except TileError as e:
                out.append(MeasureResult(None, ErrorKind.COMPILE_ERROR, str(e), 0.0))
                continue
            out.append(MeasureResult((t.seconds,), None, "", 0.0))
        return out

    def close(self) -> None:
        pass
