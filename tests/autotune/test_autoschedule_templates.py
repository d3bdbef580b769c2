"""Every CPU template of the library can be tuned from its definition alone: the auto-scheduler
derives a space from the template's `define` (at a small awkward shape), and its first preset and
a random config compile and match the template's reference; one is tuned end to end through the
public path for definitions (registered as data, then the real tuner)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from autotune.autoschedule import AutoScheduler
from autotune.codegen import build
from autotune.schedule import Schedule
from autotune.task import Task
from autotune.templates import TEMPLATES

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

SHAPES = {  # small, awkward: no vector or block divides them; padding and stride 2 where they apply
    "matmul": {"M": 13, "N": 21, "K": 9},
    "batch_matmul": {"B": 3, "M": 13, "N": 21, "K": 9},
    "dense_bias_relu": {"M": 13, "N": 21, "K": 9},
    "conv2d": {"N": 1, "C": 5, "H": 9, "W": 11, "K": 6, "R": 3, "S": 3, "pad": 1},
    "depthwise_conv2d": {"N": 2, "C": 5, "H": 9, "W": 11, "R": 3, "S": 3, "stride": 2, "pad": 1},
    "pool2d": {"N": 1, "C": 5, "H": 9, "W": 11, "R": 3, "S": 3, "stride": 2, "pad": 1},
    "softmax": {"M": 7, "N": 37},
    "layernorm": {"M": 7, "N": 37},
}
LIBRARY = sorted(n for n, t in TEMPLATES.items() if t.backend == "cpu" and t.define.__module__.startswith("autotune.templates."))


def test_every_cpu_template_of_the_library_has_a_shape_here() -> None:
    assert set(SHAPES) == set(LIBRARY)


@pytest.mark.parametrize("name", LIBRARY)
def test_a_template_tuned_from_its_definition_alone_is_correct(name: str) -> None:
    task = Task.create(name, SHAPES[name], "float32", 2)
    out = task.template.define(task.shape_dict, "float32")
    auto = AutoScheduler(out, threads=2)
    ins = task.inputs(seed=0)
    want = task.reference(ins)
    for cfg in (auto.space.validate(auto.presets()[0]), auto.space.sample(random.Random(0))):
        s = Schedule(out)
        opts = auto.apply(s, cfg)
        got = build(s, threads=2, reassoc=opts.reassoc)(*ins)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} ({auto.sketch}) at {dict(cfg)}")


def test_a_template_definition_registered_as_data_tunes_end_to_end(tmp_path: Path) -> None:
    """layernorm's definition as a template-free op (what `autotune.op` and the logs carry): the real
    tuner measures (and checks) 2 configs, and the best one matches the template's reference.
    (layernorm: its kernels compile in a second; pool2d's took the workers 40 s.)"""
    from autotune.definition import register_definition
    from autotune.ir import te
    from autotune.ir.serialize import to_data
    from autotune.tuning import tune
    tmpl = Task.create("layernorm", SHAPES["layernorm"], "float32", 2)
    out = tmpl.template.define(tmpl.shape_dict, "float32")
    phs = [t for t in te.input_tensors(out) if t.is_placeholder]
    op = register_definition("layernorm_from_definition", to_data(out, phs))
    task = Task.create(op, {f"{p.name}{d}": n for p in phs for d, n in enumerate(p.shape)}, "float32", 2)
    res = tune(op=task, trials=2, log=str(tmp_path / "log.jsonl"), progress=False)
    assert res.best_config is not None and res.errors == 0
    ins = tmpl.inputs(seed=3)
    np.testing.assert_allclose(task.build(res.best_config)(*ins), tmpl.reference(ins), rtol=1e-5, atol=1e-5)
