"""The CPU roofline estimate: what it rewards on each ISA, and what it knows of its task.

What keeps the FMA units busy depends on the SIMD width and the register file, so the ISA-bound
tests run once per ISA description (both on any machine), each with a register tile that is good
for that ISA; the model built for the detected target is checked against its description.
"""
from __future__ import annotations

import pytest

from autotune.cost_model import ModelError, make_model
from autotune.backends.cpu.features import extract
from autotune.backends.cpu.roofline import RooflineModel
from autotune.schedule import Schedule
from autotune.schedule.lower import lower
from autotune.target import Target, current, isa
from autotune.task import Task
from autotune.templates import matmul

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

TASK = Task.create("matmul", "256x256x256", threads=2)
BASE = {"kc": 256, "mc_panels": 16, "jc_blocks": 1, "order": "jr_ir", "pack_a": True, "parallel": True}
# float32 lanes, vector registers, and register tiles (mr x nr) of each ISA: one that hides the FMA
# latency (at least 4 cycles x 2 ports = 8 accumulator vectors) within the registers, one that spills
ISAS = {
    "avx512f": {"lanes": 16, "registers": 32, "good": {"mr": 6, "nr": 48},   # 18 accumulators of 32 registers
                "spills": {"mr": 12, "nr": 64}},                              # 48 accumulators
    "avx2": {"lanes": 8, "registers": 16, "good": {"mr": 4, "nr": 16},       # 8 accumulators of 16 registers
             "spills": {"mr": 6, "nr": 48}},                                  # 36 accumulators
}


def score(model: RooflineModel, tile: dict, **knobs: object) -> float:
    # scheduled by the template itself: this machine's space prunes the other ISA's spilling tiles
    s = Schedule(matmul.define(TASK.shape_dict, TASK.dtype))
    matmul.schedule(s, {**BASE, **tile, **knobs}, TASK.shape_dict, TASK.threads)
    return float(model.predict(extract(lower(s))[None])[0])


@pytest.mark.parametrize("name", sorted(ISAS))
def test_it_rewards_what_keeps_the_fma_units_busy(name: str) -> None:
    d = ISAS[name]
    model = RooflineModel.for_target(Target.named(name), threads=TASK.threads)
    assert (model.lanes, model.registers) == (d["lanes"], d["registers"])
    good = score(model, d["good"])
    assert score(model, {"mr": 2, "nr": 16}) < good   # 2 (AVX-512) or 4 (AVX2) accumulator vectors: latency shows
    assert score(model, d["spills"]) < good           # more accumulator vectors than registers
    assert score(model, d["good"], parallel=False) < good  # one of the two threads idle
    assert score(model, d["good"]) == good            # a pure function of the features


def test_the_model_of_a_task_is_the_target_in_forces(pin_target) -> None:  # type: ignore[no-untyped-def]
    m = RooflineModel.for_task(TASK)
    assert (m.lanes, m.registers) == (current().lanes("float32"), current().registers)  # any target
    if isa() in ISAS:  # and, on an ISA described above, that description
        assert (m.lanes, m.registers) == (ISAS[isa()]["lanes"], ISAS[isa()]["registers"])
    pin_target("avx2")
    m = RooflineModel.for_task(TASK)
    assert (m.lanes, m.registers) == (ISAS["avx2"]["lanes"], ISAS["avx2"]["registers"])


def test_it_knows_the_dtype_and_threads_of_its_task() -> None:
    m32 = RooflineModel.for_task(TASK)
    m64 = RooflineModel.for_task(Task.create("matmul", "256x256x256", "float64", threads=1))
    assert m32.lanes == 2 * m64.lanes and (m32.threads, m64.threads) == (2, 1)
    assert isinstance(make_model("roofline", task=TASK), RooflineModel)
    assert make_model("roofline", task=TASK).threads == 2
    with pytest.raises(ModelError, match="threads"):
        RooflineModel(threads=0)


def test_its_defaults_are_the_target_in_forces() -> None:
    m, here = RooflineModel(), current()
    assert (m.lanes, m.registers, m.fma_ports, m.fma_latency) == \
        (here.lanes("float32"), here.registers, here.fma_units, here.fma_latency)
