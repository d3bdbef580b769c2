"""The CPU roofline estimate: what it rewards, and the guided search that starts from it."""
from __future__ import annotations

import random

import numpy as np
import pytest

from autotune.cost_model import ModelError, make_model
from autotune.cost_model.features import config_features
from autotune.cost_model.guided import guided_search
from autotune.cost_model.roofline import RooflineModel
from autotune.task import Task

TASK = Task.create("matmul", "256x256x256", threads=2)
GOOD = {"mr": 6, "nr": 48, "kc": 256, "mc_panels": 16, "jc_blocks": 1, "order": "jr_ir", "pack_a": True,
        "parallel": True}


def score(task: Task, **knobs: object) -> float:
    cfg = task.space().validate({**GOOD, **knobs})
    return float(RooflineModel.for_task(task).predict(config_features(task, cfg)[None])[0])


def test_it_rewards_what_keeps_the_fma_units_busy() -> None:
    good = score(TASK)
    assert score(TASK, mr=2, nr=16) < good      # 2 accumulator vectors cannot hide the FMA latency
    assert score(TASK, mr=12, nr=64) < good     # 48 accumulator vectors spill out of 32 registers
    assert score(TASK, parallel=False) < good   # one of the two threads idle
    assert score(TASK, mr=6, nr=48) == good     # a pure function of the features


def test_it_knows_the_dtype_and_threads_of_its_task() -> None:
    m32 = RooflineModel.for_task(TASK)
    m64 = RooflineModel.for_task(Task.create("matmul", "256x256x256", "float64", threads=1))
    assert m32.lanes == 2 * m64.lanes and (m32.threads, m64.threads) == (2, 1)
    assert isinstance(make_model("roofline", task=TASK), RooflineModel)
    assert make_model("roofline", task=TASK).threads == 2
    with pytest.raises(ModelError, match="threads"):
        RooflineModel(threads=0)


def test_a_search_from_scratch_starts_from_its_top_picks() -> None:
    """Half of the first batch is the roofline's best predictions, before anything is measured;
    the other half covers the space (roofline=False: all of it, as before there was a prior)."""
    strategy, updater = guided_search(TASK, "xgb", seed=4)
    assert "prior roofline" in strategy.name and updater.scorer.informed
    first = strategy.propose(8)
    assert first and len(set(first)) == 8
    model = RooflineModel.for_task(TASK)
    pool = TASK.space().sample_new(random.Random(0), set(), 400)
    ranked = np.sort(model.predict(np.stack([config_features(TASK, c) for c in pool])))[::-1]
    picks = np.sort(model.predict(np.stack([config_features(TASK, c) for c in first])))[::-1]
    assert picks[3] >= ranked[len(ranked) // 20]  # 4 of 8 in the roofline's best 5% of random configs
    blind, up = guided_search(TASK, "xgb", roofline=False, seed=4)
    assert "prior" not in blind.name and not up.scorer.informed


def test_tpu_kernels_get_no_cpu_roofline() -> None:
    strategy, updater = guided_search(Task.create("tpu_matmul", "1024x1024x1024", threads=1), "xgb", seed=0)
    assert updater.scorer.prior is None and "prior" not in strategy.name
