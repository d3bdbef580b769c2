"""Scores of a model on a dataset: Kendall tau, top-k and APE per task, then the median."""
from __future__ import annotations

import math
import statistics

import numpy as np

from autotune.cost_model.base import Dataset
from autotune.cost_model.metrics import ape, kendall_tau, top_k_score


def evaluate(model, data: Dataset, scores: np.ndarray | None = None) -> dict:  # type: ignore[no-untyped-def]
    """Per-task Kendall tau, top-1 and top-5 scores and APE, with their medians (of the model's
    predictions, or of `scores` made for data's rows some other way)."""
    per: dict[str, dict[str, float]] = {}
    if scores is None:
        scores = np.asarray(model.predict(data)) if len(data) else np.zeros(0)
    groups = np.array(data.groups, dtype=object)
    for g in sorted(set(data.groups)):
        m = groups == g
        y = data.y[m]
        secs = np.where(y > 0, 1.0 / np.maximum(y, 1e-300), math.inf)  # relative seconds (best = 1)
        if np.isfinite(secs).sum() < 2:
            continue
        s = scores[m]
        per[g] = {"n": int(m.sum()), "kendall_tau": kendall_tau(s, secs), "top1": top_k_score(s, secs, 1),
                  "top5": top_k_score(s, secs, 5), "ape": ape(s, secs)}
    med = {k: statistics.median(v[k] for v in per.values()) for k in ("kendall_tau", "top1", "top5", "ape")} if per else {}
    return {"tasks": per, "median": med}
