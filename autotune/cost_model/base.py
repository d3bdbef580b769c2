"""The cost-model interface and the training data it learns from.

A model scores feature vectors: higher means faster. The features come from a backend
(autotune.backends: the CPU's loop-nest features, the TPU emulator's tile features); a Dataset and
a saved model name theirs (FeatureSchema), and a model is only used on features of its schema. Labels are throughputs normalised per
task (best seconds / seconds, so the best config of each task is 1 and failures are 0), which
makes tasks of different sizes comparable and lets a model trained on some shapes rank others.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from autotune.errors import AutotuneError

MODEL_SCHEMA = 1


class ModelError(AutotuneError, ValueError):
    """A model file that cannot be used, or a model used before it was trained."""


@dataclass(frozen=True)
class FeatureSchema:
    """What the rows of a Dataset (and a model trained on them) are: the backend that extracted
    them, its feature version and the row length.

        >>> FeatureSchema("cpu", 2, 130).describe()
        'cpu features v2 (130 columns)'
    """
    backend: str
    version: int
    length: int

    def describe(self) -> str:
        return f"{self.backend} features v{self.version} ({self.length} columns)"

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "version": self.version, "length": self.length}


def schema_of(d: dict[str, Any]) -> FeatureSchema | None:
    """The FeatureSchema a model file names (a file from before schemas were named: the CPU's)."""
    f = d.get("features")
    try:
        if isinstance(f, dict):
            return FeatureSchema(str(f["backend"]), int(f["version"]), int(f["length"]))
        if d.get("feature_version") is not None:
            return FeatureSchema("cpu", int(d["feature_version"]), int(d.get("feature_length") or 0))
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"a model file names its features as {f!r}: expected backend, version and length") from None
    return None


@dataclass
class Dataset:
    """Features X, normalised throughput y in [0, 1], and the task of each row. task_weights: how
    much each task's rows count in training (a task not named counts 1); schema: what the features
    are (autotune.backends.dataset_from_records sets it)."""
    X: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    y: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    groups: list[str] = field(default_factory=list)
    graphs: list[Any] | None = None  # ProgramGraph per row, for graph models
    task_weights: dict[str, float] = field(default_factory=dict)
    schema: FeatureSchema | None = None

    def __len__(self) -> int:
        return len(self.y) if len(self.y) else len(self.X)

    def add(self, X: np.ndarray, seconds: Sequence[float], group: str, graphs: Sequence[Any] | None = None) -> None:
        """Rows of one task; seconds are inf for failed configs."""
        X = np.asarray(X, np.float32)
        self.X = np.vstack([self.X.reshape(-1, X.shape[1]) if len(self.X) == 0 else self.X, X]) if len(X) else self.X
        self._seconds = getattr(self, "_seconds", []) + list(seconds)
        self.groups += [group] * len(seconds)
        if graphs is not None:
            self.graphs = (self.graphs or []) + list(graphs)
        self._relabel()

    def row_weights(self) -> np.ndarray:
        """The training weight of each row: its task's."""
        return np.array([self.task_weights.get(g, 1.0) for g in self.groups], np.float64)

    @property
    def seconds(self) -> list[float]:
        return list(getattr(self, "_seconds", []))

    def _relabel(self) -> None:
        best: dict[str, float] = {}
        for g, s in zip(self.groups, self._seconds):
            best[g] = min(best.get(g, math.inf), s)
        self.y = np.array([0.0 if not math.isfinite(s) or not math.isfinite(best[g]) else best[g] / s
                           for g, s in zip(self.groups, self._seconds)])


def as_matrix(data: "Dataset | np.ndarray") -> np.ndarray:
    """The feature matrix of a Dataset (or the array itself)."""
    return data.X if isinstance(data, Dataset) else np.asarray(data, np.float32)


@runtime_checkable
class CostModel(Protocol):
    """fit/update learn from a Dataset; predict scores features (higher = faster); save/load JSON.
    needs_graphs: whether it scores program graphs (Dataset.graphs) rather than feature rows alone."""
    kind: str
    needs_graphs: bool

    def fit(self, data: Dataset) -> None: ...

    def update(self, data: Dataset) -> None: ...

    def predict(self, data: "Dataset | np.ndarray") -> np.ndarray: ...

    def save(self, path: str | Path) -> None: ...


def write_model_file(path: str | Path, kind: str, params: dict[str, Any], payload: str,
                     features: FeatureSchema | None = None) -> None:
    """Save a model: its kind, parameters, payload and the features it was trained on."""
    body: dict[str, Any] = {"schema": MODEL_SCHEMA, "kind": kind, "params": params, "model": payload}
    if features is not None:
        body |= {"features": features.to_json(), "feature_version": features.version, "feature_length": features.length}
    Path(path).write_text(json.dumps(body))


def read_model_file(path: str | Path) -> dict[str, Any]:
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ModelError(f"no model file at {path}") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read model file {path}: {e}") from None
    if not isinstance(d, dict) or d.get("schema") != MODEL_SCHEMA:
        raise ModelError(f"{path} is not an autotune model file (schema {MODEL_SCHEMA})")
    try:
        schema_of(d)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
    return d


def group_sizes(groups: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """An order that makes each group contiguous, and the group sizes in that order."""
    order = np.argsort(np.array(groups, dtype=object), kind="stable")
    sizes: list[int] = []
    last = None
    for i in order:
        if groups[i] != last:
            sizes.append(0)
            last = groups[i]
        sizes[-1] += 1
    return order, sizes
