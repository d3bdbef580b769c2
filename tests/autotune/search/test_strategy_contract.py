"""The Strategy contract, tested once over every strategy with the replay runner (no timing)."""
from __future__ import annotations

import math

import pytest

from autotune.search import STRATEGIES, make_strategy
from autotune.space import ChoiceKnob, Config, ConfigSpace
from autotune.task import Task
from autotune.tuner import Tuner, TuneOptions
from autotune.measure.replay import ReplayRunner
from autotune.runner import MeasureInput, MeasureResult

TASK = Task.create("matmul", "64x64x64", threads=2)


def landscape(task: Task, cfg: Config) -> float:
    """A deterministic, smooth-ish cost over the matmul knobs (seconds)."""
    x = abs(math.log2(cfg["mr"]) - 2.6) + abs(math.log2(cfg["nr"]) - 5.3) + abs(math.log2(cfg["kc"]) - 6)
    x += 0.3 * (not cfg["pack_a"]) + 0.2 * (cfg["order"] != "jr_ir") + 0.1 * math.log2(cfg["jc_blocks"])
    return 1e-4 * (1 + x)


def run(name: str, seed: int, trials: int = 20, batch: int = 6) -> tuple[list[Config], float]:
    strat = make_strategy(name, TASK.space(), seed=seed)
    runner = ReplayRunner([], fallback=landscape)
    proposed: list[Config] = []

    def spy(task, configs, results):  # type: ignore[no-untyped-def]
        proposed.extend(configs)

    res = Tuner(TASK, strat, runner, callbacks=[spy]).run(TuneOptions(trials=trials, batch=batch))
    assert res.measured == len(proposed)
    return proposed, res.best_seconds


@pytest.mark.parametrize("name", STRATEGIES)
def test_proposes_valid_distinct_configs_within_budget(name: str) -> None:
    proposed, best = run(name, seed=1, trials=20, batch=6)
    assert len(proposed) == 20, "the tuner measures exactly the trial budget"
    assert len(set(proposed)) == len(proposed), "a config is never proposed twice"
    space = TASK.space()
    for c in proposed:
        assert space.validate(c.to_json()) == c
    assert best == min(landscape(TASK, c) for c in proposed)


@pytest.mark.parametrize("name", STRATEGIES)
def test_deterministic_under_a_seed(name: str) -> None:
    a, _ = run(name, seed=7)
    b, _ = run(name, seed=7)
    assert [c.key() for c in a] == [c.key() for c in b]


@pytest.mark.parametrize("name", STRATEGIES)
def test_exhausts_a_small_space_then_returns_none(name: str) -> None:
    space = ConfigSpace([ChoiceKnob("a", [1, 2, 3])])
    s = make_strategy(name, space, seed=0)
    seen: list[Config] = []
    for _ in range(10):
        got = s.propose(2)
        if got is None:
            break
        s.update(got, [MeasureResult((1e-3 * c["a"],)) for c in got])
        seen += got
    assert sorted(c["a"] for c in seen) == [1, 2, 3]
    assert s.propose(1) is None


@pytest.mark.parametrize("name", STRATEGIES)
def test_accepts_results_it_did_not_propose(name: str) -> None:
    """On resume the tuner feeds logged results first; they must never be proposed again."""
    space = TASK.space()
    s = make_strategy(name, space, seed=3)
    import random
    rng = random.Random(0)
    old = list({space.sample(rng) for _ in range(10)})
    s.update(old, [MeasureResult((landscape(TASK, c),)) for c in old])
    new = s.propose(8) or []
    assert not set(new) & set(old)


def test_replay_runner_answers_from_a_log(tmp_path) -> None:
    from autotune.records import RecordLog
    from autotune.tuner import result_to_record
    cfg = TASK.space().sample(__import__("random").Random(0))
    log = RecordLog(tmp_path / "l.jsonl")
    log.append(result_to_record(TASK, cfg, MeasureResult((2e-3, 1e-3, 3e-3)), "random", {}))
    r = ReplayRunner(tmp_path / "l.jsonl")
    (res,) = r.run([MeasureInput(TASK, cfg)])
    assert res.median == 2e-3 and r.replayed == 1
    other = TASK.space().sample(__import__("random").Random(1))
    (miss,) = r.run([MeasureInput(TASK, other)])
    assert not miss.ok and "not in the replay log" in miss.message
