"""XGBoost cost model: pairwise ranking within each task (default) or regression on log throughput."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.cost_model.base import (Dataset, FeatureSchema, ModelError, as_matrix,
                                     group_sizes, read_model_file, schema_of, write_model_file)


class XGBModel:
    """Example::

        >>> import numpy as np
        >>> from autotune.cost_model.base import Dataset
        >>> rng = np.random.default_rng(0); X = rng.random((40, 8))
        >>> ds = Dataset(); ds.add(X, list(1.0 + X[:, 0]), "t")
        >>> m = XGBModel(rounds=20); m.fit(ds); m.predict(X[:2]).shape
        (2,)
    """
    kind = "xgb"
    needs_graphs = False
    features: FeatureSchema | None = None  # what it was trained on (autotune.backends names it)

    def __init__(self, objective: str = "rank", rounds: int = 100, seed: int = 0) -> None:
        if objective not in ("rank", "regression"):
            raise ModelError(f"objective must be 'rank' or 'regression', got {objective!r}")
        self.objective, self.rounds, self.seed = objective, rounds, seed
        self.booster = None
        self.base = None  # a pretrained booster that updates build on

    def _params(self) -> dict:
        obj = "rank:pairwise" if self.objective == "rank" else "reg:squarederror"
        return {"objective": obj, "eta": 0.2, "max_depth": 6, "min_child_weight": 1, "subsample": 0.9,
                "seed": self.seed, "nthread": 1, "verbosity": 0}

    def fit(self, data: Dataset) -> None:
        self.features = data.schema or self.features
        import xgboost as xgb
        if len(data) < 2:
            raise ModelError("need at least 2 measurements to train a model")
        order, sizes = group_sizes(data.groups)
        X, y, w = data.X[order], data.y[order], data.row_weights()[order]
        label = y if self.objective == "rank" else np.log(np.maximum(y, 1e-3))
        d = xgb.DMatrix(X, label=label)
        if self.objective == "rank":
            d.set_group(sizes)
            d.set_weight(w[np.cumsum([0] + sizes[:-1])])  # ranking weighs whole groups: one weight each
        else:
            d.set_weight(w)
        if self.base is not None:  # pretrained: add trees fitted to this task on top of it
            self.booster = xgb.train(self._params(), d, num_boost_round=max(10, self.rounds // 4),
                                     xgb_model=self.base.copy())
        else:
            self.booster = xgb.train(self._params(), d, num_boost_round=self.rounds)

    update = fit  # refitting on everything is fast enough per batch

    def predict(self, X: "Dataset | np.ndarray") -> np.ndarray:
        X = as_matrix(X)
        import xgboost as xgb
        if self.booster is None:
            raise ModelError("the xgb model has not been trained (fit it or load a pretrained one)")
        return self.booster.predict(xgb.DMatrix(np.asarray(X, np.float32)))

    def save(self, path: str | Path) -> None:
        if self.booster is None:
            raise ModelError("nothing to save: the model has not been trained")
        raw = self.booster.save_raw("json").decode()
        write_model_file(path, self.kind, {"objective": self.objective, "rounds": self.rounds, "seed": self.seed}, raw, features=self.features)

    @classmethod
    def load(cls, path: str | Path) -> "XGBModel":
        import xgboost as xgb
        d = read_model_file(path)
        m = cls(**d["params"])
        m.booster = xgb.Booster()
        m.booster.load_model(bytearray(d["model"].encode()))
        m.base = m.booster.copy()
        m.features = schema_of(d)
        return m
