"""A surrogate of a task's landscape, fitted to its logged measurements, so that search strategies
can be compared over many seeds in minutes instead of hours of compiling and timing.

The surrogate is a LightGBM regressor from a config's knob encoding to log GFLOP/s. It learns
from knobs, not from the loop-nest features the cost models use, so a model-guided search cannot
win merely by sharing the surrogate's representation. It answers configs it never saw with its
smooth guess, where real kernels have cliffs, and it has no drift: treat its counts as a way to
rank strategies and to see seed-to-seed spread, not as the real benchmark's numbers.

Example::

    >>> from autotune.measure.experiments.surrogate import Surrogate, compare                     # doctest: +SKIP
    >>> s = Surrogate.fit(task, load_records("search-efficiency/random_....jsonl"))  # doctest: +SKIP
    >>> compare(s, ["random", "xgb"], seeds=range(1, 9))                     # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from autotune.errors import AutotuneError
from autotune.records import Record
from autotune.search.base import Strategy
from autotune.space import Config
from autotune.task import Task
from autotune.tuner import Callback
from autotune.tuning import NoValidConfig, make_search, tune
from autotune.measure.replay import ReplayRunner
from autotune.runner import MeasureResult


class SurrogateError(AutotuneError, ValueError):
    """Too few logged measurements to fit a surrogate, or an unknown search name."""


@dataclass
class Surrogate:
    """GFLOP/s of any config of `task`, as a regressor fitted to `measured` logged configs predicts
    them; the configs in `failed` (logged with an error, never with a time) fail again."""
    task: Task
    booster: object
    failed: frozenset[Config]
    measured: int
    _cache: dict[Config, float] = field(default_factory=dict, repr=False)

    @classmethod
    def fit(cls, task: Task, records: Iterable[Record], min_configs: int = 32) -> "Surrogate":
        """Fit to the task's records (other tasks' are skipped; a config timed more than once counts
        at its median)."""
        import lightgbm as lgb
        space = task.space()
        times: dict[Config, list[float]] = {}
        failed: set[Config] = set()
        for r in records:
            if r.key != task.key():
                continue
            cfg = r.validated_config()
            if r.ok:
                times.setdefault(cfg, []).append(r.seconds)
            else:
                failed.add(cfg)
        if len(times) < min_configs:
            raise SurrogateError(f"{task.key()}: {len(times)} configs with a time in the logs; a surrogate needs "
                                 f"at least {min_configs} (run a longer random search of this task first)")
        configs = list(times)
        X = np.array([space.encode(c) for c in configs], np.float64)
        y = np.log([task.flops() / statistics.median(times[c]) / 1e9 for c in configs])
        params = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 3,
                  "verbose": -1, "seed": 0, "num_threads": 1}
        booster = lgb.train(params, lgb.Dataset(X, y), num_boost_round=400)
        return cls(task, booster, frozenset(failed - set(times)), len(configs))

    def gflops(self, configs: Sequence[Config]) -> np.ndarray:
        """The surrogate's noise-free GFLOP/s of each config (0 for one that failed in the logs)."""
        todo = [c for c in dict.fromkeys(configs) if c not in self._cache]
        if todo:
            X = np.array([self.task.space().encode(c) for c in todo], np.float64)
            for c, v in zip(todo, self.booster.predict(X)):  # type: ignore[attr-defined]
                self._cache[c] = 0.0 if c in self.failed else float(math.exp(v))
        return np.array([self._cache[c] for c in configs])

    def runner(self, noise: float, seed: int) -> ReplayRunner:
        """A runner that answers each config with the surrogate's time, times a log-normal noise of
        sigma `noise` drawn per measurement; a config that failed in the logs fails."""
        rng = random.Random(seed)

        def seconds(task: Task, config: Config) -> float | None:
            g = float(self.gflops([config])[0])
            return None if g == 0.0 else task.flops() / (g * math.exp(rng.gauss(0.0, noise))) / 1e9

        return ReplayRunner([], fallback=seconds)


def _search(name: str, task: Task, seed: int, features: dict[Config, np.ndarray],
            pretrained: str | Path | None = None) -> tuple[Strategy, list[Callback]]:
    """A strategy name (random, evolutionary, ...), a cost-model name (xgb, lgbm, ...) for a
    model-guided search, as `autotune tune --strategy/--cost-model` take them (it starts from the
    roofline prior), a cost-model name + "+blind" for one with no prior, or a cost-model name +
    "+pretrained" for one that starts from the saved model `pretrained`."""
    from autotune.cost_model import MODELS
    from autotune.search import STRATEGIES
    if name in STRATEGIES:
        return make_search(task, strategy=name, seed=seed).strategy, []
    model, plus, tail = name.partition("+")
    if model in MODELS and (not plus or tail in ("pretrained", "blind")):
        if tail == "pretrained" and pretrained is None:
            raise SurrogateError(f"search {name!r} needs a pretrained model: pass compare(..., pretrained=PATH)")
        search = make_search(task, cost_model=model, pretrained=pretrained if tail == "pretrained" else None,
                             roofline=tail != "blind", seed=seed)
        for updater in search.callbacks:  # lowering is most of a search's time: share it across seeds
            updater.scorer.cache = features  # type: ignore[attr-defined]
        return search.strategy, list(search.callbacks)
    raise SurrogateError(f"unknown search {name!r}: give a strategy ({', '.join(STRATEGIES)}), a cost model for "
                         f"a guided search ({', '.join(MODELS)}), or a cost model + \"+blind\" or \"+pretrained\"")


def compare(surrogate: Surrogate, searches: Sequence[str], *, seeds: Iterable[int] = range(1, 9),
            trials: int = 64, batch: int = 4, noise: float = 0.1, long: int = 128, pool: int = 4000,
            pretrained: str | Path | None = None) -> dict:
    """Trials each search takes, per seed, to first measure a config within 95% of the best that a
    `long` random search finds on the surrogate (its expectation over a `pool` of random configs),
    next to the trials random search needs on average (1 / the share of the pool within that).
    Searches named "<model>+pretrained" start from the saved model `pretrained`."""
    task = surrogate.task
    rng = random.Random(0)
    sample = surrogate.gflops(task.space().sample_new(rng, set(), pool))
    draws = np.random.default_rng(0)
    best_of_long = float(np.mean([draws.choice(sample, min(long, len(sample)), replace=False).max()
                                  for _ in range(200)]))
    target = 0.95 * best_of_long
    share = float((sample >= target).mean())
    out: dict = {"task": task.key(), "surrogate_configs": surrogate.measured, "target_gflops": target,
                 "random_expected": 1 / share if share else math.inf, "trials": trials, "searches": {}}
    features: dict[Config, np.ndarray] = {}
    for name in searches:
        runs: list[int | None] = []
        for seed in seeds:
            strategy, callbacks = _search(name, task, seed, features, pretrained)
            taken = _Taken()
            with contextlib.suppress(NoValidConfig):  # only the configs taken count here
                tune(op=task, trials=trials, batch=batch, strategy=strategy, callbacks=[*callbacks, taken],
                     runner=surrogate.runner(noise, seed), presets=False, progress=False, finalists=None)
            reached = np.nonzero(surrogate.gflops(taken.configs) >= target)[0]
            runs.append(int(reached[0]) + 1 if len(reached) else None)
        censored = statistics.mean(trials + 1 if n is None else n for n in runs)
        out["searches"][name] = {"runs": runs, "mean_censored": censored,
                                 "saving_vs_random": out["random_expected"] / censored}
    return out


class _Taken:
    """A tuner callback that keeps the measured configs in order."""

    def __init__(self) -> None:
        self.configs: list[Config] = []

    def __call__(self, task: Task, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self.configs += configs
