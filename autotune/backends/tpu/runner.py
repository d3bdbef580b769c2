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

from autotune.backends.tpu.emulator import PRESETS, TileError, TpuCoreConfig, emulate
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, OnResult, config_error, report_all
from autotune.backends.tpu.templates import tiled_kernel


class TpuRunner:
    @classmethod
    def from_options(cls, *, options: object = None, address: str | None = None) -> TpuRunner:
        """The runners' factory (autotune.tuning.RUNNERS): the emulated v4 core; options, address: unused."""
        return cls()

    def __init__(self, core: TpuCoreConfig | str = "v4") -> None:
        self.core = PRESETS[core] if isinstance(core, str) else core
        self.calls = 0

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        return report_all(self._emulate(inputs), on_result)

    def _emulate(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            self.calls += 1
            backend = inp.task.template.backend
            if backend != "tpu_emulator":
                out.append(MeasureResult(None, ErrorKind.COMPILE_ERROR,
                                         f"{inp.task.op} is a {backend} template, not a TPU kernel template"))
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
