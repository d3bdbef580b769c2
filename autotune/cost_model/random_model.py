"""The baseline: random scores (what a model must beat)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.cost_model.base import Dataset, FeatureSchema, as_matrix, read_model_file, schema_of, write_model_file


class RandomModel:
    """Example::

        >>> RandomModel(seed=0).predict(np.zeros((3, 5))).shape
        (3,)
    """
    kind = "random"
    needs_graphs = False
    features: FeatureSchema | None = None  # what it was trained on (autotune.backends names it)

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def fit(self, data: Dataset) -> None:
        self.features = data.schema or self.features

    update = fit

    def predict(self, X: "Dataset | np.ndarray") -> np.ndarray:
        X = as_matrix(X)
        return self.rng.random(len(X))

    def save(self, path: str | Path) -> None:
        write_model_file(path, self.kind, {"seed": self.seed}, "", features=self.features)

    @classmethod
    def load(cls, path: str | Path) -> "RandomModel":
        d = read_model_file(path)
        m = cls(**d["params"])
        m.features = schema_of(d)
        return m
