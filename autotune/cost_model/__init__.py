"""Cost models over loop-nest features: learned (XGBoost, LightGBM, a GNN), the CPU roofline
estimate (nothing to learn), and a random baseline.

    >>> from autotune.cost_model import make_model
    >>> make_model("random").kind
    'random'
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cost_model.base import CostModel, Dataset, ModelError, read_model_file
from autotune.cost_model.lgbm_model import LGBMModel
from autotune.cost_model.random_model import RandomModel
from autotune.cost_model.roofline import RooflineModel
from autotune.cost_model.xgb_model import XGBModel

if TYPE_CHECKING:
    from autotune.task import Task

MODELS = ("xgb", "lgbm", "gnn", "random", "analytical", "roofline")
TRAINABLE = ("xgb", "lgbm", "gnn", "random")  # what `autotune train-model` can fit


def make_model(kind: str, *, objective: str = "rank", seed: int = 0, task: "Task | None" = None) -> CostModel:
    """A fresh model by name: one of MODELS. `task`: the task it will score, for a model that
    needs to know it (the roofline: the task's dtype and threads on this machine)."""
    if kind == "xgb":
        return XGBModel(objective=objective, seed=seed)
    if kind == "lgbm":
        return LGBMModel(objective=objective, seed=seed)
    if kind == "random":
        return RandomModel(seed=seed)
    if kind == "roofline":
        return RooflineModel.for_task(task) if task is not None else RooflineModel()
    if kind == "analytical":
        from autotune.cost_model.analytical import AnalyticalModel
        return AnalyticalModel()
    if kind == "gnn":
        from autotune.cost_model.gnn_model import GNNModel
        return GNNModel(loss="mse" if objective == "regression" else "rank_logistic", seed=seed)
    raise ModelError(f"unknown cost model {kind!r}; choose one of {', '.join(MODELS)}")


def load_model(path: str | Path) -> CostModel:
    """A saved model of any kind."""
    kind = read_model_file(path)["kind"]
    from autotune.cost_model.gnn_model import GNNModel
    from autotune.cost_model.analytical import AnalyticalModel
    cls = {"xgb": XGBModel, "lgbm": LGBMModel, "random": RandomModel, "gnn": GNNModel,
           "analytical": AnalyticalModel, "roofline": RooflineModel}.get(kind)
    if cls is None:
        raise ModelError(f"{path}: unknown model kind {kind!r}")
    return cls.load(path)  # type: ignore[attr-defined]


__all__ = ["MODELS", "TRAINABLE", "CostModel", "Dataset", "LGBMModel", "ModelError", "RandomModel", "RooflineModel", "XGBModel",
           "load_model", "make_model"]
