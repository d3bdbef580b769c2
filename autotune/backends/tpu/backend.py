"""The `tpu_emulator` backend: tile configs of the TPU kernel templates (templates.py beside it),
scored by their tile features and op graphs, measured on the emulated core (runner.py).

Example::

    >>> from autotune.backends import get_backend
    >>> from autotune.task import Task
    >>> t = Task.create("tpu_matmul", "1024x1024x1024", threads=1)
    >>> b = get_backend(t.template.backend)
    >>> b.features(t, t.space().validate({"bm": 256, "bn": 512, "bk": 512})).shape
    (35,)
    >>> b.prior(t) is None
    True
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.backends.tpu.features import TPU_FEATURE_VERSION, tpu_features, tpu_graph
from autotune.cost_model.base import FeatureSchema
from autotune.cost_model.graph import ProgramGraph

if TYPE_CHECKING:
    from autotune.space import Config
    from autotune.task import Task


class TpuEmulatorBackend:
    name = "tpu_emulator"
    runner = "tpu_emulator"  # autotune.tuning.RUNNERS
    feature_schema = FeatureSchema("tpu_emulator", TPU_FEATURE_VERSION, 35)

    def features(self, task: "Task", cfg: "Config") -> np.ndarray:
        return tpu_features(task, cfg)

    def graph(self, task: "Task", cfg: "Config") -> ProgramGraph:
        return tpu_graph(task, cfg)

    def prior(self, task: "Task") -> None:
        return None  # the CPU roofline knows nothing of the TPU; the analytical model is a cost model of its own

    def kernel_key(self, task: "Task", cfg: "Config") -> None:
        return None  # each config's tile sizes are its kernel


BACKEND = TpuEmulatorBackend()
