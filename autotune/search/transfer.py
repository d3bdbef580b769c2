"""Transfer to a new task: a prior trained on other tasks' logs, refitted so that the training
tasks most like the new one count most.

A model file written by `save_prior` carries its training set: each task's features and times.
`prior_for(path, task)` refits a model of the file's kind and parameters on that set, each
training task weighted exp(-(d - d_nearest) / temperature). d is the distance between the
task's profile and the new task's, in standard deviations of the training features; a profile
is the mean feature vector of random configs of a task (at the new task's thread count), so
nothing of the new task has to be measured first. The nearest task weighs 1. A file without a
training set, or of a model that learns from program graphs (gnn), is used as it was saved.

Example::

    >>> save_prior(model, data, "prior.json")       # doctest: +SKIP
    >>> prior = prior_for("prior.json", task)       # doctest: +SKIP
    >>> prior.predict(features)                     # doctest: +SKIP
"""
from __future__ import annotations

import base64
import functools
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np

from autotune.cost_model import CostModel, Dataset, ModelError, load_model
from autotune.cost_model.base import read_model_file
from autotune.backends import check_model, config_features
from autotune.errors import AutotuneError
from autotune.task import Task

TEMPERATURE = 2.0
PROFILE_SAMPLES = 128


@functools.lru_cache(maxsize=256)
def task_profile(task: Task, samples: int = PROFILE_SAMPLES, seed: int = 0) -> np.ndarray:
    """The mean feature vector of `samples` random configs of the task (read-only). Cached: every
    prior refitted in a process profiles the same training tasks, and lowering is the cost."""
    rows = []
    for cfg in task.space().sample_new(random.Random(seed), set(), samples):
        try:
            rows.append(config_features(task, cfg))
        except AutotuneError:  # a config that does not lower says nothing about the task
            continue
    if not rows:
        raise ModelError(f"{task.key()}: none of {samples} random configs lowers, so the task has no profile")
    profile = np.mean(rows, axis=0)
    profile.setflags(write=False)
    return profile


def similarity_weights(data: Dataset, task: Task, *, temperature: float = TEMPERATURE) -> dict[str, float]:
    """A training weight for each task of `data`: exp(-(d - d_nearest) / temperature), d the
    distance of its profile from `task`'s in standard deviations of data's features."""
    if not temperature > 0:
        raise ModelError(f"temperature must be > 0, got {temperature!r}")
    scale = data.X.std(axis=0).astype(np.float64)
    scale[scale == 0] = 1.0
    target = task_profile(task) / scale
    dist, unknown = {}, []
    for key in sorted(set(data.groups)):
        try:
            source = Task.from_key(key, task.threads)
        except AutotuneError:  # e.g. a user's own op: its rows still train, at the least weight
            unknown.append(key)
            continue
        dist[key] = float(np.linalg.norm(task_profile(source) / scale - target))
    if not dist:
        raise ModelError("none of the prior's training tasks can be rebuilt here (user ops whose definitions "
                         "are not known in this process): train the prior on template operators' logs")
    nearest, farthest = min(dist.values()), max(dist.values())
    weights = {key: math.exp(-(d - nearest) / temperature) for key, d in dist.items()}
    return {**weights, **{key: math.exp(-(farthest - nearest) / temperature) for key in unknown}}


def save_prior(model: CostModel, data: Dataset, path: str | Path) -> None:
    """Save a model trained on `data`, with data's features and times, so that `prior_for` can
    refit it for each task it is used on (a graph model is saved as it is)."""
    model.save(path)
    if model.needs_graphs:
        return
    keys = sorted(set(data.groups))
    index = {k: i for i, k in enumerate(keys)}
    body = json.loads(Path(path).read_text())
    body["training"] = {
        "tasks": keys, "task": [index[g] for g in data.groups],
        "seconds": [float(s) if math.isfinite(s) else None for s in data.seconds],
        "features": base64.b64encode(np.ascontiguousarray(data.X, "<f4").tobytes()).decode()}
    Path(path).write_text(json.dumps(body))


def _training_set(body: dict[str, Any], path: str | Path) -> Dataset:
    try:
        keys, rows, seconds = body["tasks"], body["task"], body["seconds"]
        X = np.frombuffer(base64.b64decode(body["features"]), "<f4").reshape(len(rows), -1)
        data = Dataset()
        for i, key in enumerate(keys):
            sel = [j for j, t in enumerate(rows) if t == i]
            data.add(X[sel], [math.inf if seconds[j] is None else float(seconds[j]) for j in sel], key)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ModelError(f"{path}: its training set is damaged ({type(e).__name__}: {e}); "
                         f"save the prior again with `autotune train-model`") from None
    return data


def prior_for(path: str | Path, task: Task, *, temperature: float = TEMPERATURE) -> CostModel:
    """The saved model at `path`, refitted for `task` on its training set weighted by similarity
    to `task` (see the module docstring); as saved if the file carries no training set."""
    body = read_model_file(path)
    model = load_model(path)
    check_model(model, task, where=str(path))
    if "training" not in body or model.needs_graphs:
        return model
    data = _training_set(body["training"], path)
    data.schema = getattr(model, "features", None)
    data.task_weights = similarity_weights(data, task, temperature=temperature)
    refitted = type(model)(**body["params"])  # type: ignore[call-arg]
    refitted.fit(data)
    return refitted
