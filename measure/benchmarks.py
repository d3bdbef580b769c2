"""Measurement benchmarks (not tests): reproducibility across processes and tuning throughput.

    python -m measure.benchmarks spread --op matmul --shape 1024x1024x1024 --processes 10 [--config JSON]
    python -m measure.benchmarks throughput --op matmul --shape 512x512x512 --trials 16
    python -m measure.benchmarks ray-scaling --op matmul --shape 256x256x256 --trials 16
    python -m measure.benchmarks search-efficiency --long 128 --trials 64 --plot curves.png
    python -m measure.benchmarks surrogate-efficiency --workdir search-efficiency --seeds 8
    python -m measure.benchmarks model-accuracy --workdir search-efficiency [--in-task 8,16,32,64]

`ray-scaling` compares 1 vs 2 compile workers and the Ray runner with the local one.
`spread` re-measures one kernel in N separate processes, one after another (15 samples each,
100 ms apart), and reports the relative spread (max/min) across processes of their median
times and of their minimum times. `throughput` measures candidates per minute with a cold
compile cache and again with a warm one (the same configs, a new runner each time).
`search-efficiency` counts the trials searches need to reach 95% of the best a long random
search found; `surrogate-efficiency` counts the same on landscapes fitted to its logs, over many
seeds and without timing; `model-accuracy` scores cost models on held-out tasks of its logs.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from measure.timing import TimingProtocol, calls_per_sample, time_callable

if TYPE_CHECKING:
    from autotune.cost_model import Dataset
    from autotune.task import Task

PROTOCOL = TimingProtocol(warmup=2, number=1, repeat=15, min_repeat_ms=50, pause_ms=100, retake_stolen=15)


def _once(args: argparse.Namespace) -> None:
    """Child: build (from the disk cache), check and time one config; print seconds as JSON."""
    from autotune.task import Task
    from measure.check import check_output, poisoned
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    k = task.build(json.loads(args.config))
    ins = task.inputs(seed=0)
    out = poisoned(k.output_shape, task.dtype)
    k(*ins, out=out)
    chk = check_output(out, task.reference(ins), task.dtype)
    if not chk.ok:
        raise SystemExit(f"wrong answer: {chk.message}")
    t = time_callable(k.bind(*ins), dataclasses.replace(PROTOCOL, retake_stolen=int(args.retake_stolen)))
    print(json.dumps({"median": t.median, "min": t.min, "spread": t.spread, "compile_s": k.compile_seconds,
                      "retaken": t.retaken, "stolen": t.stolen}))


def spread(args: argparse.Namespace) -> dict:
    """Re-time one config in --processes fresh processes, one after another, and report the
    relative spread (max/min) of their medians and of their fastest samples. --retake-stolen
    "0,10" alternates the processes between those budgets for retaking samples the hypervisor
    stole from, and reports each (an A/B in the same run)."""
    from autotune.task import Task
    task = Task.create(args.op, args.shape, args.dtype, args.threads)
    if args.config:
        cfg = task.space().validate({**_default(task), **json.loads(args.config)})
    else:
        cfg = task.space().validate(_default(task))
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    budgets = [int(b) for b in str(args.retake_stolen).split(",")]
    runs: dict[int, list[dict]] = {b: [] for b in budgets}
    for i in range(args.processes * len(budgets)):
        b = budgets[i % len(budgets)]
        out = subprocess.run([sys.executable, "-m", "measure.benchmarks", "_once", "--op", args.op, "--shape",
                              args.shape, "--dtype", args.dtype, "--threads", str(task.threads), "--config",
                              json.dumps(cfg.to_json()), "--retake-stolen", str(b)],
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


def _default(task) -> dict:  # type: ignore[no-untyped-def]
    t = task.template
    presets = t.presets(task.shape_dict, task.dtype, task.threads) if t.presets else []
    return presets[0] if presets else task.space().sample(random.Random(0)).to_json()


def throughput(args: argparse.Namespace) -> dict:
    from autotune.task import Task
    from measure.local import LocalRunner, LocalRunnerOptions
    from autotune.runner import MeasureInput
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
    from autotune.runner import MeasureInput
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


def _trials_to(target: float, bests: Sequence[float]) -> int | None:
    """1-based index of the first trial whose best-so-far time is within the target, or None."""
    for i, best in enumerate(bests, 1):
        if best <= target:
            return i
    return None


def _running_best(seconds: Sequence[float]) -> list[float]:
    return list(itertools.accumulate(seconds, min))


def _slug(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in key)


# the guided searches: XGBoost-guided evolutionary search with no prior (blind), from the roofline prior
# (from scratch: no logs), and from a model pretrained on the other tasks
GUIDED = ("xgb_blind", "xgb", "xgb_pretrained")
SCRATCH = ("xgb_blind", "xgb")  # the pretrained models learn from these searches' logs (and the random ones)


def search_efficiency(args: argparse.Namespace) -> dict:
    """Trials each search needs to reach 95% of the best GFLOP/s a long random search found.

    Random search: the expected number of trials, (n+1)/(k+1), for k of the n configs of the long
    random search within the target (sampling without replacement), next to the trials its own
    run took. Model-guided evolutionary search (XGBoost, refitted after every --batch configs) from
    scratch with no prior (xgb_blind), from scratch starting from the roofline estimate (xgb: what
    `autotune tune --cost-model xgb` does), and from a model trained on everything measured on the
    other tasks (xgb_pretrained: other shapes and operators, their long random searches and their
    searches from scratch, plus the logs of --corpus): the trials their runs took (the mean over
    --seeds runs). --searches picks which to run; a search with no logs is left out of the count.
    On a noisy machine a lucky sample can set an unreachable target, and searches logged at
    different times ran at different machine speeds, so the contenders of every search (its best
    --retime configs and every config within --retime-within of its best) are re-timed together
    (alternating, medians of --rounds rounds; then those within --final-within of the fastest
    again, finely interleaved for --final-seconds) and those times replace the logged ones before
    the trials are counted. --count-at 128,512 counts once per target, set by the first 128 and by
    the first 512 trials of the long random search, all from one re-timing (the contenders of each
    prefix are re-timed too). Tasks: --tasks "op:shape,op:shape,..."; the long random logs in
    --workdir are reused; --analyze-only recounts from the logs there."""
    from autotune.cost_model import Dataset
    from autotune.search.guided import guided_search
    from autotune.records import RecordLog, load_records
    from autotune.search import make_strategy
    from autotune.tuner import Tuner, TuneOptions
    from measure.local import LocalRunner, LocalRunnerOptions
    tasks = _tasks(args)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"long_random": args.long, "trials": args.trials, "tasks": {}}
    if not args.analyze_only:
        with LocalRunner(LocalRunnerOptions(protocol=TimingProtocol(warmup=1, repeat=5, min_repeat_ms=20))) as runner:
            for t in tasks:  # the long random searches (resumable: their logs are kept)
                path = work / f"random_{_slug(t.key())}.jsonl"
                have = sum(r.key == t.key() for r in load_records(path)) if path.exists() else 0
                if have < args.long:  # the tuner resumes the log: only the missing trials are made
                    Tuner(t, make_strategy("random", t.space(), seed=100), runner, RecordLog(path)).run(
                        TuneOptions(trials=args.long - have, early_stopping=None))
            logs = {u.key(): [work / f"random_{_slug(u.key())}.jsonl"] for u in tasks}
            feats: dict[Path, Dataset] = {}
            corpus = _corpus(args.corpus, tasks) if "xgb_pretrained" in args.searches.split(",") else []
            for name in GUIDED:  # every task from scratch first: the pretrained models learn from those logs too
                if name not in args.searches.split(","):  # not rerun: its logs (where there are any) are reused
                    if name in SCRATCH:
                        logs = {key: paths + [p for seed in range(1, args.seeds + 1)
                                              if (p := work / _guided_log(name, seed, key)).exists()]
                                for key, paths in logs.items()}
                    continue
                for t in tasks:
                    pre = None
                    if name == "xgb_pretrained":
                        for path in (p for paths in logs.values() for p in paths if p not in feats):
                            feats[path] = Dataset.from_records(load_records(path))  # each log's features once
                        pre = _save_held_out("xgb", [(key, feats[path]) for key, paths in logs.items()
                                                     for path in paths] + corpus, t.key(),
                                             work / f"pre_{_slug(t.key())}.json")
                    for seed in range(1, args.seeds + 1):
                        strategy, updater = guided_search(t, "xgb", pretrained=pre, roofline=name != "xgb_blind",
                                                          seed=seed)
                        glog = work / _guided_log(name, seed, t.key())
                        glog.unlink(missing_ok=True)  # each run of the benchmark searches afresh
                        t0 = time.perf_counter()
                        Tuner(t, strategy, runner, RecordLog(glog), callbacks=[updater]).run(
                            TuneOptions(trials=args.trials, batch=args.batch, early_stopping=None))
                        out.setdefault("wall_s", {})[f"{name} seed {seed} {t.key()}"] = time.perf_counter() - t0
                        if name in SCRATCH:  # the pretrained models learn from random and scratch runs only
                            logs[t.key()].append(glog)
    lengths = _count_at(args)
    names = _searches_logged(work, tasks, args.seeds)
    curves: dict[str, dict[str, list[float]]] = {}
    counts: dict[int, dict[str, dict]] = {n: {} for n in lengths}
    for t in tasks:
        runs = {}
        paths = [("random", work / f"random_{_slug(t.key())}.jsonl", args.long)]
        paths += [(f"{name} seed {seed}", work / _guided_log(name, seed, t.key()), args.trials)
                  for name in names for seed in range(1, args.seeds + 1)]
        for label, path, limit in paths:
            if not path.exists():
                raise SystemExit(f"{path} is missing: run the benchmark without --analyze-only first")
            runs[label] = [(r.validated_config().to_json(), r.seconds) for r in load_records(path)
                           if r.key == t.key()][:limit]
        top: list[dict] = []
        # every target decides on its own contenders: those of each shorter random run too
        for seq in [runs["random"][:n] for n in lengths] + list(runs.values()):
            ranked = sorted((x for x in seq if math.isfinite(x[1])), key=lambda x: x[1])
            for i, (cfg, sec) in enumerate(ranked):
                if (i < args.retime or sec <= args.retime_within * ranked[0][1]) and cfg not in top:
                    top.append(cfg)
        retimed = _retime(t, top, args.rounds, args.final_within, args.final_seconds)
        fixed = {label: [retimed.get(json.dumps(c, sort_keys=True), sec) for c, sec in seq]
                 for label, seq in runs.items()}
        curves[t.key()] = {label: _running_best(v) for label, v in fixed.items()}
        for n in lengths:
            row = counts[n][t.key()] = _count(fixed, n, args.trials, t.flops())
            row["retimed_configs"] = len(top)
            print(f"{t.key():<44} target from {n} random trials: best {row['best_gflops']:6.1f} GFLOP/s; trials "
                  f"to 95%: random {row['random']:.1f} expected ({row['random_within']} of {n} within; its run "
                  f"{row['random_run']}), " + ", ".join(f"{name} {row[f'{name}_runs']} (best "
                                                        f"{row[f'{name}_best_gflops']:.1f})" for name in names),
                  flush=True)
    out["searches"] = list(names)
    out["by_long"] = {n: _summary(rows) for n, rows in counts.items()}
    out.update(out["by_long"][args.long] if args.long in lengths else {})
    for n, summary in out["by_long"].items():
        for name in names:
            print(f"target from {n} random trials, {name}: reached the target on {summary[f'{name}_reached']} tasks "
                  f"(every seed); median over tasks of trials saved vs random (mean trials over seeds) "
                  f"{summary[f'{name}_median_speedup'] or 'n/a'}; counting a miss as {args.trials + 1} trials: "
                  f"{summary[f'{name}_median_speedup_bound']:.2f}")
    if args.plot:
        _plot_curves(curves, {t.key(): t.flops() for t in tasks}, counts[max(lengths)], args.plot)
    return out


def _count_at(args: argparse.Namespace) -> list[int]:
    """The lengths of --count-at (default: --long), each a prefix of the long random search."""
    lengths = _ints(str(args.count_at or args.long), "--count-at", "trial counts", "128,512")
    if lengths[0] < 1 or lengths[-1] > args.long:
        raise SystemExit(f"--count-at {args.count_at!r}: each count must be between 1 and --long ({args.long})")
    return lengths


def _ints(spec: str, flag: str, what: str, example: str) -> list[int]:
    """The distinct integers of a comma-separated option value, sorted; a clear exit if one is not a number."""
    try:
        return sorted({int(n) for n in spec.split(",")})
    except ValueError:
        raise SystemExit(f"{flag} {spec!r}: give {what} separated by commas, e.g. {example}") from None


def _searches_logged(work: Path, tasks: Sequence[Task], seeds: int) -> list[str]:
    """The guided searches with logs in `work`: every seed of every task, or none (a search not run
    is left out of the count, with a note); a search logged for some runs only is an error."""
    names = []
    for name in GUIDED:
        paths = [work / _guided_log(name, seed, t.key()) for t in tasks for seed in range(1, seeds + 1)]
        have = [p.exists() for p in paths]
        if all(have):
            names.append(name)
        elif any(have):
            missing = paths[have.index(False)]
            raise SystemExit(f"{missing} is missing: run the benchmark with --searches {name} (without "
                             "--analyze-only) to make every run of that search")
        else:
            print(f"{name}: no logs in {work}; not counted (run the benchmark with --searches {name})", flush=True)
    if not names:
        raise SystemExit(f"{work} holds no guided search logs: run the benchmark without --analyze-only first")
    return names


def _count(fixed: dict[str, list[float]], n: int, trials: int, flops: float) -> dict:
    """One task's trials to the target, 95% of the best of the first n trials of the random search
    (`fixed["random"]`), for random search (expected, and its own run) and for each guided search
    (`fixed["<name> seed <s>"]`, seconds per trial in trial order)."""
    rand = fixed["random"][:n]
    best = min(rand)
    target = best / 0.95
    k = sum(s <= target for s in rand)
    row: dict = {"best_gflops": flops / best / 1e9, "random_n": len(rand), "random_within": k,
                 "random": (len(rand) + 1) / (k + 1), "random_run": _trials_to(target, _running_best(rand))}
    for name in GUIDED:
        seqs = [v for label, v in fixed.items() if label.startswith(f"{name} seed ")]
        if not seqs:  # a search that was not run
            continue
        row[f"{name}_runs"] = [_trials_to(target, _running_best(v)) for v in seqs]
        reached = None not in row[f"{name}_runs"]
        row[name] = statistics.mean(row[f"{name}_runs"]) if reached else None
        # a run that missed counts as trials + 1: its saving is at most this
        row[f"{name}_censored"] = statistics.mean(trials + 1 if m is None else m for m in row[f"{name}_runs"])
        row[f"{name}_best_gflops"] = flops / min(min(v) for v in seqs) / 1e9
        row[f"{name}_vs_random"] = row["random"] / row[name] if row[name] else None
    return row


def _summary(rows: dict[str, dict]) -> dict:
    """The per-task rows of one target, and per guided search the median saving over tasks (None
    unless every run reached the target), how many tasks it reached, and the median saving with a
    miss counted as trials + 1."""
    out: dict = {"tasks": rows}
    for name in (g for g in GUIDED if all(f"{g}_runs" in r for r in rows.values())):
        ratios = [r[f"{name}_vs_random"] for r in rows.values()]
        got = [x for x in ratios if x is not None]
        out[f"{name}_median_speedup"] = statistics.median(got) if len(got) == len(ratios) else None
        out[f"{name}_reached"] = f"{len(got)}/{len(ratios)}"
        out[f"{name}_median_speedup_bound"] = statistics.median(r["random"] / r[f"{name}_censored"]
                                                                for r in rows.values())
    return out


def _tasks(args: argparse.Namespace) -> list[Task]:
    """The tasks of --tasks "op:shape,op:shape,...", in --dtype on --threads."""
    from autotune.task import Task
    return [Task.create(op, shape, args.dtype, args.threads) for op, shape in
            (spec.split(":") for spec in args.tasks.split(","))]


def _guided_log(name: str, seed: int, key: str) -> str:
    return f"{name}_s{seed}_{_slug(key)}.jsonl"


def _retime(task: Task, configs: Sequence[dict], rounds: int, final_within: float,
            final_seconds: float) -> dict[str, float]:
    """Median seconds of each config over `rounds` alternating rounds in this process (kernels
    from the disk cache), keyed by the config's JSON. Then every config within `final_within` of
    the fastest is timed again, finely interleaved for `final_seconds`, and those medians replace
    theirs: the configs that decide a count near the target are compared under the same load."""
    from measure.check import check_output
    ins = task.inputs(seed=0)
    ref = task.reference(ins)
    runs = {}
    for cfg in configs:
        try:
            k = task.build(cfg)
        except Exception:  # noqa: BLE001 - a config that no longer builds keeps its logged time
            continue
        fn = k.bind(*ins)
        if not check_output(fn(), ref, task.dtype).ok:
            continue
        runs[json.dumps(cfg, sort_keys=True)] = fn
    medians = _alternate(runs, rounds)
    if medians:
        fastest = min(medians.values())
        near = {key: runs[key] for key, sec in medians.items() if sec <= final_within * fastest}
        medians.update(_interleave(near, final_seconds))
    return medians


def _alternate(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each callable over `rounds` rounds, each round in a rotated order."""
    samples: dict[str, list[float]] = {key: [] for key in runs}
    proto = TimingProtocol(warmup=1, repeat=3, min_repeat_ms=30)
    keys = list(runs)
    for i in range(rounds):
        for key in keys[i % max(len(keys), 1):] + keys[:i % max(len(keys), 1)]:
            samples[key].append(time_callable(runs[key], proto).median)
    return {key: statistics.median(v) for key, v in samples.items() if v}


def _interleave(runs: dict[str, Callable[[], object]], seconds: float, sample_ms: float = 2.0,
                min_rounds: int = 5) -> dict[str, float]:
    """Median seconds per call of each callable, sampled in rounds that take one short sample
    (about `sample_ms`) of every callable in a shuffled order, for `seconds` (at least
    `min_rounds` rounds). The machine's speed here drifts over seconds and changes which kernel
    is fastest; samples milliseconds apart see the same machine, so their medians compare."""
    calls: dict[str, int] = {}
    for key, fn in runs.items():  # calls per sample, after a warm-up call
        fn()
        calls[key] = calls_per_sample(fn, 1, sample_ms)
    samples: dict[str, list[float]] = {key: [] for key in runs}
    order = list(runs)
    rng = random.Random(0)
    end = time.perf_counter() + seconds
    done = 0
    while order and (done < min_rounds or time.perf_counter() < end):
        rng.shuffle(order)
        for key in order:
            fn, n = runs[key], calls[key]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[key].append((time.perf_counter() - t0) / n)
        done += 1
    return {key: statistics.median(v) for key, v in samples.items() if v}


def surrogate_efficiency(args: argparse.Namespace) -> dict:
    """search-efficiency on surrogates: each task's landscape is fitted to every log in --workdir
    (measure.surrogate), and the searches of --compare run --seeds times on it, with log-normal
    noise of sigma --noise per measurement. Nothing is compiled or timed, so strategies can be
    compared over many seeds; the counts rank searches, they do not replace the real benchmark.
    A search "<model>+pretrained" (e.g. xgb+pretrained) starts from that model trained on the
    logged measurements of the other tasks (the real ones, not the surrogates') and of --corpus."""
    from autotune.cost_model import Dataset, make_model
    from autotune.records import load_records
    from measure.surrogate import Surrogate, compare
    records = [r for path in sorted(Path(args.workdir).glob("*.jsonl")) for r in load_records(path)]
    names = args.compare.split(",")
    kinds = sorted({n.partition("+")[0] for n in names if n.endswith("+pretrained")})
    if len(kinds) > 1:
        raise SystemExit(f"--compare {args.compare!r}: pretrained searches of one model kind at a time")
    tasks = _tasks(args)
    graphs = bool(kinds) and make_model(kinds[0]).needs_graphs
    feats = [(t.key(), Dataset.from_records((r for r in records if r.key == t.key()), graphs=graphs))
             for t in tasks] + _corpus(args.corpus, tasks, graphs) if kinds else []
    out: dict = {"noise": args.noise, "seeds": args.seeds, "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            pre = _save_held_out(kinds[0], feats, task.key(), Path(tmp) / f"{_slug(task.key())}.json",
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


def model_accuracy(args: argparse.Namespace) -> dict:
    """Cost models on held-out tasks: train on the random-search logs of the other tasks in
    --workdir (search-efficiency writes them), score the held-out task's configs, and report
    Kendall tau, top-1 and top-5 scores and the training time. Two splits: leave one task out
    (its other shape is in the training data) and leave one operator out (no config of that
    operator is seen). Models: random, roofline (trains on nothing: the same in both splits), xgb,
    lgbm, gnn (a model whose library is missing is
    skipped with a note); xgb and lgbm also as "<model>+similar", trained with the tasks most like
    the held-out one weighing most, as a prior is for the task it is used on
    (autotune.cost_model.transfer). --in-task 8,16,32,64 adds learning curves within each task
    (see _in_task)."""
    from autotune.cost_model import Dataset, ModelError, make_model
    from autotune.cost_model.evaluate import evaluate
    from autotune.cost_model.transfer import similarity_weights
    from autotune.records import load_records
    files = sorted(Path(args.workdir).glob("random_*.jsonl"))
    if len(files) < 2:
        raise SystemExit(f"{args.workdir}: need the random_*.jsonl logs of at least 2 tasks "
                         "(run `python -m measure.benchmarks search-efficiency` first)")
    models = [m for m in args.models.split(",") if m]
    sizes = _sizes(args.in_task, args.splits) if args.in_task else []  # bad sizes fail before any training
    per_task: dict[str, tuple[str, Dataset, Dataset]] = {}  # key -> (op, features, graphs if a gnn is asked for)
    task_of: dict[str, Task] = {}
    for f in files:
        recs = load_records(f)[:args.long]
        if not recs:
            continue
        graphs = Dataset.from_records(recs, graphs=True) if "gnn" in models else Dataset()
        per_task[recs[0].key] = (recs[0].op, Dataset.from_records(recs), graphs)
        task_of[recs[0].key] = recs[0].task()
    variants = [(m, False) for m in models] + [(m, True) for m in models if m in ("xgb", "lgbm")]

    def union(keys: Sequence[str], graph: bool) -> Dataset:
        return _union([(k, per_task[k][2 if graph else 1]) for k in keys])

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
                    data = union(train, graph)
                    if similar:
                        data.task_weights = similarity_weights(data, task_of[held])
                    t0 = time.perf_counter()
                    model.fit(data)
                    train_s = time.perf_counter() - t0
                except ModelError as e:
                    print(f"{name}: skipped ({e})")
                    rows.pop(name)
                    continue
                res = evaluate(model, union([held], graph))["tasks"].get(held)
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
    sizes = _ints(spec, "--in-task", "training-set sizes", "8,16,32,64")
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


def _corpus(spec: str | None, tasks: Sequence[Task], graphs: bool = False) -> list[tuple[str, Dataset]]:
    """Per-task datasets of the --corpus logs (files, or directories of *.jsonl): other shapes and
    operators that every pretrained model learns from too. A benchmark task in them is an error: a
    pretrained model must never have seen the task it is tested on."""
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
    return [(key, Dataset.from_records(recs, graphs=graphs)) for key, recs in by_key.items()]


def _save_held_out(kind: str, parts: Sequence[tuple[str, Dataset]], held: str, path: Path, seed: int = 0) -> str:
    """Train a `kind` model on every (task key, dataset) part except task `held`'s, save it to
    `path` with its training set (see autotune.cost_model.transfer), and return the path (a
    prior for tuning the held-out task)."""
    from autotune.cost_model import make_model
    from autotune.cost_model.transfer import save_prior
    model = make_model(kind, seed=seed)
    data = _union([(key, ds) for key, ds in parts if key != held])
    model.fit(data)
    save_prior(model, data, path)
    return str(path)


def _union(parts: Sequence[tuple[str, Dataset]]) -> Dataset:
    """One training set from per-task datasets (features extracted once per task)."""
    from autotune.cost_model import Dataset
    d = Dataset()
    for key, src in parts:
        d.add(src.X, src.seconds, key, src.graphs)
    return d


def _plot_curves(curves: dict, flops: dict, rows: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(curves)
    cols = min(3, n)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(5 * cols, 3.6 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, (key, cs) in zip(axes.flat, curves.items()):
        for name, bests in cs.items():
            ax.plot(range(1, len(bests) + 1), [flops[key] / b / 1e9 if math.isfinite(b) else 0 for b in bests],
                    label=name)
        ax.axhline(0.95 * rows[key]["best_gflops"], color="grey", ls=":", lw=1, label="95% of random's best")
        ax.set_xscale("log")
        ax.set_title(key.replace("|", " "), fontsize=8)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m measure.benchmarks")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("spread", "throughput", "ray-scaling", "search-efficiency", "surrogate-efficiency", "model-accuracy",
                 "_once"):
        sp = sub.add_parser(name)
        sp.add_argument("--op", default="matmul")
        sp.add_argument("--shape", default="1024x1024x1024")
        sp.add_argument("--dtype", default="float32")
        sp.add_argument("--threads", type=int, default=None)
        sp.add_argument("--config", default=None)
        sp.add_argument("--processes", type=int, default=10)
        sp.add_argument("--retake-stolen", default=str(PROTOCOL.retake_stolen),
                        help="spread: budgets for retaking stolen-from samples, e.g. 0,15 (alternated)")
        sp.add_argument("--trials", type=int, default=16)
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--json", dest="json_out", default=None)
        sp.add_argument("--tasks", default="matmul:512x512x512,matmul:256x384x640,conv2d:1x32x28x28x32x3x3x1x1,"
                                           "conv2d:1x64x14x14x64x3x3x1x1,batch_matmul:8x128x128x128,"
                                           "batch_matmul:4x256x64x256")
        sp.add_argument("--long", type=int, default=128, help="trials of the long random search")
        sp.add_argument("--count-at", default=None, help="search-efficiency: count with the target set by "
                        "the first N trials of the long random search, for each N of e.g. 128,512 "
                        "(default: --long)")
        sp.add_argument("--plot", default=None, help="search-efficiency: write the tuning curves here (PNG); "
                        "model-accuracy --in-task: the learning curves")
        sp.add_argument("--analyze-only", action="store_true", help="search-efficiency: recount from the logs")
        sp.add_argument("--seeds", type=int, default=1, help="search-efficiency: guided runs per task "
                        "(seeds 1..N; trials are averaged over them)")
        sp.add_argument("--searches", default=",".join(GUIDED), help="search-efficiency: the guided searches "
                        "to run (the logs of the others are reused)")
        sp.add_argument("--compare", default="random,evolutionary,xgb,lgbm", help="surrogate-efficiency: "
                        "the searches to compare (strategy names, cost-model names for guided search, or e.g. "
                        "xgb+pretrained for guided search from that model trained on the other tasks' logs)")
        sp.add_argument("--noise", type=float, default=0.1, help="surrogate-efficiency: sigma of the "
                        "log-normal noise on every surrogate measurement")
        sp.add_argument("--batch", type=int, default=4, help="search-efficiency: configs per guided round "
                        "(the model refits after each)")
        sp.add_argument("--retime", type=int, default=6, help="search-efficiency: best configs per search re-timed")
        sp.add_argument("--retime-within", type=float, default=1.5, help="search-efficiency: also re-time every "
                        "config logged within this factor of its search's best (the machine's speed drifts "
                        "between and during searches)")
        sp.add_argument("--rounds", type=int, default=3, help="search-efficiency: alternating re-timing rounds")
        sp.add_argument("--final-within", type=float, default=1.2, help="search-efficiency: the re-timed configs "
                        "within this factor of the task's fastest are timed again, finely interleaved")
        sp.add_argument("--final-seconds", type=float, default=40.0, help="search-efficiency: seconds per task "
                        "of the final interleaved re-timing")
        sp.add_argument("--corpus", default=None, help="search-efficiency, surrogate-efficiency: more tuning "
                        "logs (files or directories, comma-separated) of other shapes that the pretrained models "
                        "learn from too; none may hold a benchmark task")
        sp.add_argument("--workdir", default="search-efficiency")
        sp.add_argument("--models", default="random,roofline,xgb,lgbm,gnn",
                        help="model-accuracy: the models to compare")
        sp.add_argument("--in-task", default=None, help="model-accuracy: also fit each model to N configs of a "
                        "task's own log and score it on the rest, for each N of e.g. 8,16,32,64")
        sp.add_argument("--splits", type=int, default=10, help="model-accuracy --in-task: random splits per size")
    args = p.parse_args(argv)
    if args.cmd == "_once":
        _once(args)
        return 0
    res = {"spread": spread, "throughput": throughput, "ray-scaling": ray_scaling,
           "search-efficiency": search_efficiency, "surrogate-efficiency": surrogate_efficiency,
           "model-accuracy": model_accuracy}[args.cmd](args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
