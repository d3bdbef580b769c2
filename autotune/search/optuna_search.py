"""Optuna samplers (TPE, CMA-ES) behind the batch ask/tell interface.

Every knob is an ordinal integer (the index of its value), which both samplers handle. Optuna
may suggest a config already measured: it is told the known result and asked again, so a
config is never proposed twice.
"""
from __future__ import annotations

import math
import random
from typing import Any, Sequence

from autotune.errors import AutotuneError
from autotune.space import Config, ConfigSpace
from autotune.runner import MeasureResult


class OptunaSearch:
    """Example::

        >>> from autotune.space import ConfigSpace, ChoiceKnob
        >>> s = OptunaSearch(ConfigSpace([ChoiceKnob("a", list(range(8)))]), sampler="tpe", seed=0)
        >>> len(s.propose(2))
        2
    """

    def __init__(self, space: ConfigSpace, seed: int = 0, sampler: str = "tpe") -> None:
        try:
            import optuna
        except ImportError as e:  # pragma: no cover - optuna is a dependency
            raise AutotuneError("the optuna strategies need optuna: pip install optuna") from e
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            smp = optuna.samplers.TPESampler(seed=seed, n_startup_trials=8)
        elif sampler == "cmaes":
            try:
                import cmaes  # noqa: F401 - optuna's CMA-ES sampler needs it
            except ImportError as e:
                raise AutotuneError("the cmaes strategy needs the cmaes package: pip install cmaes") from e
            import warnings
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            smp = optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=8, warn_independent_sampling=False)
        else:
            raise AutotuneError(f"unknown optuna sampler {sampler!r}; use 'tpe' or 'cmaes'")
        self.name = sampler
        self.optuna = optuna
        self.space = space
        self.study = optuna.create_study(direction="minimize", sampler=smp)
        self.rng = random.Random(seed)
        self.pending: dict[Config, Any] = {}
        self.values: dict[Config, float | None] = {}  # measured: log seconds, None for failures
        self.seen: set[Config] = set()

    def _ask(self) -> tuple[Any, Config]:
        trial = self.study.ask()
        values = {k.name: k.values()[trial.suggest_int(k.name, 0, len(k.values()) - 1)] for k in self.space.knobs}
        return trial, Config(values)

    def _tell(self, trial: Any, value: float | None) -> None:
        if value is None:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def propose(self, n: int) -> list[Config] | None:
        out: list[Config] = []
        attempts = 0
        while len(out) < n and len(self.seen) < len(self.space) and attempts < 20 * n + 20:
            attempts += 1
            trial, cfg = self._ask()
            if cfg in self.seen or not self.space.allows(cfg):
                # answer a repeat from what we know (a pruned config fails), so the sampler moves on
                self._tell(trial, self.values.get(cfg)) if cfg in self.values else self.study.tell(
                    trial, state=self.optuna.trial.TrialState.FAIL)
                continue
            self.seen.add(cfg)
            self.pending[cfg] = trial
            out.append(cfg)
        extra = self.space.sample_new(self.rng, self.seen, n - len(out))  # sampler stuck on repeats: explore
        self.seen.update(extra)
        out += extra
        return out or None

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            v = math.log(r.median) if r.ok else None
            self.values[c] = v
            self.seen.add(c)
            trial = self.pending.pop(c, None)
            if trial is not None:
                self._tell(trial, v)
            elif v is not None:  # resumed from a log: teach the sampler this point
                dist = {k.name: self.optuna.distributions.IntDistribution(0, len(k.values()) - 1)
                        for k in self.space.knobs}
                params = {k.name: k.values().index(c[k.name]) for k in self.space.knobs}
                self.study.add_trial(self.optuna.trial.create_trial(params=params, distributions=dist, value=v))
