"""A template whose measurement can be held mid-batch, and that says which configs the timing
worker measured: for tests that kill a tuner while a batch is in flight.

Every config of `held` builds its own real kernel (a split of the loop by k + 1). Each time a
measurement worker checks a config before timing it (measure.worker's _checked, called by its
`measure` or its `retime`), the template's schedule appends a JSON line {"N", "k", "pid", "ppid",
"by"} to the file named by AUTOTUNE_TEST_HELD_MARKS (ppid: the process whose runner started the
worker). The timing worker measures one config at a time, so a mark of its says the measurement
of every config it marked before has completed. The config whose k is the shape's `hold` dim
(default 99: none) is held there until the file named by AUTOTUNE_TEST_HELD_RELEASE exists (at
most HOLD_S seconds): the batch stays in flight, asleep. The presets are k = 0, 1, ..., 7: a
tuner measures them first, in that order.

Importing this module registers the template (measurement workers import it too, through
templates.USER_MODULES). Both variables start with AUTOTUNE_, so Ray workers get them too.
"""
from __future__ import annotations

import json
import os
import sys
import time

from autotune.ir import te
from autotune.space import ChoiceKnob, ConfigSpace
from autotune.templates import register
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Template

MARKS_ENV = "AUTOTUNE_TEST_HELD_MARKS"
RELEASE_ENV = "AUTOTUNE_TEST_HELD_RELEASE"
HOLD_S = 120.0
KS = list(range(16))


def define(shape: dict, dtype: str) -> te.Tensor:
    A = te.placeholder((shape["N"],), dtype, name="A")
    return te.compute((shape["N"],), lambda i: A[i] * 2.0, name="out")


def space(shape: dict, dtype: str, threads: int) -> ConfigSpace:
    return ConfigSpace([ChoiceKnob("k", KS)])


def _checking() -> str | None:
    """"measure" or "retime" when a measurement worker is checking a config now, else None."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "_checked" and f.f_code.co_filename.endswith(os.path.join("measure", "worker.py")):
            return f.f_back.f_code.co_name if f.f_back is not None else "?"
        f = f.f_back
    return None


def schedule(s, cfg, shape, threads) -> CodegenOptions:  # type: ignore[no-untyped-def]
    by = _checking()
    marks = os.environ.get(MARKS_ENV)
    if by is not None and marks:
        with open(marks, "a") as f:
            f.write(json.dumps({"N": shape["N"], "k": cfg["k"], "pid": os.getpid(), "ppid": os.getppid(),
                                "by": by}) + "\n")
        release = os.environ.get(RELEASE_ENV)
        if by == "measure" and cfg["k"] == shape["hold"] and release:
            deadline = time.monotonic() + HOLD_S
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)
    if cfg["k"] > 0:
        s.split("out", "i", cfg["k"] + 1)
    return CodegenOptions()


HELD = register(Template(
    name="held", description="a template whose measurement a test can hold mid-batch", dims=("N",), define=define,
    space=space, schedule=schedule, reference=lambda A, hold=99: A * 2.0, flops=lambda s: float(s["N"]),
    default_shape="64", extra_dims={"hold": 99}, presets=lambda shape, dtype, threads: [{"k": k} for k in range(8)]),
    module=__name__)
