"""The cost-model commands: `autotune train-model` (fit a model to logs and save it) and
`autotune evaluate-model` (score a saved model on a held-out log, per task, then the median).

    >>> from autotune.model_commands import train_model      # doctest: +SKIP
    >>> train_model(["a.jsonl"], "xgb", "rank", "prior.json")  # doctest: +SKIP
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from autotune.backends import dataset_from_records
from autotune.cost_model import Dataset, load_model, make_model
from autotune.cost_model.base import read_model_file
from autotune.cost_model.evaluate import evaluate
from autotune.search.transfer import prior_for, save_prior
from autotune.errors import AutotuneError
from autotune.records import load_records


def train_model(logs: Sequence[str], kind: str, objective: str, out: str) -> int:
    records = [r for p in logs for r in load_records(p)]
    model = make_model(kind, objective=objective)
    t0 = time.perf_counter()
    data = dataset_from_records(records, graphs=model.needs_graphs)
    t1 = time.perf_counter()
    if len(data) < 2:
        raise AutotuneError("the logs hold fewer than 2 usable measurements: nothing to learn from")
    model.fit(data)
    t2 = time.perf_counter()
    save_prior(model, data, out)
    print(f"trained {kind} ({objective}) on {len(data)} measurements of {len(set(data.groups))} tasks: "
          f"features {t1 - t0:.1f} s, training {t2 - t1:.2f} s; wrote {out}")
    return 0


def evaluate_model(model_path: str, log: str, plot: str | None, json_out: str | None) -> int:
    """Scores of a saved model on a log. A prior that carries its training set is refitted for
    each task of the log first, as tuning that task would (autotune.search.transfer)."""
    model = load_model(model_path)
    records = load_records(log)
    data = dataset_from_records(records, graphs=model.needs_graphs)
    if "training" not in read_model_file(model_path) or model.needs_graphs:
        scores = np.asarray(model.predict(data)) if len(data) else np.zeros(0)
    else:
        scores, groups = np.zeros(len(data)), np.array(data.groups, dtype=object)
        tasks = {r.key: r for r in reversed(records)}
        for key in sorted(set(data.groups)):
            rows = groups == key
            scores[rows] = prior_for(model_path, tasks[key].task()).predict(data.X[rows])
        print(f"{model_path}: refitted for each task of the log, the tasks of its training set most like it "
              "weighing most (as tuning it would)")
    res = evaluate(model, data, scores)
    print(f"{'task':<44} {'n':>5} {'tau':>6} {'top1':>6} {'top5':>6} {'APE%':>7}")
    for g, v in res["tasks"].items():
        print(f"{g:<44} {v['n']:>5} {v['kendall_tau']:>6.3f} {v['top1']:>6.3f} {v['top5']:>6.3f} {v['ape']:>7.2f}")
    if res["median"]:
        m = res["median"]
        print(f"{'median':<44} {'':>5} {m['kendall_tau']:>6.3f} {m['top1']:>6.3f} {m['top5']:>6.3f} {m['ape']:>7.2f}")
    if plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 5))
        ax.scatter(scores, data.y, s=8, alpha=0.6)
        ax.set_xlabel(f"{model.kind} score")
        ax.set_ylabel("measured throughput / best of task")
        ax.set_title(f"{Path(model_path).name} on {Path(log).name}")
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        plt.close(fig)
        print(f"wrote {plot}")
    if json_out:
        Path(json_out).write_text(json.dumps(res, indent=2) + "\n")
    return 0
