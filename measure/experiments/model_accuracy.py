"""model-accuracy: cost models scored on held-out tasks of the search-efficiency logs (Kendall
tau, top-1 and top-5 scores, training time), and optionally their learning curves within a task.

    python -m autotune.measure.experiments model-accuracy --workdir search-efficiency [--in-task 8,16,32,64]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from autotune.measure.experiments.common import ints, union

if TYPE_CHECKING:
    from autotune.cost_model import Dataset
    from autotune.task import Task


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", default="search-efficiency", help="the random_*.jsonl logs (search-efficiency "
                   "writes them)")
    p.add_argument("--long", type=int, default=128, help="records of each log used")
    p.add_argument("--models", default="random,roofline,xgb,lgbm,gnn", help="the models to compare")
    p.add_argument("--seed", type=int, default=0, help="seed of the models")
    p.add_argument("--in-task", default=None, help="also fit each model to N configs of a task's own log and "
                   "score it on the rest, for each N of e.g. 8,16,32,64")
    p.add_argument("--splits", type=int, default=10, help="--in-task: random splits per size")
    p.add_argument("--plot", default=None, help="--in-task: write the learning curves here (PNG)")


def run(args: argparse.Namespace) -> dict:
    """Cost models on held-out tasks: train on the random-search logs of the other tasks in
    --workdir (search-efficiency writes them), score the held-out task's configs, and report
    Kendall tau, top-1 and top-5 scores and the training time. Two splits: leave one task out
    (its other shape is in the training data) and leave one operator out (no config of that
    operator is seen). Models: random, roofline (trains on nothing: the same in both splits), xgb,
    lgbm, gnn (a model whose library is missing is
    skipped with a note); xgb and lgbm also as "<model>+similar", trained with the tasks most like
    the held-out one weighing most, as a prior is for the task it is used on
    (autotune.search.transfer). --in-task 8,16,32,64 adds learning curves within each task
    (see _in_task)."""
    from autotune.backends import dataset_from_records
    from autotune.cost_model import Dataset, ModelError, make_model
    from autotune.cost_model.evaluate import evaluate
    from autotune.search.transfer import similarity_weights
    from autotune.records import load_records
    files = sorted(Path(args.workdir).glob("random_*.jsonl"))
    if len(files) < 2:
        raise SystemExit(f"{args.workdir}: need the random_*.jsonl logs of at least 2 tasks "
                         "(run `python -m autotune.measure.experiments search-efficiency` first)")
    models = [m for m in args.models.split(",") if m]
    sizes = _sizes(args.in_task, args.splits) if args.in_task else []  # bad sizes fail before any training
    per_task: dict[str, tuple[str, Dataset, Dataset]] = {}  # key -> (op, features, graphs if a gnn is asked for)
    task_of: dict[str, Task] = {}
    for f in files:
        recs = [r for r in load_records(f) if not r.retimed][:args.long]
        if not recs:
            continue
        graphs = dataset_from_records(recs, graphs=True) if "gnn" in models else Dataset()
        per_task[recs[0].key] = (recs[0].op, dataset_from_records(recs), graphs)
        task_of[recs[0].key] = recs[0].task()
    variants = [(m, False) for m in models] + [(m, True) for m in models if m in ("xgb", "lgbm")]

    def parts(keys: Sequence[str], graph: bool) -> Dataset:
        return union([(k, per_task[k][2 if graph else 1]) for k in keys])

    out: dict = {"tasks": list(per_task), "splits": {}}
    for split in ("task", "operator"):
        rows: dict[str, dict] = {m + "+similar" * similar: {"tau": [], "top1": [], "top5": [], "train_s": []}
                                 for m, similar in variants}
        for held in per_task:
            op = per_task[held][0]
            train = [k for k in per_task if k != held and (split == "task" or per_task[k][0] != op)]
            if not train:
                continue
            for kind, similar in variants:
                name, graph = kind + "+similar" * similar, kind == "gnn"
                if name not in rows:
                    continue
                try:
                    model = make_model(kind, seed=args.seed, task=task_of[held])
                    data = parts(train, graph)
                    if similar:
                        data.task_weights = similarity_weights(data, task_of[held])
                    t0 = time.perf_counter()
                    model.fit(data)
                    train_s = time.perf_counter() - t0
                except ModelError as e:
                    print(f"{name}: skipped ({e})")
                    rows.pop(name)
                    continue
                res = evaluate(model, parts([held], graph))["tasks"].get(held)
                if res is None:
                    continue
                r = rows[name]
                r["tau"].append(res["kendall_tau"])
                r["top1"].append(res["top1"])
                r["top5"].append(res["top5"])
                r["train_s"].append(train_s)
                r.setdefault("per_task", {})[held] = {k: res[k] for k in ("kendall_tau", "top1", "top5")}
        summary = {}
        print(f"held out: one {split} at a time ({len(per_task)} tasks); medians over the held-out tasks")
        print(f"  {'model':<12} {'tau':>6} {'top1':>6} {'top5':>6} {'train s':>8}")
        for name, r in rows.items():
            if not r["tau"]:
                continue
            summary[name] = {"kendall_tau": statistics.median(r["tau"]), "top1": statistics.median(r["top1"]),
                             "top5": statistics.median(r["top5"]), "train_s": statistics.median(r["train_s"]),
                             "per_task": r.get("per_task", {})}
            m = summary[name]
            print(f"  {name:<12} {m['kendall_tau']:>6.3f} {m['top1']:>6.3f} {m['top5']:>6.3f} {m['train_s']:>8.2f}")
        out["splits"][split] = summary
    if sizes:
        out["in_task"] = _in_task(per_task, task_of, models, sizes, args.splits, args.seed)
        if args.plot:
            _plot_learning(out["in_task"], args.plot)
    return out


def _sizes(spec: str, splits: int = 1) -> list[int]:
    """The training-set sizes of --in-task, e.g. "8,16,32,64" (and a check of --splits)."""
    sizes = ints(spec, "--in-task", "training-set sizes", "8,16,32,64")
    if sizes[0] < 2:
        raise SystemExit(f"--in-task {spec!r}: a model needs at least 2 measurements to learn from")
    if splits < 1:
        raise SystemExit(f"--splits {splits}: --in-task needs at least 1 split per size")
    return sizes


def _in_task(per_task: dict, task_of: dict[str, Task], models: Sequence[str], sizes: Sequence[int], splits: int,
             seed: int) -> dict:
    """Each model fitted to n random configs of a task's own log and scored on the rest of it, for
    each n of `sizes` over `splits` random splits: how many of its own measurements a search needs
    before the model finds the top of that task. Medians over tasks of the means over splits."""
    import numpy as np
    from autotune.cost_model import ModelError, make_model
    from autotune.cost_model.evaluate import evaluate
    out: dict = {}
    for n in sizes:
        rows: dict[str, dict[str, dict[str, list[float]]]] = {m: {} for m in models}
        for key, (_, feats, graphs) in per_task.items():
            if n >= len(feats):
                raise SystemExit(f"--in-task: {key} has {len(feats)} logged configs; a split of {n} leaves "
                                 "none to score (give smaller sizes or a longer log)")
            for s in range(splits):
                order = np.random.default_rng(s).permutation(len(feats))
                for name in models:
                    data = graphs if name == "gnn" else feats
                    try:
                        model = make_model(name, seed=seed, task=task_of[key])
                        model.fit(_rows(data, order[:n]))
                    except ModelError:  # e.g. every sampled config failed: nothing to rank
                        continue
                    res = evaluate(model, _rows(data, order[n:]))["tasks"].get(key)
                    if res is not None:
                        for metric in ("kendall_tau", "top1", "top5"):
                            rows[name].setdefault(key, {}).setdefault(metric, []).append(res[metric])
        out[n] = {}
        print(f"in-task: fitted to {n} configs of the task's own log, scored on the rest ({splits} splits); "
              "medians over tasks")
        print(f"  {'model':<8} {'tau':>6} {'top1':>6} {'top5':>6}")
        for name, per in rows.items():
            if not per:
                continue
            means = {key: {m: statistics.mean(v) for m, v in metrics.items()} for key, metrics in per.items()}
            med = {m: statistics.median(v[m] for v in means.values()) for m in ("kendall_tau", "top1", "top5")}
            out[n][name] = {**med, "per_task": means}
            print(f"  {name:<8} {med['kendall_tau']:>6.3f} {med['top1']:>6.3f} {med['top5']:>6.3f}")
    return out


def _rows(data: "Dataset", index: Sequence[int]) -> "Dataset":
    """The rows `index` of a one-task dataset (labels renormalised to the best among them)."""
    from autotune.cost_model import Dataset
    sub = Dataset()
    seconds = data.seconds
    sub.add(data.X[index], [seconds[i] for i in index], data.groups[0],
            [data.graphs[i] for i in index] if data.graphs else None)
    return sub


def _plot_learning(in_task: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = sorted(in_task)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric, label in ((axes[0], "kendall_tau", "Kendall tau"), (axes[1], "top5", "top-5 score")):
        for name in sorted({m for n in sizes for m in in_task[n]}):
            pts = [(n, in_task[n][name][metric]) for n in sizes if name in in_task[n]]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("configs of the task measured (training set)")
        ax.set_ylabel(f"{label} on the rest (median over tasks)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


