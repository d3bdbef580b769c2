"""How good a cost model's ranking is, on measured configs of one task.

    kendall_tau(scores, seconds)      rank correlation of scores with speed (1 = perfect)
    top_k_score(scores, seconds, k)   best time over the best time in the model's top k (1 = found it)
    ape(scores, seconds)              100 * |t(chosen) - t(best)| / t(best) of the top-scored config
    mape(pred_seconds, seconds)       mean absolute percentage error of predicted runtimes
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _ok(seconds: Sequence[float]) -> np.ndarray:
    return np.array([math.isfinite(s) for s in seconds])


def kendall_tau(scores: Sequence[float], seconds: Sequence[float]) -> float:
    from scipy.stats import kendalltau
    ok = _ok(seconds)
    s, t = np.asarray(scores)[ok], np.asarray(seconds)[ok]
    if len(s) < 2:
        return float("nan")
    tau = kendalltau(s, -t).statistic
    return float(tau) if tau == tau else 0.0


def top_k_score(scores: Sequence[float], seconds: Sequence[float], k: int) -> float:
    t = np.asarray(seconds, np.float64)
    best = np.min(t)
    top = np.argsort(-np.asarray(scores))[:k]
    chosen = np.min(t[top])
    return float(best / chosen) if math.isfinite(chosen) else 0.0


def ape(scores: Sequence[float], seconds: Sequence[float]) -> float:
    t = np.asarray(seconds, np.float64)
    best = np.min(t)
    chosen = t[int(np.argmax(scores))]
    return float(100.0 * abs(chosen - best) / best) if math.isfinite(chosen) else float("inf")


def mape(pred_seconds: Sequence[float], seconds: Sequence[float]) -> float:
    p, t = np.asarray(pred_seconds, np.float64), np.asarray(seconds, np.float64)
    ok = np.isfinite(t)
    return float(100.0 * np.mean(np.abs(p[ok] - t[ok]) / t[ok]))
