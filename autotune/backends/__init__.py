"""Backends: what differs between the machines a template's kernels run on (a CPU through Numba,
the emulated TPU core). A template names its backend (`Template.backend`); feature extraction,
program graphs, the guided search's prior and the default runner's name are looked up here by that
name, never by the operator's name.

A backend module is imported on first use, so this registry sits below the cost models and
runners that the backends themselves use.

Example::

    >>> from autotune.backends import get_backend
    >>> get_backend("tpu_emulator").name
    'tpu_emulator'
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from autotune.errors import AutotuneError

if TYPE_CHECKING:
    import numpy as np

    from autotune.cost_model.base import CostModel
    from autotune.cost_model.graph import ProgramGraph
    from autotune.space import Config
    from autotune.task import Task


@runtime_checkable
class Backend(Protocol):
    """What a backend provides for the tasks of its templates."""
    name: str

    def features(self, task: "Task", cfg: "Config") -> "np.ndarray":
        """The cost models' feature vector of one config."""
        ...

    def graph(self, task: "Task", cfg: "Config") -> "ProgramGraph":
        """The program graph of one config (for graph cost models), its features as config_feat."""
        ...

    def prior(self, task: "Task") -> "CostModel | None":
        """An estimate that ranks the task's configs before anything is measured (None: no prior)."""
        ...

    def kernel_key(self, task: "Task", cfg: "Config") -> "str | None":
        """What identifies the kernel a config builds: configs with equal keys build the same
        kernel, and the tuner measures it once. None: the config is its own kernel (or it does
        not build; the runner reports why). It may run the template's schedule(), which may crash
        or hang: the tuner has a runner with isolated workers call it there (autotune.runner.KernelKeys)."""
        ...

    runner: str
    """The name (in autotune.tuning.RUNNERS) of the runner that measures this backend's kernels
    unless the caller picks another."""


# name -> the module whose BACKEND attribute is the backend (imported on first use), or the backend
_REGISTRY: dict[str, Any] = {"cpu": "autotune.backends.cpu", "tpu_emulator": "autotune.backends.tpu.backend"}


def get_backend(name: str) -> Backend:
    """The backend of this name: a built-in one (cpu, tpu_emulator) or one added with register_backend."""
    entry = _REGISTRY.get(name)
    if entry is None:
        raise AutotuneError(f"unknown backend {name!r}; known backends: {', '.join(sorted(_REGISTRY))}")
    if isinstance(entry, str):
        entry = _REGISTRY[name] = importlib.import_module(entry).BACKEND
    return entry  # type: ignore[no-any-return]


def backend_of(task: "Task") -> Backend:
    """The backend of a task's template."""
    return get_backend(task.template.backend)


def register_backend(backend: Backend) -> Backend:
    """Add a backend of your own; templates name it in `Template(backend=...)`.

        >>> register_backend(get_backend("cpu")).name
        'cpu'
    """
    if not isinstance(backend, Backend):
        raise AutotuneError(f"register_backend() takes a Backend (name, runner, features, graph, prior, kernel_key), "
                            f"got {type(backend).__name__}")
    if backend.name in _REGISTRY and get_backend(backend.name) is not backend:
        raise AutotuneError(f"a backend named {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend
    return backend


__all__ = ["Backend", "backend_of", "get_backend", "register_backend"]
