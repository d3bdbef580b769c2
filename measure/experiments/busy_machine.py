"""busy-machine: a tuning run on a busy machine against one on a quiet machine, before and after `autotune retime`.

    python -m autotune.measure.experiments busy-machine --op matmul --shape 512x512x512 --threads 2 --trials 24 --busy-seconds 480

Each step does what a user's command would (the busy run is that command, in a process of its own):
  1. quiet: `autotune tune OP --shape S --threads T --trials N --log quiet.jsonl`, nothing else running;
  2. busy: `nice -n 19 autotune tune ... --trials 10000 --timeout BUSY --log busy.jsonl` (--nice) while
     --hogs busy processes (default: one per core, at the default priority) hold the cores: as many
     trials as BUSY seconds allow, with a compile cache of its own (nothing of the quiet run's);
     the log is copied as it stands (busy-before.jsonl);
  3. retime: `autotune retime busy.jsonl`, nothing else running;
  4. the best kernels of quiet.jsonl, busy-before.jsonl and busy.jsonl (`autotune.load_best`), timed
     in this process in --rounds alternating rounds: each one's median and its ratio to the quiet
     log's best (speed: quiet time / its time).
It also counts the busy run's measurements and how many of them were marked noisy. --repeats runs
the whole protocol that many times (each in a fresh directory) and reports the median ratios.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.environment import worker_env
from autotune.measure.experiments.common import add_task_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_task_arguments(p)
    p.set_defaults(shape="512x512x512", threads=2)
    p.add_argument("--trials", type=int, default=24, help="trials of the quiet run (default: 24)")
    p.add_argument("--busy-seconds", type=float, default=480.0, help="wall-time budget of the busy run (default: 480)")
    p.add_argument("--hogs", type=int, default=0, help="busy processes during the busy run (default: one per core)")
    p.add_argument("--nice", type=int, default=19, help="the busy run's niceness (default: 19, below the busy processes)")
    p.add_argument("--batch", type=int, default=8, help="configs per round of both runs (default: 8)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds of the final comparison (default: 5)")
    p.add_argument("--repeats", type=int, default=1, help="times to run the whole protocol (default: 1)")
    p.add_argument("--dir", default=None, help="keep the logs here (default: a temporary directory)")


def _autotune(*argv: str, nice: int = 0, cache: Path) -> tuple[float, str]:
    """Run the autotune command line with a compile cache of its own; (wall seconds, its output).
    Raises if it fails."""
    cmd = (["nice", "-n", str(nice)] if nice else []) + [sys.executable, "-m", "autotune", *argv]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**worker_env(), "AUTOTUNE_CACHE_DIR": str(cache)})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t0, p.stdout + p.stderr


def _hogs(n: int) -> list[subprocess.Popen]:  # type: ignore[type-arg]
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _compare(logs: dict[str, Path], op: str, shape: str, threads: int, rounds: int) -> dict[str, float]:
    """Median seconds of each log's best kernel, timed in alternating rounds in this process."""
    import autotune
    from autotune.environment import settings
    from autotune.task import Task
    from autotune.timing_lock import TimingLock, lock_path
    from autotune.measure.timing import TimingProtocol, time_callable
    task = Task.create(op, shape, threads=threads)
    inputs = task.inputs(seed=1)
    runs = {name: autotune.load_best(log, op, shape, threads=threads).bind(*inputs) for name, log in logs.items()}
    protocol = TimingProtocol(warmup=2, repeat=5, min_repeat_ms=100)
    times: dict[str, list[float]] = {name: [] for name in runs}
    with TimingLock(lock_path(settings().cache_dir)):
        for _ in range(rounds):
            for name, run in runs.items():
                times[name].append(time_callable(run, protocol).median)
    return {name: statistics.median(t) for name, t in times.items()}


def run_once(args: argparse.Namespace, where: Path) -> dict[str, Any]:
    from autotune.records import load_records
    from autotune.target import cpu_model
    from autotune.task import Task
    from autotune.tuning import retime, tune
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    common = [args.op, "--shape", args.shape, "--dtype", args.dtype, "--threads", str(task.threads),
              "--batch", str(args.batch), "--no-progress"]
    quiet, busy, before = where / "quiet.jsonl", where / "busy.jsonl", where / "busy-before.jsonl"
    t0 = time.perf_counter()
    tune(op=task, trials=args.trials, log=quiet, batch=args.batch, progress=False)
    t_quiet = time.perf_counter() - t0
    hogs = _hogs(args.hogs or os.cpu_count() or 1)
    try:
        time.sleep(1.0)
        t_busy, busy_out = _autotune("tune", *common, "--trials", "10000", "--timeout", str(args.busy_seconds),
                                     "--log", str(busy), nice=args.nice, cache=where / "busy-cache")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    shutil.copy(busy, before)
    time.sleep(2.0)  # the machine settles
    t0 = time.perf_counter()
    rows = retime(log=busy)
    t_retime = time.perf_counter() - t0
    retime_out = "\n".join(f"{r.key}: {r.retimed} re-timed ({r.noisy} noisy)" for r in rows)
    secs = _compare({"quiet": quiet, "busy_before_retime": before, "busy_after_retime": busy},
                    args.op, args.shape, task.threads, args.rounds)
    measured = [r for r in load_records(before) if not r.retimed]
    per, unit = task.speed_unit()
    row = {"cpu": cpu_model(), "task": task.key(), "quiet_trials": sum(not r.retimed for r in load_records(quiet)),
           "quiet_seconds": t_quiet, "busy_trials": len(measured), "busy_noisy": sum(r.noisy for r in measured),
           "busy_failed": sum(not r.ok for r in measured), "busy_wall_seconds": t_busy, "retime_seconds": t_retime,
           "speed": {k: per / v for k, v in secs.items()}, "unit": unit,
           "ratio_before_retime": secs["quiet"] / secs["busy_before_retime"],
           "ratio_after_retime": secs["quiet"] / secs["busy_after_retime"],
           "busy_output": busy_out.strip().splitlines()[-4:], "retime_output": retime_out.strip().splitlines()}
    print(f"{row['task']} on {row['cpu']}: quiet run {row['quiet_trials']} trials in {t_quiet:.0f} s; busy run "
          f"{row['busy_trials']} trials in {t_busy:.0f} s, {row['busy_noisy']} of them noisy; retime {t_retime:.0f} s")
    print("  " + ", ".join(f"{k} {v:.1f} {unit}" for k, v in row["speed"].items()))
    print(f"  the busy log's best against the quiet log's: {row['ratio_before_retime']:.2f}x before retime, "
          f"{row['ratio_after_retime']:.2f}x after", flush=True)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="busy-machine-") as tmp:
            where = Path(args.dir) / f"run{i + 1}" if args.dir else Path(tmp)
            where.mkdir(parents=True, exist_ok=True)
            rows.append(run_once(args, where))
    out = {"runs": rows,
           "median_ratio_before_retime": statistics.median(r["ratio_before_retime"] for r in rows),
           "median_ratio_after_retime": statistics.median(r["ratio_after_retime"] for r in rows)}
    if args.repeats > 1:
        print(f"median of {args.repeats}: {out['median_ratio_before_retime']:.2f}x before retime, "
              f"{out['median_ratio_after_retime']:.2f}x after")
    return out
