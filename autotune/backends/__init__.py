"""Backends: what differs between the machines a template's kernels run on (a CPU through Numba,
the emulated TPU core). A template names its backend (`Template.backend`); each backend owns how its
configs become features and program graphs (and which features those are: `feature_schema`), the
guided search's prior, which configs build the same kernel, and its default runner. Everything
above this layer asks here, by the task, never by the operator's name.

One folder per backend holds all of its code: autotune/backends/cpu (loop-nest features and
graphs, the roofline prior), autotune/backends/tpu (the emulated core, its kernel templates, HLO
kernels, features, the analytical model, TpuGraphs files, the runner, `evaluate-tiles`).

Example::

    >>> import random
    >>> from autotune.backends import config_features, feature_schema
    >>> from autotune.task import Task
    >>> t = Task.create("matmul", "32x32x32", threads=1)
    >>> feature_schema(t).describe(), config_features(t, t.space().sample(random.Random(0))).shape
    ('cpu features v2 (130 columns)', (130,))
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Protocol, runtime_checkable

import numpy as np

from autotune.cost_model.base import CostModel, Dataset, FeatureSchema
from autotune.cost_model.graph import ProgramGraph
from autotune.errors import AutotuneError
from autotune.registry import Registry

if TYPE_CHECKING:
    from autotune.records import Record
    from autotune.space import Config
    from autotune.task import Task


@runtime_checkable
class Backend(Protocol):
    """What a backend provides for the tasks of its templates."""
    name: str
    feature_schema: FeatureSchema
    """The features `features` gives (backend, version, length): a model trained on other features
    is refused for this backend's tasks."""
    runner: str
    """The name (in autotune.tuning.RUNNERS) of the runner that measures this backend's kernels
    unless the caller picks another."""

    def features(self, task: "Task", cfg: "Config") -> np.ndarray:
        """The cost models' feature vector of one config."""
        ...

    def graph(self, task: "Task", cfg: "Config") -> ProgramGraph:
        """The program graph of one config (for graph cost models), its features as config_feat."""
        ...

    def prior(self, task: "Task") -> CostModel | None:
        """An estimate that ranks the task's configs before anything is measured (None: no prior)."""
        ...

    def kernel_key(self, task: "Task", cfg: "Config") -> str | None:
        """What identifies the kernel a config builds: configs with equal keys build the same
        kernel, and the tuner measures it once. None: the config is its own kernel (or it does
        not build; the runner reports why). It may run the template's schedule(), which may crash
        or hang: the tuner has a runner with isolated workers call it there (autotune.runner.KernelKeys)."""
        ...


BACKENDS: Registry[Backend] = Registry("backend", {
    "cpu": "autotune.backends.cpu.backend:BACKEND",
    "tpu_emulator": "autotune.backends.tpu.backend:BACKEND",
})


def get_backend(name: str) -> Backend:
    """The backend of this name: a built-in one (cpu, tpu_emulator) or one added with register_backend."""
    return BACKENDS.get(name)


def backend_of(task: "Task") -> Backend:
    """The backend of a task's template."""
    return get_backend(task.template.backend)


def register_backend(backend: Backend) -> Backend:
    """Add a backend of your own; templates name it in `Template(backend=...)`.

        >>> register_backend(get_backend("cpu")).name
        'cpu'
    """
    if not isinstance(backend, Backend):
        raise AutotuneError(f"register_backend() takes a Backend (name, feature_schema, runner, features, graph, "
                            f"prior, kernel_key), got {type(backend).__name__}")
    if backend.name in BACKENDS and get_backend(backend.name) is not backend:
        raise AutotuneError(f"a backend named {backend.name!r} is already registered")
    BACKENDS.register(backend.name, backend, replace=True)
    return backend


def config_features(task: "Task", cfg: "Config") -> np.ndarray:
    """The feature vector of one config of a task, as its backend extracts it (CPU: schedule, lower,
    extract loop-nest features; the TPU emulator: the kernel's tile features)."""
    return backend_of(task).features(task, cfg)


def config_graph(task: "Task", cfg: "Config") -> ProgramGraph:
    """The program graph of one config of a task, as its backend builds it."""
    return backend_of(task).graph(task, cfg)


def feature_schema(task: "Task") -> FeatureSchema:
    """The features config_features gives for this task."""
    return backend_of(task).feature_schema


def check_model(model: CostModel, task: "Task", where: str = "the model") -> None:
    """Refuse a model trained on other features than the task's backend extracts (one clear line).
    A model that names no features (an untrained one, or one with nothing to learn) is not checked."""
    trained = getattr(model, "features", None)
    want = feature_schema(task)
    if trained is not None and (trained.backend, trained.version) != (want.backend, want.version):
        raise AutotuneError(f"{where} was trained on {trained.describe()}; {task.key()} has {want.describe()}: "
                            f"retrain it with `autotune train-model` on logs of this backend")


def dataset_from_records(records: Iterable["Record"], *, max_per_task: int | None = None,
                         graphs: bool = False) -> Dataset:
    """The training set of some records: every (validated) config lowered and its features (and
    graphs) extracted by its task's backend. Re-timings of finalists are left out: they time configs
    the log measured already. Tasks of different backends (different features) are an error."""
    by_task: dict[str, list[Record]] = {}
    for r in records:
        if not r.retimed:
            by_task.setdefault(r.key, []).append(r)
    ds = Dataset()
    for key in sorted(by_task):
        rs = by_task[key][:max_per_task] if max_per_task else by_task[key]
        task = rs[0].task()
        schema = feature_schema(task)
        if ds.schema is not None and ds.schema != schema:
            raise AutotuneError(f"{key} has {schema.describe()}, other tasks of these records {ds.schema.describe()}: "
                                "train one model per backend")
        ds.schema = schema
        feats, secs, gs = [], [], []
        for r in rs:
            try:
                cfg = task.space().validate(r.config)
                if graphs:
                    g = config_graph(task, cfg)
                    gs.append(g)
                    feats.append(g.config_feat)
                else:
                    feats.append(config_features(task, cfg))
            except AutotuneError:
                continue
            secs.append(r.seconds)
        if feats:
            ds.add(np.stack(feats), secs, key, gs if graphs else None)
    return ds


__all__ = ["BACKENDS", "Backend", "backend_of", "check_model", "config_features", "config_graph",
           "dataset_from_records", "feature_schema", "get_backend", "register_backend"]
