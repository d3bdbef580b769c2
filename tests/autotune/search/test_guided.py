"""Model-guided search: a cost model ranks candidates, refits on each batch, and starts from a
prior (a pretrained model, or the backend's estimate: the roofline on a CPU)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import Dataset, make_model
from autotune.backends.cpu.roofline import RooflineModel
from autotune.errors import AutotuneError
from autotune.runner import MeasureResult
from autotune.search.guided import guided_search
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner
from tests.autotune.cost_model.test_models import landscape
from tests.helpers import cached_features, features_cache

TASK = Task.create("matmul", "96x80x64", threads=2)
ROOFLINE_TASK = Task.create("matmul", "256x256x256", threads=2)
_GRAPHS: dict = {}


def guided(task: Task, *args, **kwargs):  # type: ignore[no-untyped-def]
    """guided_search, its scorer lowering each config of the task once per session: the features
    (and program graphs) of a config never change, and lowering is most of a search's time."""
    strategy, updater = guided_search(task, *args, **kwargs)
    updater.scorer.cache = features_cache(task)
    updater.scorer.graph_cache = _GRAPHS.setdefault(task.key(), {})
    return strategy, updater


@pytest.mark.parametrize("kind", ["xgb", "lgbm", "gnn"])
def test_guided_search_is_valid_and_refits(kind: str, tmp_path: Path) -> None:
    strategy, updater = guided(TASK, kind, seed=0)
    proposed = []
    res = Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
                callbacks=[updater, lambda t, c, r: proposed.extend(c)]).run(TuneOptions(trials=16, batch=8))
    assert res.measured == 16 and len(set(proposed)) == 16
    assert updater.fits >= 2
    updater.scorer.model.save(tmp_path / "m.json")
    warm, up2 = guided(TASK, pretrained=tmp_path / "m.json", seed=1)
    res2 = Tuner(TASK, warm, ReplayRunner([], fallback=landscape), callbacks=[up2]).run(TuneOptions(trials=8, batch=8))
    assert res2.measured == 8 and up2.fits >= 1


def test_a_pretrained_model_steers_the_first_round(tmp_path: Path) -> None:
    rng = random.Random(3)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    secs = [landscape(TASK, c) for c in cfgs]
    ds = Dataset()
    ds.add(np.stack([cached_features(TASK, c) for c in cfgs]), secs, TASK.key())
    model = make_model("xgb")
    model.fit(ds)
    model.save(tmp_path / "pre.json")
    strategy, _ = guided(TASK, pretrained=tmp_path / "pre.json", seed=5)
    first = strategy.propose(8)
    assert first and len(set(first)) == 8
    got = sorted(landscape(TASK, c) for c in first)
    # half of the batch in the best 5% of the 200 samples: a random batch of 8 does that ~0.04% of the time
    assert got[3] <= sorted(secs)[len(secs) // 20]


def test_a_prior_that_ranks_the_task_well_keeps_its_say(tmp_path: Path) -> None:
    rng = random.Random(6)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    ds = Dataset()
    ds.add(np.stack([cached_features(TASK, c) for c in cfgs]), [landscape(TASK, c) for c in cfgs], TASK.key())
    model = make_model("xgb")
    model.fit(ds)
    model.save(tmp_path / "good.json")
    strategy, updater = guided(TASK, pretrained=tmp_path / "good.json", seed=7)
    trust: list = []
    Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
          callbacks=[updater, lambda t, c, r: trust.append(updater.scorer.prior_trust)]).run(
        TuneOptions(trials=16, batch=8))
    assert trust[0] > 0.5 and trust[-1] > 0.5


def test_a_misleading_prior_fades_as_the_task_is_measured(tmp_path: Path) -> None:
    """A prior trained on the opposite landscape steers its half of the first round to bad
    configs; the first measurements show it ranks them backwards, it loses its say, and the search
    recovers."""
    rng = random.Random(4)
    space = TASK.space()
    cfgs = sorted({space.sample(rng) for _ in range(200)}, key=lambda c: c.key())
    secs = sorted(landscape(TASK, c) for c in cfgs)
    ds = Dataset()
    ds.add(np.stack([cached_features(TASK, c) for c in cfgs]), [1.0 / landscape(TASK, c) for c in cfgs], TASK.key())
    model = make_model("xgb")
    model.fit(ds)  # fitted to the inverse times: it ranks the slowest configs first
    model.save(tmp_path / "wrong.json")
    strategy, updater = guided(TASK, pretrained=tmp_path / "wrong.json", seed=3)
    seen: list = []
    trust: list = []
    Tuner(TASK, strategy, ReplayRunner([], fallback=landscape),
          callbacks=[updater, lambda t, c, r: seen.append([landscape(TASK, x) for x in c]),
                     lambda t, c, r: trust.append(updater.scorer.prior_trust)]).run(TuneOptions(trials=40, batch=8))
    assert min(seen[0][:4]) > secs[len(secs) // 2]   # the prior's first picks: all in the slower half
    assert trust[0] == 0.0 and set(trust) == {0.0}  # judged by the first batch, and never trusted again
    assert min(min(b) for b in seen[1:3]) <= secs[len(secs) // 20]  # within two more batches: the best 5%


def test_an_untrained_model_gets_space_filling_batches() -> None:
    """With no prior, before the model can tell configs apart, each batch covers the space: its configs lie
    farther from their nearest neighbour (in knobs that differ; the first batch counts as a
    neighbour of the second) than in random batches."""
    def spacing(batch: list, others: list) -> float:
        pts = batch + others
        return sum(min(sum(a[k] != b[k] for k in a) for b in pts if b is not a) for a in batch) / len(batch)

    space = TASK.space()
    strategy, _ = guided_search(TASK, "xgb", roofline=False, seed=2)
    first = strategy.propose(6)
    strategy.update(first, [MeasureResult(costs=(1e-3,))] * 6)  # too few to fit: still uninformed
    second = strategy.propose(6)
    rng = random.Random(0)
    for got, size in ((spacing(first, []), 6), (spacing(second, first), 12)):
        randoms = sorted(spacing(space.sample_new(rng, set(), size), []) for _ in range(50))
        assert got > randoms[-3]  # farther apart than 48 random batches of 50


def test_make_search_picks_the_guided_search_for_a_cost_model() -> None:
    from autotune.tuning import make_search
    search = make_search(TASK, cost_model="xgb", seed=0)
    assert search.name == "evolutionary+xgb(prior roofline)" and len(search.callbacks) == 1
    assert search.strategy.epsilon == 0.1 and make_search(TASK, cost_model="xgb", exploration=0.0).strategy.epsilon == 0
    search = make_search(TASK, strategy="random", seed=0)
    assert search.name == "random" and search.callbacks == ()
    with pytest.raises(AutotuneError, match="exploration is the share of a model-guided search"):
        make_search(TASK, strategy="random", exploration=0.2)


def test_a_search_from_scratch_starts_from_its_top_picks() -> None:
    """Half of the first batch is the roofline's best predictions, before anything is measured;
    the other half covers the space (roofline=False: all of it, as before there was a prior)."""
    strategy, updater = guided(ROOFLINE_TASK, "xgb", seed=4)
    assert "prior roofline" in strategy.name and updater.scorer.informed
    first = strategy.propose(8)
    assert first and len(set(first)) == 8
    model = RooflineModel.for_task(ROOFLINE_TASK)
    pool = ROOFLINE_TASK.space().sample_new(random.Random(0), set(), 400)
    ranked = np.sort(model.predict(np.stack([cached_features(ROOFLINE_TASK, c) for c in pool])))[::-1]
    picks = np.sort(model.predict(np.stack([cached_features(ROOFLINE_TASK, c) for c in first])))[::-1]
    assert picks[3] >= ranked[len(ranked) // 20]  # 4 of 8 in the roofline's best 5% of random configs
    blind, up = guided_search(ROOFLINE_TASK, "xgb", roofline=False, seed=4)
    assert "prior" not in blind.name and not up.scorer.informed


def test_tpu_kernels_get_no_cpu_roofline() -> None:
    strategy, updater = guided_search(Task.create("tpu_matmul", "1024x1024x1024", threads=1), "xgb", seed=0)
    assert updater.scorer.prior is None and "prior" not in strategy.name
