"""A known tuning landscape for the experiments' tests: a function of a config's features, so
cost models can learn it, answered by a ReplayRunner without compiling anything."""
from __future__ import annotations

import random

from autotune.space import Config
from autotune.task import Task
from tests.helpers import cached_features


def landscape(task: Task, cfg: Config) -> float:
    f = cached_features(task, cfg)
    return float(1e-4 * (1 + 0.05 * f[116] + 0.3 * f[69] + 0.2 * f[51]) * (1 + 0.02 * random.Random(cfg.key()).random()))
