"""The cost-model interface and the training data it learns from.

A model scores feature vectors: higher means faster. Labels are throughputs normalised per
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

from autotune.cost_model.features import FEATURE_VERSION, config_features, feature_length
from autotune.cost_model.graph import config_graph
from autotune.errors import AutotuneError
from autotune.records import Record

MODEL_SCHEMA = 1


class ModelError(AutotuneError, ValueError):
    """A model file that cannot be used, or a model used before it was trained."""


@dataclass
class Dataset:
    """Features X, normalised throughput y in [0, 1], and the task of each row. task_weights: how
    much each task's rows count in training (a task not named counts 1)."""
    X: np.ndarray = field(default_factory=lambda: np.zeros((0, feature_length()), np.float32))
    y: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    groups: list[str] = field(default_factory=list)
    graphs: list[Any] | None = None  # ProgramGraph per row, for graph models
    task_weights: dict[str, float] = field(default_factory=dict)

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

    @classmethod
    def from_records(cls, records: Iterable[Record], *, max_per_task: int | None = None,
                     graphs: bool = False) -> "Dataset":
        """Lower every (validated) config of the records and extract its features (and graphs).
        Re-timings of finalists are left out: they time configs the log measured already."""
        by_task: dict[str, list[Record]] = {}
        for r in records:
            if not r.retimed:
                by_task.setdefault(r.key, []).append(r)
        ds = cls()
        for key in sorted(by_task):
            rs = by_task[key][:max_per_task] if max_per_task else by_task[key]
            task = rs[0].task()
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


def write_model_file(path: str | Path, kind: str, params: dict[str, Any], payload: str) -> None:
    Path(path).write_text(json.dumps({"schema": MODEL_SCHEMA, "kind": kind, "feature_version": FEATURE_VERSION,
                                      "feature_length": feature_length(), "params": params, "model": payload}))


def read_model_file(path: str | Path) -> dict[str, Any]:
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ModelError(f"no model file at {path}") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read model file {path}: {e}") from None
    if not isinstance(d, dict) or d.get("schema") != MODEL_SCHEMA:
        raise ModelError(f"{path} is not an autotune model file (schema {MODEL_SCHEMA})")
    if d.get("feature_version") != FEATURE_VERSION:
        raise ModelError(f"{path} was trained on features v{d.get('feature_version')}; this autotune extracts "
                         f"v{FEATURE_VERSION}: retrain it with `autotune train-model`")
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
