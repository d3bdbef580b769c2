"""spread: re-time one kernel in N fresh processes, one after another, and report the relative
spread (max/min) across processes of their median times and of their minimum times.

    python -m autotune.measure.experiments spread --op matmul --shape 1024x1024x1024 --threads 2 --processes 10

Each process takes 15 samples, 100 ms apart. --retake "0,15" alternates the processes
between those budgets for retaking disturbed samples (CPU time stolen, threads kept waiting for
a CPU), and reports each (an A/B in the same run).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

from autotune.environment import worker_env
from autotune.measure.experiments.common import add_task_arguments
from autotune.measure.timing import TimingProtocol, time_callable

PROTOCOL = TimingProtocol(warmup=2, number=1, repeat=15, min_repeat_ms=50, pause_ms=100, retake=15)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_task_arguments(p)
    p.add_argument("--config", default=None, help="the config as JSON (default: the first preset, else a random "
                   "config); knobs it leaves out come from that default")
    p.add_argument("--processes", type=int, default=10, help="fresh processes per retake budget")
    p.add_argument("--retake", default=str(PROTOCOL.retake),
                   help="budgets for retaking stolen-from samples, e.g. 0,15 (alternated)")
    p.add_argument("--cache-dir", default=None, help="the compile cache the processes build from "
                   "(default: AUTOTUNE_CACHE_DIR or ~/.cache/autotune)")


def run(args: argparse.Namespace) -> dict:
    """Re-time one config in --processes fresh processes, one after another, and report the
    relative spread (max/min) of their medians and of their fastest samples."""
    from autotune.task import Task
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    if args.config:
        cfg = task.space().validate({**task.default_config(), **json.loads(args.config)})
    else:
        cfg = task.default_config()
    env = worker_env()
    if args.cache_dir:
        env["AUTOTUNE_CACHE_DIR"] = args.cache_dir
    budgets = [int(b) for b in str(args.retake).split(",")]
    runs: dict[int, list[dict]] = {b: [] for b in budgets}
    for i in range(args.processes * len(budgets)):
        b = budgets[i % len(budgets)]
        out = subprocess.run([sys.executable, "-m", "autotune.measure.experiments.spread", "--op", args.op, "--shape",
                              args.shape, "--dtype", args.dtype, "--threads", str(task.threads), "--config",
                              json.dumps(cfg.to_json()), "--retake", str(b)],
                             env=env, capture_output=True, text=True, check=True)
        runs[b].append(json.loads(out.stdout.strip().splitlines()[-1]))
        time.sleep(0.5)
    fl = task.flops()
    res: dict = {"task": task.key(), "threads": task.threads, "config": cfg.to_json(), "processes": args.processes,
                 "by_retake_budget": {}}
    for b, recs in runs.items():
        medians, mins = [r["median"] for r in recs], [r["min"] for r in recs]
        gf = [fl / m / 1e9 for m in medians]
        row = {"gflops": gf, "min_gflops": min(gf), "max_gflops": max(gf), "spread": max(medians) / min(medians),
               "spread_of_min": max(mins) / min(mins), "retaken": sum(r["retaken"] for r in recs),
               "stolen_kept": sum(r["stolen"] for r in recs)}
        res["by_retake_budget"][b] = row
        print(f"{task.key()} threads={task.threads}, retake budget {b}: {args.processes} processes, GFLOP/s (of "
              f"each median) min {min(gf):.1f} max {max(gf):.1f}, relative spread (max/min) of medians "
              f"{row['spread']:.3f}, of per-process minimum times {row['spread_of_min']:.3f}; samples retaken "
              f"{row['retaken']}, kept though stolen from {row['stolen_kept']}")
    res.update(res["by_retake_budget"][budgets[0]])
    return res


def once(argv: list[str]) -> None:
    """One process of the experiment: build (from the disk cache), check and time one config;
    print seconds as JSON."""
    from autotune.task import Task
    from autotune.measure.check import check_output, poisoned
    p = argparse.ArgumentParser(prog="python -m autotune.measure.experiments.spread")
    add_task_arguments(p)
    p.add_argument("--config", required=True)
    p.add_argument("--retake", type=int, required=True)
    args = p.parse_args(argv)
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    k = task.build(json.loads(args.config))
    ins = task.inputs(seed=0)
    out = poisoned(k.output_shape, task.dtype)
    k(*ins, out=out)
    chk = check_output(out, task.reference(ins), task.dtype)
    if not chk.ok:
        raise SystemExit(f"wrong answer: {chk.message}")
    t = time_callable(k.bind(*ins), dataclasses.replace(PROTOCOL, retake=args.retake))
    print(json.dumps({"median": t.median, "min": t.min, "spread": t.spread, "compile_s": k.compile_seconds,
                      "retaken": t.retaken, "stolen": t.stolen}))


if __name__ == "__main__":  # a child process of run()
    once(sys.argv[1:])
