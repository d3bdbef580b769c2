"""Structure features: packing, local accumulators consumed by a fused epilogue, horizontal
reductions, read off the lowered loop nest of real template schedules."""
from __future__ import annotations

import numpy as np
import pytest


from autotune.backends.cpu.features import extract, feature_length
from autotune.backends.cpu.loops import stores
from autotune.backends.cpu.structure import STRUCTURE_NAMES, structure_features
from autotune.ir import expr as te
from autotune.ir.stmt import For, Seq, Store
from autotune.schedule import Schedule
from autotune.schedule.lower import lower
from autotune.task import Task
from autotune.templates import dense_bias_relu, matmul

SHAPE = "64x64x64"
BASE = {"kc": 64, "mc_panels": 1, "jc_blocks": 1, "order": "jr_ir", "parallel": True, "mr": 4, "nr": 16}


def structure(module, op: str, **knobs: object) -> dict[str, float]:  # type: ignore[no-untyped-def]
    task = Task.create(op, SHAPE, threads=2)
    s = Schedule(module.define(task.shape_dict, task.dtype))
    module.schedule(s, {**dict(task.default_config()), **BASE, **knobs}, task.shape_dict, task.threads)
    f = extract(lower(s))
    assert f.shape == (feature_length(),)
    return dict(zip(STRUCTURE_NAMES, map(float, f[-len(STRUCTURE_NAMES):])))


def test_packing_a_adds_packed_bytes() -> None:
    packed, plain = structure(matmul, "matmul", pack_a=True), structure(matmul, "matmul", pack_a=False)
    assert packed["pack_bytes"] > plain["pack_bytes"] > 0  # B is packed into panels either way


def test_the_accumulator_tile_is_consumed_by_an_epilogue_fused_at_the_tile() -> None:
    mm = structure(matmul, "matmul", pack_a=True)
    assert mm["accumulates"] == mm["partials"] == mm["fused"] == 1.0 and mm["horizontal"] == 0.0
    fused = structure(dense_bias_relu, "dense_bias_relu", pack_a=True, fuse="tile")
    assert fused["fused"] == 1.0 and fused["epilogue"] > mm["epilogue"]  # bias + relu on the tile
    apart = structure(dense_bias_relu, "dense_bias_relu", pack_a=True, fuse="none")
    assert apart["fused"] == 0.0 and apart["epilogue"] > 0  # the same work, in a loop nest of its own


def _reduction(kind: str, local: bool) -> dict[str, float]:
    x, s, y = te.placeholder((64,), name="x"), te.placeholder((1,), name="s"), te.placeholder((1,), name="y")
    i, z = te.Var("i"), te.Const(0, "int64")
    acc = Store(s, (z,), te.Load(s, (z,)) + te.Load(x, (i,)))
    body = Seq((For(i, te.Const(64, "int64"), kind, acc), Store(y, (z,), te.Load(s, (z,)) * 2.0)))
    st = stores(body)
    return dict(zip(STRUCTURE_NAMES, structure_features(st, 0, {id(s): "stack"} if local else {})))


def test_a_vectorised_reduction_into_one_element_is_horizontal() -> None:
    assert _reduction("vectorize", local=True)["horizontal"] == 1.0
    assert _reduction("serial", local=True)["horizontal"] == 0.0
    assert _reduction("vectorize", local=True)["partials"] == 1.0
    assert _reduction("vectorize", local=False)["partials"] == 0.0  # a global accumulator is no tile
    assert _reduction("serial", local=True)["fused"] == 0.0  # the consumer runs after the loop


def test_the_bytes_a_kernel_streams_are_a_feature() -> None:
    """A cost model tells a streamed softmax from the same schedule with plain stores."""
    task = Task.create("softmax", "64x1024", threads=2)
    column = feature_length() - len(STRUCTURE_NAMES) - 1
    cfg = {**dict(task.default_config()), "stream": False}
    plain, streamed = (extract(lower(task.schedule({**cfg, "stream": st})[0]))[column] for st in (False, True))
    assert plain == 0.0 and streamed == pytest.approx(np.log2(1 + 64 * 1024 * 4))
