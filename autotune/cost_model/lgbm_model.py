"""LightGBM cost model: lambdarank within each task (default) or regression on log throughput."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.cost_model.base import (Dataset, FeatureSchema, ModelError, as_matrix,
                                     group_sizes, read_model_file, schema_of, write_model_file)

GRADES = 30


class LGBMModel:
    """Example::

        >>> import numpy as np
        >>> from autotune.cost_model.base import Dataset
        >>> rng = np.random.default_rng(0); X = rng.random((40, 8))
        >>> ds = Dataset(); ds.add(X, list(1.0 + X[:, 0]), "t")
        >>> m = LGBMModel(rounds=20); m.fit(ds); m.predict(X[:2]).shape
        (2,)
    """
    kind = "lgbm"
    needs_graphs = False
    features: FeatureSchema | None = None  # what it was trained on (autotune.backends names it)

    def __init__(self, objective: str = "rank", rounds: int = 100, seed: int = 0) -> None:
        if objective not in ("rank", "regression"):
            raise ModelError(f"objective must be 'rank' or 'regression', got {objective!r}")
        self.objective, self.rounds, self.seed = objective, rounds, seed
        self.booster = None
        self.base: str | None = None  # a pretrained model (as text) that updates build on

    def _params(self) -> dict:
        p = {"learning_rate": 0.1, "num_leaves": 31, "min_data_in_leaf": 2, "feature_fraction": 0.9,
             "seed": self.seed, "deterministic": True, "num_threads": 1, "verbose": -1}
        if self.objective == "rank":
            p.update(objective="lambdarank", label_gain=list(range(GRADES + 1)), lambdarank_truncation_level=GRADES)
        else:
            p.update(objective="regression")
        return p

    def fit(self, data: Dataset) -> None:
        self.features = data.schema or self.features
        import lightgbm as lgb
        if len(data) < 2:
            raise ModelError("need at least 2 measurements to train a model")
        order, sizes = group_sizes(data.groups)
        X, y, w = data.X[order], data.y[order], data.row_weights()[order]
        if self.objective == "rank":
            ds = lgb.Dataset(X, label=np.rint(y * GRADES).astype(int), group=sizes, weight=w, free_raw_data=False)
        else:
            ds = lgb.Dataset(X, label=np.log(np.maximum(y, 1e-3)), weight=w, free_raw_data=False)
        if self.base is not None:  # pretrained: continue boosting on this task's data
            self.booster = lgb.train(self._params(), ds, num_boost_round=max(10, self.rounds // 4),
                                     init_model=lgb.Booster(model_str=self.base))
        else:
            self.booster = lgb.train(self._params(), ds, num_boost_round=self.rounds)

    update = fit

    def predict(self, X: "Dataset | np.ndarray") -> np.ndarray:
        X = as_matrix(X)
        if self.booster is None:
            raise ModelError("the lgbm model has not been trained (fit it or load a pretrained one)")
        return np.asarray(self.booster.predict(np.asarray(X, np.float32)))

    def save(self, path: str | Path) -> None:
        if self.booster is None:
            raise ModelError("nothing to save: the model has not been trained")
        write_model_file(path, self.kind, {"objective": self.objective, "rounds": self.rounds, "seed": self.seed},
                         self.booster.model_to_string(), features=self.features)

    @classmethod
    def load(cls, path: str | Path) -> "LGBMModel":
        import lightgbm as lgb
        d = read_model_file(path)
        m = cls(**d["params"])
        m.booster = lgb.Booster(model_str=d["model"])
        m.base = d["model"]
        m.features = schema_of(d)
        return m
