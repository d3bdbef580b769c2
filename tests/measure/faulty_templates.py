"""Templates whose kernels misbehave on purpose: segfault, hang, wrong answer, compile error.

The behaviour is the `mode` dimension of the shape (a different compute definition per mode),
so every config of every mode is a real generated Numba kernel. `faulty_schedule` misbehaves
earlier: its schedule() itself segfaults (split SCHEDULE_SEGFAULT) or hangs (split SCHEDULE_HANG),
before any kernel exists; its other splits build working kernels. Importing this module
registers the templates (measurement workers import it too, through templates.USER_MODULES).
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

from autotune.ir import te
from autotune.ir.expr import Call
from autotune.space import ChoiceKnob, ConfigSpace
from autotune.templates import register
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Template

OK, SEGFAULT, HANG, WRONG, COMPILE_ERROR = range(5)


def define(shape: dict, dtype: str) -> te.Tensor:
    n, mode = shape["N"], shape["mode"]
    A = te.placeholder((n,), dtype, name="A")
    if mode == SEGFAULT:  # reads terabytes past the end of A
        return te.compute((n,), lambda i: A[i + (1 << 40)] * 2.0, name="out")
    if mode == HANG:  # a reduction of 2**50 steps: runs "forever"
        k = te.reduce_axis(1 << 50, name="k")
        return te.compute((n,), lambda i: te.sum(A[i] * 1.0, axis=k), name="out")
    if mode == WRONG:
        return te.compute((n,), lambda i: A[i] * 3.0, name="out")
    if mode == COMPILE_ERROR:  # a function Numba does not know
        return te.compute((n,), lambda i: Call("no_such_function", (A[i],)), name="out")
    return te.compute((n,), lambda i: A[i] * 2.0, name="out")


def space(shape: dict, dtype: str, threads: int) -> ConfigSpace:
    return ConfigSpace([ChoiceKnob("split", [1, 4])])


def schedule(s, cfg, shape, threads) -> CodegenOptions:  # type: ignore[no-untyped-def]
    if cfg["split"] > 1 and shape["mode"] != HANG:
        s.split("out", "i", cfg["split"])
    return CodegenOptions()


FAULTY = register(Template(
    name="faulty", description="misbehaving kernels for tests", dims=("N",), define=define, space=space,
    schedule=schedule, reference=lambda A, mode=0: A * 2.0, flops=lambda s: float(s["N"]), default_shape="16",
    extra_dims={"mode": 0}), module=__name__)


SCHEDULE_SEGFAULT, SCHEDULE_HANG = 2, 4  # the splits whose schedule() crashes, hangs
SCHEDULED: list[int] = []  # the splits faulty_schedule() was called with in this process


def faulty_schedule(s, cfg, shape, threads) -> CodegenOptions:  # type: ignore[no-untyped-def]
    """Reads address 0 (SIGSEGV) for split SCHEDULE_SEGFAULT, sleeps for an hour for split
    SCHEDULE_HANG, splits the loop for the others."""
    SCHEDULED.append(cfg["split"])
    if cfg["split"] == SCHEDULE_SEGFAULT:
        ctypes.string_at(0)
    if cfg["split"] == SCHEDULE_HANG:
        time.sleep(3600)
    if cfg["split"] > 1:
        s.split("out", "i", cfg["split"])
    return CodegenOptions()


FAULTY_SCHEDULE = register(Template(
    name="faulty_schedule", description="schedules that crash or hang, for tests", dims=("N",),
    define=lambda shape, dtype: define({**shape, "mode": OK}, dtype),
    space=lambda shape, dtype, threads: ConfigSpace([ChoiceKnob("split", [1, SCHEDULE_SEGFAULT, SCHEDULE_HANG, 8])]),
    schedule=faulty_schedule, reference=lambda A: A * 2.0, flops=lambda s: float(s["N"]), default_shape="16"),
    module=__name__)
