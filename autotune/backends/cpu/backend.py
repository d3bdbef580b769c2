"""The `cpu` backend: templates scheduled into loop nests and compiled by Numba for this CPU,
scored by loop-nest features and program graphs, with the CPU roofline as the search's prior.

Example::

    >>> from autotune.backends import get_backend
    >>> from autotune.task import Task
    >>> t = Task.create("matmul", "64x64x64", threads=1)
    >>> get_backend(t.template.backend).prior(t).kind
    'roofline'
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.codegen.source import generate_source, source_hash
from autotune.backends.cpu.features import FEATURE_VERSION, extract, feature_length
from autotune.backends.cpu.graph import nest_graph
from autotune.backends.cpu.roofline import RooflineModel
from autotune.cost_model.base import FeatureSchema
from autotune.cost_model.graph import ProgramGraph
from autotune.errors import AutotuneError
from autotune.ir.stmt import LoopNest
from autotune.schedule.lower import lower

if TYPE_CHECKING:
    from autotune.space import Config
    from autotune.task import Task


def _nest(task: "Task", cfg: "Config") -> LoopNest:
    sched, _ = task.schedule(cfg)
    return lower(sched)


class CpuBackend:
    name = "cpu"
    runner = "local"  # autotune.tuning.RUNNERS
    feature_schema = FeatureSchema("cpu", FEATURE_VERSION, feature_length())

    def features(self, task: "Task", cfg: "Config") -> np.ndarray:
        return extract(_nest(task, cfg))

    def graph(self, task: "Task", cfg: "Config") -> ProgramGraph:
        return nest_graph(_nest(task, cfg))

    def prior(self, task: "Task") -> RooflineModel:
        return RooflineModel.for_task(task)

    def kernel_key(self, task: "Task", cfg: "Config") -> str | None:
        """The hash of the generated source: knobs that do not apply to a config (a placement its
        tile ignores, a block clamped to the matrix) give the same kernel."""
        try:
            sched, opts = task.schedule(cfg)
            return source_hash(generate_source(sched, reassoc=opts.reassoc, noalias=opts.noalias))
        except AutotuneError:
            return None


BACKEND = CpuBackend()
