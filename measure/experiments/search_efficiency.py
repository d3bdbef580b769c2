"""search-efficiency: the trials each search needs to reach 95% of the best GFLOP/s a long random
search found, on real measurements.

    python -m autotune.measure.experiments search-efficiency --long 512 --trials 64 --seeds 2 --count-at 128,512

Random search: the expected count, (n+1)/(k+1), for k of the n configs of the long random search
within the target. Guided: XGBoost-guided evolutionary search with no prior (xgb_blind), from the
roofline prior (xgb) and from a model pretrained on the other tasks (xgb_pretrained). Logs go to
--workdir and are reused; --analyze-only recounts from them.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from autotune.measure.experiments.common import add_tasks_arguments, corpus, ints, save_held_out, slug, tasks_of
from autotune.measure.timing import TimingProtocol, calls_per_sample, time_callable

if TYPE_CHECKING:
    from autotune.cost_model import Dataset
    from autotune.task import Task

# the guided searches: XGBoost-guided evolutionary search with no prior (blind), from the roofline prior
# (from scratch: no logs), and from a model pretrained on the other tasks
GUIDED = ("xgb_blind", "xgb", "xgb_pretrained")
SCRATCH = ("xgb_blind", "xgb")  # the pretrained models learn from these searches' logs (and the random ones)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_tasks_arguments(p)
    p.add_argument("--workdir", default="search-efficiency", help="where the logs are written and reused")
    p.add_argument("--long", type=int, default=128, help="trials of the long random search")
    p.add_argument("--trials", type=int, default=16, help="trials of each guided search")
    p.add_argument("--seeds", type=int, default=1, help="guided runs per task (seeds 1..N; trials are averaged "
                   "over them)")
    p.add_argument("--searches", default=",".join(GUIDED), help="the guided searches to run (the logs of the "
                   "others are reused)")
    p.add_argument("--batch", type=int, default=4, help="configs per guided round (the model refits after each)")
    p.add_argument("--corpus", default=None, help="more tuning logs (files or directories, comma-separated) of "
                   "other shapes that the pretrained models learn from too; none may hold a benchmark task")
    p.add_argument("--count-at", default=None, help="count with the target set by the first N trials of the long "
                   "random search, for each N of e.g. 128,512 (default: --long)")
    p.add_argument("--retime", type=int, default=6, help="best configs per search re-timed")
    p.add_argument("--retime-within", type=float, default=1.5, help="also re-time every config logged within "
                   "this factor of its search's best (the machine's speed drifts between and during searches)")
    p.add_argument("--rounds", type=int, default=3, help="alternating re-timing rounds")
    p.add_argument("--final-within", type=float, default=1.2, help="the re-timed configs within this factor of "
                   "the task's fastest are timed again, finely interleaved")
    p.add_argument("--final-seconds", type=float, default=40.0, help="seconds per task of the final interleaved "
                   "re-timing")
    p.add_argument("--plot", default=None, help="write the tuning curves here (PNG)")
    p.add_argument("--analyze-only", action="store_true", help="recount from the logs in --workdir")
    p.add_argument("--cache-dir", default=None, help="the compile cache of the searches and the re-timing "
                   "(default: AUTOTUNE_CACHE_DIR or ~/.cache/autotune)")


def run(args: argparse.Namespace) -> dict:
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
    from autotune.backends import dataset_from_records
    from autotune.cost_model import Dataset
    from autotune.records import load_records
    from autotune.tuning import make_runner, tune
    from autotune.measure.local import LocalRunnerOptions
    tasks = tasks_of(args)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"long_random": args.long, "trials": args.trials, "tasks": {}}
    if not args.analyze_only:
        opts = LocalRunnerOptions(protocol=TimingProtocol(warmup=1, repeat=5, min_repeat_ms=20),
                                  cache_dir=args.cache_dir)
        with make_runner("local", options=opts) as runner:
            for t in tasks:  # the long random searches (resumable: their logs are kept)
                path = work / f"random_{slug(t.key())}.jsonl"
                have = sum(r.key == t.key() and not r.retimed for r in load_records(path)) if path.exists() else 0
                if have < args.long:  # the tuner resumes the log: only the missing trials are made
                    tune(op=t, trials=args.long - have, log=path, strategy="random", seed=100, runner=runner,
                         presets=False, progress=False)
            logs = {u.key(): [work / f"random_{slug(u.key())}.jsonl"] for u in tasks}
            feats: dict[Path, Dataset] = {}
            extra = corpus(args.corpus, tasks) if "xgb_pretrained" in args.searches.split(",") else []
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
                            feats[path] = dataset_from_records(load_records(path))  # each log's features once
                        pre = save_held_out("xgb", [(key, feats[path]) for key, paths in logs.items()
                                                    for path in paths] + extra, t.key(),
                                            work / f"pre_{slug(t.key())}.json")
                    for seed in range(1, args.seeds + 1):
                        glog = work / _guided_log(name, seed, t.key())
                        glog.unlink(missing_ok=True)  # each run of the benchmark searches afresh
                        t0 = time.perf_counter()
                        tune(op=t, trials=args.trials, log=glog, cost_model="xgb", pretrained=pre,
                             roofline=name != "xgb_blind", seed=seed, runner=runner, batch=args.batch, presets=False,
                             progress=False)
                        out.setdefault("wall_s", {})[f"{name} seed {seed} {t.key()}"] = time.perf_counter() - t0
                        if name in SCRATCH:  # the pretrained models learn from random and scratch runs only
                            logs[t.key()].append(glog)
    lengths = _count_at(args)
    names = _searches_logged(work, tasks, args.seeds)
    curves: dict[str, dict[str, list[float]]] = {}
    counts: dict[int, dict[str, dict]] = {n: {} for n in lengths}
    for t in tasks:
        runs = {}
        paths = [("random", work / f"random_{slug(t.key())}.jsonl", args.long)]
        paths += [(f"{name} seed {seed}", work / _guided_log(name, seed, t.key()), args.trials)
                  for name in names for seed in range(1, args.seeds + 1)]
        for label, path, limit in paths:
            if not path.exists():
                raise SystemExit(f"{path} is missing: run the benchmark without --analyze-only first")
            runs[label] = [(r.validated_config().to_json(), r.seconds) for r in load_records(path)
                           if r.key == t.key() and not r.retimed][:limit]  # trials, not the finalists' re-timings
        top: list[dict] = []
        # every target decides on its own contenders: those of each shorter random run too
        for seq in [runs["random"][:n] for n in lengths] + list(runs.values()):
            ranked = sorted((x for x in seq if math.isfinite(x[1])), key=lambda x: x[1])
            for i, (cfg, sec) in enumerate(ranked):
                if (i < args.retime or sec <= args.retime_within * ranked[0][1]) and cfg not in top:
                    top.append(cfg)
        retimed = _retime(t, top, args.rounds, args.final_within, args.final_seconds, args.cache_dir)
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


def _trials_to(target: float, bests: Sequence[float]) -> int | None:
    """1-based index of the first trial whose best-so-far time is within the target, or None."""
    for i, best in enumerate(bests, 1):
        if best <= target:
            return i
    return None


def _running_best(seconds: Sequence[float]) -> list[float]:
    return list(itertools.accumulate(seconds, min))


def _count_at(args: argparse.Namespace) -> list[int]:
    """The lengths of --count-at (default: --long), each a prefix of the long random search."""
    lengths = ints(str(args.count_at or args.long), "--count-at", "trial counts", "128,512")
    if lengths[0] < 1 or lengths[-1] > args.long:
        raise SystemExit(f"--count-at {args.count_at!r}: each count must be between 1 and --long ({args.long})")
    return lengths


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


def _guided_log(name: str, seed: int, key: str) -> str:
    return f"{name}_s{seed}_{slug(key)}.jsonl"


def _retime(task: Task, configs: Sequence[dict], rounds: int, final_within: float,
            final_seconds: float, cache_dir: str | None = None) -> dict[str, float]:
    """Median seconds of each config over `rounds` alternating rounds in this process (kernels
    from the disk cache `cache_dir`, default: AUTOTUNE_CACHE_DIR's), keyed by the config's JSON.
    Then every config within `final_within` of the fastest is timed again, finely interleaved for
    `final_seconds`, and those medians replace theirs: the configs that decide a count near the
    target are compared under the same load."""
    from autotune.codegen import build
    from autotune.measure.check import check_output
    ins = task.inputs(seed=0)
    ref = task.reference(ins)
    runs = {}
    for cfg in configs:
        try:
            sched, opts = task.schedule(cfg)  # task.build(cfg), from the given cache
            k = build(sched, threads=task.threads, reassoc=opts.reassoc,
                      cache_dir=Path(cache_dir) if cache_dir else None, views=task.views())
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

