"""Measurement benchmarks (not tests): reproducibility across processes and tuning throughput.

    python -m measure.benchmarks spread --op matmul --shape 1024x1024x1024 --processes 10 [--config JSON]
    python -m measure.benchmarks throughput --op matmul --shape 512x512x512 --trials 16
    python -m measure.benchmarks ray-scaling --op matmul --shape 256x256x256 --trials 16

`ray-scaling` compares 1 vs 2 compile workers and the Ray runner with the local one.
`spread` re-measures one kernel in N separate processes, one after another, and reports the
relative spread (max/min) of their medians. `throughput` measures candidates per minute with a
cold compile cache and again with a warm one (the same configs, a new runner each time).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure.timing import TimingProtocol

PROTOCOL = TimingProtocol(warmup=2, number=1, repeat=7, min_repeat_ms=100)


def _once(args: argparse.Namespace) -> None:
    """Child: build (from the disk cache), check and time one config; print seconds as JSON."""
    from autotune.task import Task
    from measure.check import check_output, poisoned
    from measure.timing import time_callable
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    k = task.build(json.loads(args.config))
    ins = task.inputs(seed=0)
    out = poisoned(k.output_shape, task.dtype)
    k(*ins, out=out)
    chk = check_output(out, task.reference(ins), task.dtype)
    if not chk.ok:
        raise SystemExit(f"wrong answer: {chk.message}")
    t = time_callable(k.bind(*ins), PROTOCOL)
    print(json.dumps({"median": t.median, "spread": t.spread, "compile_s": k.compile_seconds}))


def spread(args: argparse.Namespace) -> dict:
    from autotune.task import Task
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    if args.config:
        cfg = task.space().validate({**_default(task), **json.loads(args.config)})
    else:
        cfg = task.space().validate(_default(task))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    medians = []
    for i in range(args.processes):
        out = subprocess.run([sys.executable, "-m", "measure.benchmarks", "_once", "--op", args.op, "--shape",
                              args.shape, "--dtype", args.dtype, "--threads", str(task.threads), "--config",
                              json.dumps(cfg.to_json())], env=env, capture_output=True, text=True, check=True)
        medians.append(json.loads(out.stdout.strip().splitlines()[-1])["median"])
        time.sleep(0.5)
    fl = task.flops()
    gf = [fl / m / 1e9 for m in medians]
    res = {"task": task.key(), "threads": task.threads, "config": cfg.to_json(), "processes": args.processes,
           "gflops": gf, "min_gflops": min(gf), "max_gflops": max(gf), "spread": max(medians) / min(medians)}
    print(f"{task.key()} threads={task.threads}: {args.processes} processes, GFLOP/s min {min(gf):.1f} "
          f"max {max(gf):.1f}, relative spread (max/min) {res['spread']:.3f}")
    return res


def _default(task) -> dict:  # type: ignore[no-untyped-def]
    t = task.template
    presets = t.presets(task.shape_dict, task.dtype, task.threads) if t.presets else []
    return presets[0] if presets else task.space().sample(random.Random(0)).to_json()


def throughput(args: argparse.Namespace) -> dict:
    from autotune.task import Task
    from measure.local import LocalRunner, LocalRunnerOptions
    from measure.runner import MeasureInput
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    rng = random.Random(args.seed)
    space = task.space()
    cfgs = []
    while len(cfgs) < args.trials:
        c = space.sample(rng)
        if c not in cfgs:
            cfgs.append(c)
    inputs = [MeasureInput(task, c) for c in cfgs]
    out = {"task": task.key(), "trials": args.trials}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AUTOTUNE_CACHE_DIR"] = cache
        for phase in ("cold", "warm"):
            t0 = time.perf_counter()
            with LocalRunner(LocalRunnerOptions(protocol=TimingProtocol(warmup=1, repeat=3, min_repeat_ms=20))) as r:
                res = r.run(inputs)
            el = time.perf_counter() - t0
            import statistics
            cs = [x.compile_seconds for x in res if x.compile_seconds is not None]
            out[phase] = {"seconds": el, "per_minute": 60 * len(inputs) / el, "ok": sum(x.ok for x in res),
                          "median_compile_s": statistics.median(cs) if cs else None}
            print(f"{phase} cache: {len(inputs)} candidates in {el:.1f} s = {60 * len(inputs) / el:.1f} per minute "
                  f"({out[phase]['ok']} ok); median compile (or cache load) per candidate "
                  f"{out[phase]['median_compile_s'] or 0:.2f} s")
    return out


def ray_scaling(args: argparse.Namespace) -> dict:
    """Candidates per minute with 1 and 2 compile workers (LocalRunner), and the Ray runner's
    overhead against the local runner on the same configs (each with a cold compile cache)."""
    from autotune.task import Task
    from measure.local import LocalRunner, LocalRunnerOptions
    from measure.runner import MeasureInput
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    rng = random.Random(args.seed)
    cfgs: list = []
    while len(cfgs) < args.trials:
        c = task.space().sample(rng)
        if c not in cfgs:
            cfgs.append(c)
    inputs = [MeasureInput(task, c) for c in cfgs]
    proto = TimingProtocol(warmup=1, repeat=3, min_repeat_ms=20)
    out: dict = {"task": task.key(), "trials": len(inputs)}

    def timed(label: str, make) -> float:  # type: ignore[no-untyped-def]
        with tempfile.TemporaryDirectory() as cache:
            os.environ["AUTOTUNE_CACHE_DIR"] = cache
            t0 = time.perf_counter()
            with make() as r:
                res = r.run(inputs)
            el = time.perf_counter() - t0
        out[label] = {"seconds": el, "per_minute": 60 * len(inputs) / el, "ok": sum(x.ok for x in res)}
        print(f"{label:<28} {len(inputs)} candidates in {el:6.1f} s = {60 * len(inputs) / el:5.1f} per minute")
        return el

    one = timed("local, 1 compile worker", lambda: LocalRunner(LocalRunnerOptions(compile_workers=1, protocol=proto)))
    two = timed("local, 2 compile workers", lambda: LocalRunner(LocalRunnerOptions(compile_workers=2, protocol=proto)))
    import ray

    from measure.ray_runner import RayRunner
    ray.shutdown()
    rr = timed("ray, 1 node x 2 workers", lambda: RayRunner(options=LocalRunnerOptions(compile_workers=2, protocol=proto),
                                                           num_cpus=2))
    ray.shutdown()
    out["speedup_2_workers"] = one / two
    out["ray_overhead"] = rr / two
    print(f"2 workers vs 1: {one / two:.2f}x faster; Ray runner vs local runner: {rr / two:.2f}x the time "
          "(includes starting Ray)")
    return out


def _trials_to(target: float, history: list[tuple[float, float]]) -> int | None:
    for i, (_, best) in enumerate(history, 1):
        if best <= target:
            return i
    return None


def search_efficiency(args: argparse.Namespace) -> dict:
    """Trials each search needs to reach 95% of the best GFLOP/s a long random search found:
    random, model-guided evolutionary (xgb), and model-guided with a model pretrained on the
    other tasks' logs. Tasks: --tasks "op:shape,op:shape,..."."""
    from autotune.cost_model import Dataset, make_model
    from autotune.cost_model.guided import guided_search
    from autotune.records import RecordLog, load_records
    from autotune.search import make_strategy
    from autotune.task import Task
    from autotune.tuner import Tuner, TuneOptions
    from measure.local import LocalRunner, LocalRunnerOptions
    specs = [t.split(":") for t in args.tasks.split(",")]
    tasks = [Task.create(op, shape, args.dtype, args.threads) for op, shape in specs]
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    proto = TimingProtocol(warmup=1, repeat=3, min_repeat_ms=20)
    out: dict = {"long_random": args.long, "trials": args.trials, "tasks": {}}
    with LocalRunner(LocalRunnerOptions(protocol=proto)) as runner:
        for t in tasks:  # the long random searches (resumable: their logs are kept)
            log = RecordLog(work / f"random_{t.key().replace('|', '_')}.jsonl")
            Tuner(t, make_strategy("random", t.space(), seed=100), runner, log).run(TuneOptions(trials=args.long))
        for t in tasks:
            logs = {u.key(): load_records(work / f"random_{u.key().replace('|', '_')}.jsonl") for u in tasks}
            best = min(r.seconds for r in logs[t.key()])
            target = best / 0.95
            row: dict = {"best_gflops": t.flops() / best / 1e9}
            hist = []
            b = float("inf")
            for r in logs[t.key()][:args.trials]:
                b = min(b, r.seconds)
                hist.append((0.0, b))
            row["random"] = _trials_to(target, hist)
            for name in ("xgb", "xgb_pretrained"):
                pre = None
                if name == "xgb_pretrained":
                    m = make_model("xgb")
                    m.fit(Dataset.from_records([r for k, rs in logs.items() if k != t.key() for r in rs]))
                    pre = str(work / f"pre_{t.key().replace('|', '_')}.json")
                    m.save(pre)
                strategy, updater = guided_search(t, "xgb", pretrained=pre, seed=1)
                res = Tuner(t, strategy, runner, RecordLog(work / f"{name}_{t.key().replace('|', '_')}.jsonl"),
                            callbacks=[updater]).run(TuneOptions(trials=args.trials, batch=8))
                row[name] = _trials_to(target, res.history)
            out["tasks"][t.key()] = row
            print(f"{t.key():<40} best {row['best_gflops']:7.1f} GFLOP/s  trials to 95%: random {row['random']}  "
                  f"guided {row['xgb']}  pretrained {row['xgb_pretrained']}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m measure.benchmarks")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("spread", "throughput", "ray-scaling", "search-efficiency", "_once"):
        sp = sub.add_parser(name)
        sp.add_argument("--op", default="matmul")
        sp.add_argument("--shape", default="1024x1024x1024")
        sp.add_argument("--dtype", default="float32")
        sp.add_argument("--threads", type=int, default=None)
        sp.add_argument("--config", default=None)
        sp.add_argument("--processes", type=int, default=10)
        sp.add_argument("--trials", type=int, default=16)
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--json", dest="json_out", default=None)
        sp.add_argument("--tasks", default="matmul:512x512x512,matmul:256x384x640,conv2d:1x32x28x28x32x3x3x1x1,"
                                           "conv2d:1x64x14x14x64x3x3x1x1,batch_matmul:8x128x128x128,"
                                           "batch_matmul:4x256x64x256")
        sp.add_argument("--long", type=int, default=128, help="trials of the long random search")
        sp.add_argument("--workdir", default="search-efficiency")
    args = p.parse_args(argv)
    if args.cmd == "_once":
        _once(args)
        return 0
    res = {"spread": spread, "throughput": throughput, "ray-scaling": ray_scaling,
           "search-efficiency": search_efficiency}[args.cmd](args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
