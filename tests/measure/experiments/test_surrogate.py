"""Surrogates fitted to logs: they learn a known landscape, fail what failed, and let searches be
compared without timing."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from autotune.cost_model.metrics import kendall_tau
from autotune.records import RecordLog, load_records
from autotune.search import make_strategy
from autotune.space import Config
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner
from autotune.runner import MeasureInput
from autotune.measure.experiments.surrogate import Surrogate, SurrogateError, _search, compare

TASK = Task.create("matmul", "96x80x64", threads=2)


def landscape(task: Task, cfg: Config) -> float | None:
    """Seconds that depend on the knobs (one knob value always fails), with a little noise."""
    enc = task.space().encode(cfg)
    if enc[0] == 0 and enc[1] == 0:
        return None
    return 1e-4 * (1 + enc[0] + 0.5 * enc[1] + 0.2 * enc[2]) * (1 + 0.02 * random.Random(cfg.key()).random())


@pytest.fixture(scope="module")
def surrogate(tmp_path_factory: pytest.TempPathFactory) -> Surrogate:
    log = tmp_path_factory.mktemp("surrogate") / "random.jsonl"
    Tuner(TASK, make_strategy("random", TASK.space(), seed=0), ReplayRunner([], fallback=landscape),
          RecordLog(log)).run(TuneOptions(trials=120, early_stopping=None))
    return Surrogate.fit(TASK, load_records(log))


def test_a_surrogate_ranks_unseen_configs_like_the_landscape_it_was_fitted_to(surrogate: Surrogate) -> None:
    unseen = [c for c in TASK.space().sample_new(random.Random(1), set(), 300) if landscape(TASK, c) is not None]
    truth = [landscape(TASK, c) for c in unseen]
    assert kendall_tau(surrogate.gflops(unseen), truth) > 0.6  # scores (higher = faster) against seconds


def test_a_config_that_failed_in_the_log_fails_again_and_the_runner_adds_only_the_noise_asked(
        surrogate: Surrogate) -> None:
    bad = next(iter(surrogate.failed))
    good = TASK.space().sample_new(random.Random(2), set(surrogate.failed), 1)[0]
    r_bad, r_good = surrogate.runner(noise=0.0, seed=0).run([MeasureInput(TASK, bad), MeasureInput(TASK, good)])
    assert not r_bad.ok and surrogate.gflops([bad])[0] == 0.0
    assert r_good.median == pytest.approx(TASK.flops() / surrogate.gflops([good])[0] / 1e9)
    noisy = surrogate.runner(noise=0.2, seed=0).run([MeasureInput(TASK, good)] * 8)
    assert len({r.median for r in noisy}) == 8


def test_too_few_logged_configs_or_an_unknown_search_is_a_clear_error(surrogate: Surrogate) -> None:
    with pytest.raises(SurrogateError, match="at least 32"):
        Surrogate.fit(TASK, [])
    # a small pool: the target is set before the searches are named, and it is not what is checked here
    with pytest.raises(SurrogateError, match="unknown search 'nope'"):
        compare(surrogate, ["nope"], seeds=[1], trials=4, long=8, pool=40)
    with pytest.raises(SurrogateError, match="needs a pretrained model"):
        compare(surrogate, ["xgb+pretrained"], seeds=[1], trials=4, long=8, pool=40)


def test_compare_counts_trials_to_the_target_for_each_search_and_seed(surrogate: Surrogate) -> None:
    out = compare(surrogate, ["random", "xgb"], seeds=[1, 2], trials=12, batch=4, long=32, pool=500)
    assert 1.0 < out["random_expected"] < 500
    for name in ("random", "xgb"):
        row = out["searches"][name]
        assert len(row["runs"]) == 2 and all(n is None or 1 <= n <= 12 for n in row["runs"])
        assert 1 <= row["mean_censored"] <= 13


def test_a_pretrained_search_starts_from_the_saved_model(tmp_path: Path) -> None:
    from autotune.backends import dataset_from_records
    from autotune.cost_model import make_model
    other = Task.create("matmul", "64x48x128", threads=2)
    log = tmp_path / "other.jsonl"
    Tuner(other, make_strategy("random", other.space(), seed=0), ReplayRunner([], fallback=landscape),
          RecordLog(log)).run(TuneOptions(trials=24, early_stopping=None))
    model = make_model("xgb")
    model.fit(dataset_from_records(load_records(log)))
    model.save(tmp_path / "prior.json")
    strategy, callbacks = _search("xgb+pretrained", TASK, 1, {}, pretrained=tmp_path / "prior.json")
    assert "pretrained" in strategy.name and callbacks[0].scorer.prior is not None
    scratch, _ = _search("xgb", TASK, 1, {}, pretrained=tmp_path / "prior.json")
    assert "pretrained" not in scratch.name  # a plain model name ignores the prior
