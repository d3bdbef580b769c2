"""Cost models over config features: learned (XGBoost, LightGBM, a GNN), the CPU roofline
estimate and the TPU analytical model (nothing to learn), and a random baseline.

Every model is one entry of REGISTRY (an autotune.registry.Registry of ModelEntry); make_model,
load_model and the name lists (MODELS, CPU_MODELS, TRAINABLE_MODELS) come from it. Adding a cost
model is one module plus one entry.

    >>> from autotune.cost_model import make_model
    >>> make_model("random").kind
    'random'
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.cost_model.base import CostModel, Dataset, ModelError, read_model_file
from autotune.cost_model.lgbm_model import LGBMModel
from autotune.cost_model.random_model import RandomModel
from autotune.cost_model.xgb_model import XGBModel
from autotune.errors import install_hint
from autotune.registry import Lazy, Registry

if TYPE_CHECKING:
    from autotune.task import Task


@dataclass(frozen=True)
class ModelEntry:
    """A cost model in the registry.

    path: "module:Class" of its class (imported on first use); the class has `load(path)`.
    make(cls, objective, seed, task): a fresh model (objective "rank" or "regression"; task: the
    task it will score, or None).
    cpu: it scores CPU loop-nest features (a choice of `autotune tune --cost-model`).
    trainable: `autotune train-model` saves it fitted to logs.
    requires: (module, what it is, the pip extra that brings it) of each optional package it needs;
    `check_available` imports them, so a missing one is an error before any measurement.
    """
    path: str
    make: Callable[[Any, str, int, "Task | None"], CostModel]
    cpu: bool = True
    trainable: bool = True
    requires: tuple[tuple[str, str, str], ...] = ()

    def check_available(self, name: str) -> None:
        """Raise ModelError naming the pip extra when a package the model needs cannot be imported."""
        for module, what, extra in self.requires:
            try:
                importlib.import_module(module)
            except ImportError:
                raise ModelError(f"the {name} cost model needs {what}: {install_hint(extra)}") from None

    def load_class(self) -> Any:
        return Lazy(self.path).load()


# name -> ModelEntry: the one list of cost models (an unknown name is a ModelError naming the choices)
REGISTRY: Registry[ModelEntry] = Registry("cost model", {
    "xgb": ModelEntry("autotune.cost_model.xgb_model:XGBModel",
                      lambda cls, objective, seed, task: cls(objective=objective, seed=seed)),
    "lgbm": ModelEntry("autotune.cost_model.lgbm_model:LGBMModel",
                       lambda cls, objective, seed, task: cls(objective=objective, seed=seed)),
    "gnn": ModelEntry("autotune.cost_model.gnn_model:GNNModel",
                      lambda cls, objective, seed, task: cls(loss="mse" if objective == "regression" else "rank_logistic",
                                                             seed=seed),
                      requires=(("torch", "PyTorch", "gnn"),)),
    "random": ModelEntry("autotune.cost_model.random_model:RandomModel",
                         lambda cls, objective, seed, task: cls(seed=seed)),
    # scores the TPU emulator's tile features (its roofline columns), not CPU loop nests
    "analytical": ModelEntry("autotune.backends.tpu.analytical:AnalyticalModel",
                             lambda cls, objective, seed, task: cls(), cpu=False, trainable=False),
    "roofline": ModelEntry("autotune.backends.cpu.roofline:RooflineModel",
                           lambda cls, objective, seed, task: cls.for_task(task) if task is not None else cls(),
                           trainable=False),
}, error=ModelError)
MODELS = REGISTRY.names()
CPU_MODELS = tuple(name for name, e in REGISTRY.items() if e.cpu)
TRAINABLE_MODELS = tuple(name for name, e in REGISTRY.items() if e.trainable)


def make_model(kind: str, *, objective: str = "rank", seed: int = 0, task: "Task | None" = None) -> CostModel:
    """A fresh model by name: one of MODELS. `task`: the task it will score, for a model that
    needs to know it (the roofline: the task's dtype and threads on this machine)."""
    entry = REGISTRY.get(kind)
    return entry.make(entry.load_class(), objective, seed, task)


def load_model(path: str | Path) -> CostModel:
    """A saved model of any kind."""
    kind = read_model_file(path)["kind"]
    entry = REGISTRY.get(kind, None)
    if entry is None:
        raise ModelError(f"{path}: unknown model kind {kind!r}; known kinds: {', '.join(REGISTRY.names())}")
    return entry.load_class().load(path)  # type: ignore[no-any-return]


__all__ = ["CPU_MODELS", "MODELS", "REGISTRY", "TRAINABLE_MODELS", "CostModel", "Dataset", "LGBMModel", "ModelEntry",
           "ModelError", "RandomModel", "XGBModel", "load_model", "make_model"]
