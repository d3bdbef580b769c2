"""The analytical baseline for TPU tiles: a roofline (FLOPs over peak vs bytes over bandwidth,
counting tile re-fetches but no padding, DMA granularity, pipeline or per-step detail).
It needs no training; it reads the roofline columns of the TPU features.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.cost_model.base import Dataset, as_matrix, read_model_file, write_model_file
from autotune.backends.tpu.features import ROOFLINE_COLS, STEPS_COL


class AnalyticalModel:
    """Example::

        >>> import numpy as np
        >>> X = np.zeros((2, 30)); X[0, 28] = 3; X[1, 29] = 5
        >>> [round(float(v), 3) for v in AnalyticalModel().predict(X)]
        [-3.0, -5.0]
    """
    kind = "analytical"
    needs_graphs = False

    def __init__(self, roofline_cols: tuple[int, int] = ROOFLINE_COLS, steps_col: int = STEPS_COL) -> None:
        """roofline_cols, steps_col: where the features hold log2 compute and memory seconds and
        log2 grid steps (the template features' by default; HLO_ROOFLINE_COLS for HLO kernels)."""
        self.cols, self.steps_col = roofline_cols, steps_col

    def fit(self, data: Dataset) -> None:
        pass

    update = fit

    def predict(self, X: "Dataset | np.ndarray") -> np.ndarray:
        X = as_matrix(X)
        c, m = self.cols
        est = np.maximum(X[:, c], X[:, m]).astype(np.float64)  # log2 seconds
        steps = X[:, self.steps_col].astype(np.float64)        # log2 grid steps
        return -(est + 1e-6 * steps)  # on a tie, fewer (larger) tiles, as a compiler would pick

    def save(self, path: str | Path) -> None:
        write_model_file(path, self.kind, {}, "")

    @classmethod
    def load(cls, path: str | Path) -> "AnalyticalModel":
        read_model_file(path)
        return cls()
