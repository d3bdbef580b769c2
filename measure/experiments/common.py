"""Helpers shared by several experiments: task lists, held-out priors, log-file names, option parsing.

    >>> from autotune.measure.experiments.common import slug
    >>> slug("matmul|M=64,N=64,K=64|float32")
    'matmul_M_64_N_64_K_64_float32'
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from autotune.cost_model import Dataset
    from autotune.runner import MeasureInput
    from autotune.space import Config
    from autotune.task import Task

TASKS = ("matmul:512x512x512,matmul:256x384x640,conv2d:1x32x28x28x32x3x3x1x1,conv2d:1x64x14x14x64x3x3x1x1,"
         "batch_matmul:8x128x128x128,batch_matmul:4x256x64x256")


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """--op, --shape, --dtype, --threads: the one task an experiment measures."""
    p.add_argument("--op", default="matmul", help="operator (default: matmul)")
    p.add_argument("--shape", default="1024x1024x1024", help="shape, e.g. 1024x1024x1024")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None, help="kernel threads (default: AUTOTUNE_THREADS or all cores)")


def add_tasks_arguments(p: argparse.ArgumentParser) -> None:
    """--tasks, --dtype, --threads: the tasks an experiment compares searches on."""
    p.add_argument("--tasks", default=TASKS, help='the tasks, "op:shape,op:shape,..."')
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None, help="kernel threads (default: AUTOTUNE_THREADS or all cores)")


def tasks_of(args: argparse.Namespace) -> list[Task]:
    """The tasks of --tasks "op:shape,op:shape,...", in --dtype on --threads."""
    from autotune.task import Task
    return [Task.create(op, shape, args.dtype, args.threads) for op, shape in
            (spec.split(":") for spec in args.tasks.split(","))]


def sample_configs(task: Task, n: int, seed: int) -> list[Config]:
    """n distinct random configs of the task's space."""
    rng = random.Random(seed)
    space = task.space()
    cfgs: list[Config] = []
    while len(cfgs) < n:
        c = space.sample(rng)
        if c not in cfgs:
            cfgs.append(c)
    return cfgs


def add_random_configs_arguments(p: argparse.ArgumentParser, trials_help: str, cache_help: str) -> None:
    """The task, --trials random configs of it (--seed) and --cache-dir (throughput, ray-scaling)."""
    add_task_arguments(p)
    p.add_argument("--trials", type=int, default=16, help=trials_help)
    p.add_argument("--seed", type=int, default=0, help="seed of the random configs")
    p.add_argument("--cache-dir", default=None, help=f"where the fresh compile cache of {cache_help} is made "
                   "(a new directory inside it, removed after; default: the system's temporary directory)")


def random_inputs(args: argparse.Namespace) -> "tuple[Task, list[MeasureInput]]":
    """The task of the arguments and --trials distinct random configs of it, as measure inputs."""
    from autotune.runner import MeasureInput
    from autotune.task import Task
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    return task, [MeasureInput(task, c) for c in sample_configs(task, args.trials, args.seed)]


def slug(key: str) -> str:
    """A task key as a file-name part."""
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in key)


def ints(spec: str, flag: str, what: str, example: str) -> list[int]:
    """The distinct integers of a comma-separated option value, sorted; a clear exit if one is not a number."""
    try:
        return sorted({int(n) for n in spec.split(",")})
    except ValueError:
        raise SystemExit(f"{flag} {spec!r}: give {what} separated by commas, e.g. {example}") from None


def corpus(spec: str | None, tasks: Sequence[Task], graphs: bool = False) -> list[tuple[str, Dataset]]:
    """Per-task datasets of the --corpus logs (files, or directories of *.jsonl): other shapes and
    operators that every pretrained model learns from too. A benchmark task in them is an error: a
    pretrained model must never have seen the task it is tested on."""
    from autotune.backends import dataset_from_records
    from autotune.cost_model import Dataset
    from autotune.records import load_records
    if not spec:
        return []
    paths: list[Path] = []
    for item in spec.split(","):
        p = Path(item)
        if not p.exists():
            raise SystemExit(f"--corpus: {item} is neither a tuning log nor a directory of them")
        found = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        if not found:
            raise SystemExit(f"--corpus: {item} holds no tuning logs (*.jsonl)")
        paths += found
    held = {t.key() for t in tasks}
    by_key: dict[str, list] = {}
    for path in paths:
        for r in load_records(path):
            if r.key in held:
                raise SystemExit(f"--corpus: {path} holds {r.key}, one of the benchmark's tasks; a pretrained "
                                 "model must not learn from the task it is tested on (leave that log out)")
            by_key.setdefault(r.key, []).append(r)
    return [(key, dataset_from_records(recs, graphs=graphs)) for key, recs in by_key.items()]


def save_held_out(kind: str, parts: Sequence[tuple[str, Dataset]], held: str, path: Path, seed: int = 0) -> str:
    """Train a `kind` model on every (task key, dataset) part except task `held`'s, save it to
    `path` with its training set (see autotune.search.transfer), and return the path (a
    prior for tuning the held-out task)."""
    from autotune.cost_model import make_model
    from autotune.search.transfer import save_prior
    model = make_model(kind, seed=seed)
    data = union([(key, ds) for key, ds in parts if key != held])
    model.fit(data)
    save_prior(model, data, path)
    return str(path)


def union(parts: Sequence[tuple[str, Dataset]]) -> Dataset:
    """One training set from per-task datasets (features extracted once per task)."""
    from autotune.cost_model import Dataset
    d = Dataset()
    for key, src in parts:
        d.add(src.X, src.seconds, key, src.graphs)
    return d
