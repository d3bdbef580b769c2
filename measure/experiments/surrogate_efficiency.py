"""surrogate-efficiency: search-efficiency on surrogates fitted to its logs, over many seeds and
without compiling or timing anything.

    python -m autotune.measure.experiments surrogate-efficiency --workdir search-efficiency --seeds 8

Each task's landscape is fitted to every log in --workdir (measure.experiments.surrogate); the searches of
--compare run --seeds times on it with log-normal noise. The counts rank searches; they do not
replace the real experiment.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from autotune.measure.experiments.common import add_tasks_arguments, corpus, save_held_out, slug, tasks_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_tasks_arguments(p)
    p.add_argument("--workdir", default="search-efficiency", help="the logs the surrogates are fitted to "
                   "(search-efficiency writes them)")
    p.add_argument("--compare", default="random,evolutionary,xgb,lgbm", help="the searches to compare (strategy "
                   "names, cost-model names for guided search, or e.g. xgb+pretrained for guided search from that "
                   "model trained on the other tasks' logs)")
    p.add_argument("--seeds", type=int, default=1, help="runs per search and task (seeds 1..N)")
    p.add_argument("--trials", type=int, default=16, help="trials of each search")
    p.add_argument("--batch", type=int, default=4, help="configs per round of a guided search")
    p.add_argument("--noise", type=float, default=0.1, help="sigma of the log-normal noise on every surrogate "
                   "measurement")
    p.add_argument("--long", type=int, default=128, help="trials of the random search that sets the target")
    p.add_argument("--seed", type=int, default=0, help="seed of the pretrained models")
    p.add_argument("--corpus", default=None, help="more tuning logs (files or directories, comma-separated) of "
                   "other shapes that the pretrained models learn from too; none may hold a benchmark task")


def run(args: argparse.Namespace) -> dict:
    """search-efficiency on surrogates: each task's landscape is fitted to every log in --workdir
    (measure.experiments.surrogate), and the searches of --compare run --seeds times on it, with log-normal
    noise of sigma --noise per measurement. Nothing is compiled or timed, so strategies can be
    compared over many seeds; the counts rank searches, they do not replace the real benchmark.
    A search "<model>+pretrained" (e.g. xgb+pretrained) starts from that model trained on the
    logged measurements of the other tasks (the real ones, not the surrogates') and of --corpus."""
    from autotune.backends import dataset_from_records
    from autotune.cost_model import Dataset, make_model
    from autotune.records import load_records
    from autotune.measure.experiments.surrogate import Surrogate, compare
    records = [r for path in sorted(Path(args.workdir).glob("*.jsonl")) for r in load_records(path)]
    names = args.compare.split(",")
    kinds = sorted({n.partition("+")[0] for n in names if n.endswith("+pretrained")})
    if len(kinds) > 1:
        raise SystemExit(f"--compare {args.compare!r}: pretrained searches of one model kind at a time")
    tasks = tasks_of(args)
    graphs = bool(kinds) and make_model(kinds[0]).needs_graphs
    feats = [(t.key(), dataset_from_records((r for r in records if r.key == t.key()), graphs=graphs))
             for t in tasks] + corpus(args.corpus, tasks, graphs) if kinds else []
    out: dict = {"noise": args.noise, "seeds": args.seeds, "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            pre = save_held_out(kinds[0], feats, task.key(), Path(tmp) / f"{slug(task.key())}.json",
                                seed=args.seed) if kinds else None
            row = compare(Surrogate.fit(task, records), names, seeds=range(1, args.seeds + 1), trials=args.trials,
                          batch=args.batch, noise=args.noise, long=args.long, pretrained=pre)
            out["tasks"][task.key()] = row
            print(f"{task.key():<44} random {row['random_expected']:6.1f} expected; " + "; ".join(
                f"{n} {r['mean_censored']:.1f} {r['runs']}" for n, r in row["searches"].items()), flush=True)
    for name in names:
        saving = statistics.median(r["searches"][name]["saving_vs_random"] for r in out["tasks"].values())
        out[f"{name}_median_saving"] = saving
        print(f"{name}: median over tasks of trials saved vs random (a miss counts as {args.trials + 1}): "
              f"{saving:.2f}")
    return out
