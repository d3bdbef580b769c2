"""The `autotune` command line.

    autotune list                                   operators, their dims and knobs
    autotune targets                                the targets AUTOTUNE_TARGET may name; which run here
    autotune show OP --shape S [--config JSON]      print the generated Numba source
    autotune bench OP --shape S [--trials N]        best config vs NumPy (and torch) in one run
    autotune tune OP --shape S --trials N --log F   tune, logging every measurement (resumes F)
    autotune train-model LOG... --out M.json        train a cost model (xgb, lgbm) on logs
    autotune evaluate-model --model M --log L        Kendall tau, top-k, APE on a held-out log
    autotune sweep SPEC --log F [--address ADDR]    many tasks over Ray into one log (resumes F)
    autotune evaluate-tiles [--kernels N]           TPU tile selection: APE, learned vs analytical
    autotune report LOG [--plot PNG]                summary table and tuning curves of a log
    autotune replay LOG [--json OUT]                re-verify and re-time the best kernels of a log
    autotune retime LOG [--top N] [--rounds R]      time each task's finalists again (alternating), appending to LOG
    autotune cache [--prune] [--max-mb N]           the kernel cache's size; prune it, least recently used first
    autotune generate-layout DIR [--nodes MIN:MAX]  write a SYNTHETIC TpuGraphs layout set (planted cost)
    autotune train-layout DIR [--segment-size S]    train the layout GNN (Graph Segment Training) on DIR/train
    autotune evaluate-layout DIR --model M          Kendall tau per graph of a layout model on DIR/test

Errors print one line naming what is wrong, and exit with status 2: a bad option value is
caught before anything runs. A run in which every trial failed exits with status 1 and one line
naming the most common failure and one of its messages.

--trials counts the trials to make in this run, in `tune`, `bench` and a sweep spec alike:
measurements resumed from the log are not counted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from autotune.arguments import float_where, int_at_least
from autotune.cost_model import CPU_MODELS, TRAINABLE_MODELS
from autotune.errors import AutotuneError
from autotune.search import STRATEGIES
from autotune.tuning import RUNNERS


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors one line (main prints them and exits with status 2)."""

    def error(self, message: str) -> NoReturn:
        raise AutotuneError(f"{message} (see `{self.prog} --help`)")


_seconds = float_where(lambda v: v > 0, "a finite number of seconds > 0")
_megabytes = float_where(lambda v: v >= 0, "a size in MB >= 0")


def _tile_models(text: str) -> list[str]:
    from autotune.backends.tpu.evaluate import MODELS
    names = [m for m in text.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown models {unknown}; choose from {', '.join(MODELS)}" if unknown
                                         else "name at least one model")
    return names


POSITIVE, COUNT = int_at_least(1), int_at_least(0)
SHAPE_CHARS = re.compile(r"^[0-9xX ]*$")


def _shape(text: str) -> str:
    """A shape as the command line takes it: integers joined by 'x' (64x64x64); anything else
    (commas, other separators, words) is an error naming that form. The numbers' count and values
    are checked against the operator later (autotune.templates.base.Template.parse_shape)."""
    if not SHAPE_CHARS.match(text) or not text.strip():
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: expected integers joined by 'x', like 64x64x64")
    return text


TRIALS_HELP = "trials to make in this run (measurements resumed from the log are not counted)"
NO_PROGRESS_HELP = ("no progress while tuning (default: a live bar on a terminal, elsewhere a plain line every "
                    "few seconds on stderr)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autotune", description="Tune tensor-program schedules compiled with Numba.")
    sub = p.add_subparsers(dest="command", required=True)

    lst = sub.add_parser("list", help="list operators, their shape dims and knobs (with OP: its knobs at --shape)")
    sub.add_parser("targets", help="list the targets AUTOTUNE_TARGET may name and which this machine runs")

    def task_args(sp: argparse.ArgumentParser, op_nargs: str | None = None) -> None:
        sp.add_argument("op", nargs=op_nargs, help="operator name (see `autotune list`)")
        sp.add_argument("--shape", type=_shape, help="shape: integers joined by 'x', like 1024x1024x1024, in the "
                        "order `autotune list` gives the operator's dims (default: the operator's default)")
        sp.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                        help="element type of the inputs and output (default: float32)")
        sp.add_argument("--threads", type=POSITIVE, default=None, help="threads for parallel kernels (default: all cores)")

    def search_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--strategy", default=None, choices=STRATEGIES.names(),
                        help="search strategy (default: evolutionary)")
        sp.add_argument("--cost-model", choices=list(CPU_MODELS), default=None,
                        help="steer the evolutionary search with a cost model refitted every batch (it starts "
                        "from the CPU roofline estimate, or from --pretrained); not with another --strategy")
        sp.add_argument("--pretrained", help="a saved model (autotune train-model) to warm-start the cost model")

    task_args(lst, "?")
    show = sub.add_parser("show", help="print the generated source of a config")
    task_args(show)
    show.add_argument("--config", help="config as JSON (missing knobs take the default), or @file.json")
    show.add_argument("--trace", action="store_true", help="print the schedule trace (JSON) too")

    bench = sub.add_parser("bench", help="find the best config and time it against NumPy/torch in one run")
    task_args(bench)
    bench.add_argument("--trials", type=COUNT, default=16,
                       help=TRIALS_HELP + ", presets first; 0 with --log re-times the log's best")
    bench.add_argument("--seed", type=COUNT, default=0, help="random seed of the search and the inputs (default: 0)")
    bench.add_argument("--rounds", type=POSITIVE, default=3, help="alternating timing blocks for the comparison")
    bench.add_argument("--log", help="tuning log to reuse and extend (default: a temporary one)")
    search_args(bench)
    bench.add_argument("--json", dest="json_out", help="write the result as JSON to this file")
    bench.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    tn = sub.add_parser("tune", help="tune an operator at a shape, logging every measurement")
    task_args(tn)
    tn.add_argument("--trials", type=POSITIVE, default=64, help=TRIALS_HELP)
    tn.add_argument("--log", required=True, help="tuning log (JSON lines); an existing log is resumed")
    search_args(tn)
    tn.add_argument("--runner", choices=RUNNERS.names(), default=None,
                    help="where to measure (default: the operator's backend; local worker processes for CPU)")
    tn.add_argument("--seed", type=COUNT, default=0, help="random seed of the search (default: 0)")
    tn.add_argument("--batch", type=POSITIVE, default=8, help="configs compiled in parallel per round")
    tn.add_argument("--timeout", type=_seconds, default=None, help="wall-time budget in seconds")
    tn.add_argument("--early-stopping", type=POSITIVE, default=None, help="stop after N trials without improvement")
    tn.add_argument("--json", dest="json_out", help="write a summary as JSON to this file")
    tn.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)

    tm = sub.add_parser("train-model", help="train a cost model on tuning logs and save it")
    tm.add_argument("logs", nargs="+", help="tuning logs to learn from")
    tm.add_argument("--model", choices=list(TRAINABLE_MODELS), default="xgb", help="the kind of model (default: xgb)")
    tm.add_argument("--objective", choices=["rank", "regression"], default="rank",
                    help="rank: learn the order of configs within a task (what a search needs); regression: "
                    "learn their throughput (default: rank)")
    tm.add_argument("--out", required=True, help="model file to write (JSON)")

    ev = sub.add_parser("evaluate-model", help="rank a held-out log with a model: Kendall tau, top-k, APE")
    ev.add_argument("--model", required=True, help="a saved model file")
    ev.add_argument("--log", required=True, help="held-out tuning log")
    ev.add_argument("--plot", help="write predicted score vs measured throughput to this PNG")
    ev.add_argument("--json", dest="json_out", help="write the scores as JSON to this file")

    sw = sub.add_parser("sweep", help="tune many operators x shapes over Ray into one log")
    sw.add_argument("spec", help="sweep spec (TOML or YAML): [[task]] entries with op, shapes, dtypes, trials "
                    "(each task's " + TRIALS_HELP + ", as in `autotune tune --trials`)")
    sw.add_argument("--log", required=True, help="the log every record streams into (resumed if it exists)")
    sw.add_argument("--address", help="a Ray cluster address (default: start a local Ray)")
    sw.add_argument("--compile-workers", type=POSITIVE, default=1, help="parallel compiles per task")
    sw.add_argument("--no-progress", action="store_true",
                    help="no live table on a terminal, no progress line every few seconds elsewhere (a plain table "
                    "is printed at the end)")

    et = sub.add_parser("evaluate-tiles", help="TPU tile selection: APE of learned vs analytical models")
    et.add_argument("--kernels", type=POSITIVE, default=300, help="random kernels (ResNet, BERT, EfficientNet-like)")
    et.add_argument("--seed", type=COUNT, default=0, help="random seed of the kernels and models (default: 0)")
    et.add_argument("--models", type=_tile_models, default="analytical,xgb,lgbm,gnn,random",
                    help="comma-separated cost models to compare")
    et.add_argument("--search-kernels", type=COUNT, default=10,
                    help="held-out kernels tuned with guided search (0: none)")
    et.add_argument("--export", help="write the dataset as TpuGraphs tile .npz files into this directory")
    et.add_argument("--json", dest="json_out", help="write the scores as JSON to this file")
    et.add_argument("--real", metavar="FILE", help="score on real TPU runs (format of ../shared/tpu_real/kernels.json): "
                    "emulator, learned models trained on emulator data, learned corrections of the emulator trained on "
                    "the real runs (xgb+emu, lgbm+emu), analytical, XLA's default; failed runs are counted, never chosen")
    et.add_argument("--loko", action="store_true", help="with --real: also leave-one-kernel-out - each kernel scored by "
                    "predictors fitted without it (the emulator's constants refitted on the other kernels)")

    rep = sub.add_parser("report", help="summarise a log and draw its tuning curves")
    rep.add_argument("log", help="a tuning log (JSON lines)")
    rep.add_argument("--plot", help="write the tuning curves (best vs trials and vs wall time) and the best kernels "
                     "against this machine's roofline to this PNG (its folders are made; may measure the machine's "
                     "peak once, a few seconds)")

    pk = sub.add_parser("peak", help="this machine's limits that bench, report and the dashboard give shares of: the FMA "
                        "peak and the read and copy rates of each cache level and of memory (measured once, a few "
                        "seconds, then read from the cache)")
    pk.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    pk.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="element type (default: float32)")
    pk.add_argument("--again", action="store_true", help="measure anew, nothing else running (replaces the cached one)")

    ca = sub.add_parser("cache", help="show the kernel cache's size (AUTOTUNE_CACHE_DIR); prune it to a cap, least "
                        "recently used kernels first")
    ca.add_argument("--prune", action="store_true",
                    help="remove generated kernels and their Numba cache files, least recently used first, until the "
                    "cache is at most --max-mb (keys, the timing lock and peak.json stay)")
    ca.add_argument("--max-mb", type=_megabytes, default=None,
                    help="the cap in MB (10^6 bytes) for --prune; without --prune, say what pruning to it would remove "
                    "(default: AUTOTUNE_CACHE_MAX_MB, else 500)")

    db = sub.add_parser("dashboard", help="a local web page over logs, updating while tuners and sweeps append: "
                        "best-so-far curves, measured configs, a sweep's tasks (needs the [dashboard] extra)")
    db.add_argument("logs", nargs="+", metavar="LOG",
                    help="tuning logs (JSON lines); one not yet written is waited for")
    db.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    db.add_argument("--port", type=int_at_least(0), default=8050, help="port (default: 8050; 0: any free port)")
    db.add_argument("--bench", action="append", default=[], metavar="FILE",
                    help="an `autotune bench --json` file whose baselines to show (repeatable; those beside a "
                         "log are found)")
    db.add_argument("--interval", type=_seconds, default=1.0, help="seconds between updates of the page (default: 1)")

    rp = sub.add_parser("replay", help="rebuild, re-verify and re-time the best kernel of each task in a log")
    rp.add_argument("log", help="a tuning log (JSON lines)")
    rp.add_argument("--threads", type=POSITIVE, default=None, help="time with this many threads (default: as logged)")
    rp.add_argument("--json", dest="json_out", help="write the table as JSON to this file")
    rp.add_argument("--any-target", action="store_true",
                    help="also replay records measured on a machine of another ISA (with a warning)")
    rp.add_argument("--trust", action="append", default=[], metavar="MODULE:FUNCTION|SHA256",
                    help="a hand-written kernel (autotune_numba) whose logged source may be compiled: your module's "
                         "function, or the SHA-256 of its source (repeatable; also AUTOTUNE_TRUSTED_KERNELS)")

    rt = sub.add_parser("retime", help="time the finalists of every task of a log again, in alternating rounds, and "
                        "append the re-timings (run it when the machine is quiet)")
    rt.add_argument("log", help="a tuning log (JSON lines); the re-timings are appended to it")
    rt.add_argument("--top", type=POSITIVE, default=5,
                    help="finalists per task: this many whose quiet timings are within 25%% of the fastest, and up to "
                    "3x as many timed while the machine was busy (default: 5)")
    rt.add_argument("--rounds", type=POSITIVE, default=5, help="alternating timing rounds (default: 5)")
    rt.add_argument("--any-target", action="store_true",
                    help="also re-time records measured on a machine of another ISA (with a warning)")
    rt.add_argument("--json", dest="json_out", help="write the table as JSON to this file")

    from autotune.backends.tpu.layout_commands import add_layout_parsers  # argparse only: light
    add_layout_parsers(sub)   # generate-layout, train-layout, evaluate-layout
    return p


def _task(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from autotune.task import Task
    from autotune.templates import get_template
    t = get_template(args.op)
    return Task.create(t, args.shape or t.default_shape, args.dtype, args.threads)


def _config(task, text: str | None):  # type: ignore[no-untyped-def]
    space = task.space()
    default = task.default_config()
    if text is None:
        return default
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise AutotuneError(f"cannot read config file {text[1:]!r}: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AutotuneError(f"--config is not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, dict):
        raise AutotuneError("--config must be a JSON object of knob values")
    return space.validate({**default.to_json(), **data})  # knobs not given keep the default


def cmd_list(args: argparse.Namespace) -> int:
    from autotune.templates import TEMPLATES
    if args.op is not None:  # one operator's knobs at a shape
        task = _task(args)
        dims = ", ".join(f"{k}={v}" for k, v in task.shape)
        _print_knobs(task.template, task.space(), f"{task.template.dims_help()} = {task.shape_str()} ({dims}), "
                                                  f"{task.dtype}, threads={task.threads}")
        return 0
    print("operators, their shape dims, and their knobs with the values they take at the default shape "
          "(float32, 2 threads; another shape's: `autotune list OP --shape S`)")
    for name, t in sorted(TEMPLATES.items()):
        if t.default_shape:
            _print_knobs(t, t.space(t.parse_shape(t.default_shape), "float32", 2),
                         f"{t.dims_help()}  (default {t.default_shape})")
    return 0


def _print_knobs(t: Any, space: Any, shape_line: str) -> None:
    print(f"{t.name:<18} {t.description}")
    print(f"{'':<18} shape: {shape_line}")
    for k in space.knobs:
        vals = k.values()
        shown = ", ".join(map(str, vals[:6])) + (", ..." if len(vals) > 6 else "")
        print(f"{'':<18}   {k.name:<14} {len(vals):>5} values: {shown}")


def cmd_targets() -> int:
    from autotune.target import TARGETS, cpu_model, describe, executable, target_name
    in_force = target_name()
    print(f"{'target':<8} {'isa':<8} {'vector':>8} {'f32 lanes':>9} {'registers':>9}  on this machine")
    for name in TARGETS:
        t = describe(name)
        runs = "runs its code" if executable(name) else "describes only (cannot run its code)"
        mark = "  <- in force" if name == in_force else ""
        print(f"{name:<8} {t.isa:<8} {t.vector_bits:>4} bit {t.lanes('float32'):>9} {t.registers:>9}  {runs}{mark}")
    print(f"this machine: {cpu_model()}; pick a target with AUTOTUNE_TARGET=NAME (default: host)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    task = _task(args)
    cfg = _config(task, args.config)
    sched, opts = task.schedule(cfg)
    from autotune.codegen import generate_source
    from autotune.display import readable_key
    print(f"# {readable_key(task.key())}  config {cfg.key()}")
    if args.trace:
        print("# trace: " + json.dumps(sched.trace_json()))
    print(generate_source(sched, reassoc=opts.reassoc, noalias=opts.noalias))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from autotune.bench import BenchOptions, format_result, run_bench
    task = _task(args)
    if args.trials == 0 and not args.log:
        raise AutotuneError("--trials must be >= 1 (or 0 with --log: re-time the log's best), got 0")
    opts = BenchOptions(trials=args.trials, seed=args.seed, rounds=args.rounds, progress=not args.no_progress)
    result = run_bench(task, opts, log=args.log, strategy=args.strategy, cost_model=args.cost_model,
                       pretrained=args.pretrained)
    print(format_result(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from autotune.display import readable_key
    from autotune.retime import busy_note
    from autotune.tuning import NoValidConfig, no_valid_config, tune
    task = _task(args)
    try:
        result = tune(op=task, trials=args.trials, log=args.log, strategy=args.strategy, cost_model=args.cost_model,
                      pretrained=args.pretrained, runner=args.runner, seed=args.seed, timeout_s=args.timeout,
                      early_stopping=args.early_stopping, batch=args.batch,
                      progress=False if args.no_progress else None)
    except NoValidConfig as e:  # the summary and --json still say what the run did
        result = e.result
    unit = task.template.metric
    twins = f", {result.duplicates} not measured: the same kernel as one measured" if result.duplicates else ""
    finals = f"; {result.retimed} finalists timed again in alternating rounds" if result.retimed else ""
    limit = f" ({100 * result.share:.0f}% of the limit)" if result.share is not None else ""
    print(f"{readable_key(task.key())}: best {result.best_gflops:.1f} {unit}{limit} after {result.measured} new trials "
          f"({result.resumed} resumed from the log, {result.errors} failed{twins}) in {result.wall_seconds:.1f} s"
          f"{finals}")
    if result.best_config is not None:
        print(f"best config: {result.best_config.key()}")
    note = busy_note(result.noisy, result.timed, args.log)
    if note:
        print(note)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "task": task.key(), "threads": task.threads, "trials": result.measured, "resumed": result.resumed,
            "errors": result.errors, "duplicates": result.duplicates, "wall_seconds": result.wall_seconds,
            "timings": result.timed, "noisy_timings": result.noisy, "retimed": result.retimed,
            "best_seconds": result.best_seconds,
            "best_gflops": result.best_gflops,
            "best_config": result.best_config.to_json() if result.best_config else None}, indent=2) + "\n")
    if result.best_config is None:
        print(f"autotune: error: {no_valid_config(result)}", file=sys.stderr)
        return 1
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from autotune.distributed import load_spec, run_sweep
    spec = load_spec(args.spec)  # every entry checked before anything starts
    states = run_sweep(spec, args.log, address=args.address, compile_workers=args.compile_workers,
                       progress=not args.no_progress)
    # the live table stays on a terminal; the plain one is for a redirected stdout (a log, a pipe)
    shown_live = not args.no_progress and sys.stderr.isatty() and sys.stdout.isatty()
    from autotune.display import readable_key
    failed = 0
    for key, st in states.items():
        if not shown_live:
            print(f"{readable_key(key):<44} {st.new:>4}/{st.task.trials:<4} {st.status}")
        failed += st.status.startswith("failed")
    print(f"records are in {args.log}; replay them with `autotune replay {args.log}`")
    from autotune.retime import busy_note
    note = busy_note(sum(st.noisy for st in states.values()), sum(st.timed for st in states.values()), args.log)
    if note:
        print(note)
    return 1 if failed else 0


def cmd_replay(args: argparse.Namespace) -> int:
    from autotune.replay import format_rows, replay_log
    rows = replay_log(args.log, threads=args.threads, any_target=args.any_target, trusted=args.trust)
    if not rows:
        raise AutotuneError(f"the log {args.log} has no successful measurement to replay")
    print(format_rows(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0 if all(r.error is None for r in rows) else 1


def cmd_retime(args: argparse.Namespace) -> int:
    from autotune.display import readable_key
    from autotune.retime import busy_note
    from autotune.task import speed_unit
    from autotune.tuning import RetimeRow, retime
    print(f"re-timing the finalists of each task of {args.log} in {args.rounds} alternating rounds", flush=True)

    def speed(row: RetimeRow, seconds: float) -> str:
        per, unit = speed_unit(row.before.task().flops() if row.error is None else 0.0)
        return f"{per / seconds:.1f} {unit}"

    def show(row: RetimeRow) -> None:
        changed = "" if row.after.config_key() == row.before.config_key() else "; a new best config"
        print(f"{readable_key(row.key)}: {row.retimed} re-timed ({row.noisy} noisy); best {speed(row, row.before.seconds)} "
              f"before, {speed(row, row.after.seconds)} after{changed}", flush=True)
    def start(key: str, finalists: int, rounds: int) -> None:
        print(f"{readable_key(key)}: re-timing {finalists} finalist{'s' * (finalists != 1)} in {rounds} alternating "
              "rounds...", flush=True)
    rows = retime(log=args.log, top=args.top, rounds=args.rounds, any_target=args.any_target, on_task=show,
                  on_start=start)
    for row in rows:
        if row.error is not None:
            print(f"{readable_key(row.key)}: not re-timed: {row.error}")
    note = busy_note(sum(r.noisy for r in rows), sum(r.retimed for r in rows), args.log)
    if note:
        print(note)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([{
            "task": r.key, "retimed": r.retimed, "noisy": r.noisy, "error": r.error,
            "before": {"config": dict(r.before.config), "seconds": r.before.seconds},
            "after": {"config": dict(r.after.config), "seconds": r.after.seconds}} for r in rows], indent=2) + "\n")
    return 1 if any(r.error for r in rows) else 0


def cmd_cache(args: argparse.Namespace) -> int:
    from autotune.cache import MB, prune, usage
    from autotune.environment import cache_max_mb
    now = usage()
    print(f"cache {now.describe()}")
    cap = cache_max_mb()
    print("cap when a tuning session starts: " + (f"{cap:g} MB" if cap > 0 else "none") + " (AUTOTUNE_CACHE_MAX_MB)")
    if not args.prune and args.max_mb is None:
        return 0
    limit = args.max_mb if args.max_mb is not None else cap
    if args.max_mb is None and cap <= 0:
        raise AutotuneError("AUTOTUNE_CACHE_MAX_MB=0 sets no cap: pass --max-mb N to prune to N MB")
    done = prune(max_bytes=int(limit * MB), dry_run=not args.prune)
    if args.prune:
        print(f"removed {done.kernels} least recently used kernels ({done.bytes / MB:.1f} MB); now {done.after.describe()}")
    else:
        print(f"--prune --max-mb {limit:g} would remove {done.kernels} least recently used kernels "
              f"({done.bytes / MB:.1f} MB)")
    return 0


def cmd_peak(args: argparse.Namespace) -> int:
    from autotune.measure.peak import machine_peak
    threads = args.threads or os.cpu_count() or 1
    if args.again:
        print(f"autotune: measuring this machine's peak on {threads} thread{'s' * (threads > 1)} (a few seconds)...",
              file=sys.stderr, flush=True)
    p = machine_peak(args.dtype, threads, again=args.again)
    mib = lambda n: f"{n / (1 << 20):g} MiB"  # noqa: E731
    print(f"{p.cpu}, {p.isa}, {p.dtype}, {p.threads} thread{'s' * (p.threads > 1)} (measured {p.measured})")
    print(f"  FMA peak        {p.gflops:8.1f} GFLOP/s")
    print(f"  read            {p.l2_gbps:8.1f} GB/s from the L2s (up to {mib(p.l2_bytes)}), {p.l3_gbps:.1f} from the "
          f"L3 (up to {mib(p.l3_bytes)}), " + "".join(f"{g:.1f} at {mib(n)}, " for n, g in p.beyond)
          + f"{p.read_gbps:.1f} from memory")
    if p.copy:
        (n0, g0), rest = p.copy[0], p.copy[1:]
        print(f"  copy            {g0:8.1f} GB/s at {mib(n0)}" + "".join(f", {g:.1f} at {mib(n)}" for n, g in rest)
              + " (bytes read and written, source and destination together)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "targets":
            return cmd_targets()
        if args.command == "show":
            return cmd_show(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "train-model":
            from autotune.model_commands import train_model
            return train_model(args.logs, args.model, args.objective, args.out)
        if args.command == "evaluate-model":
            from autotune.model_commands import evaluate_model
            return evaluate_model(args.model, args.log, args.plot, args.json_out)
        if args.command == "sweep":
            return cmd_sweep(args)
        if args.command == "evaluate-tiles":
            if args.real:
                from autotune.backends.tpu.evaluate import REAL_MODELS, run_real
                res = run_real(args.real, [m for m in args.models if m in REAL_MODELS], seed=args.seed, loko=args.loko)
            else:
                from autotune.backends.tpu.evaluate import run as run_tiles
                res = run_tiles(args.kernels, args.seed, args.models, args.export, args.search_kernels)
            if args.json_out:
                Path(args.json_out).write_text(json.dumps(res, indent=2, default=float) + "\n")
            return 0
        if args.command == "report":
            from autotune.report import report
            return report(args.log, args.plot)
        if args.command == "dashboard":
            from autotune.dashboard import run_dashboard
            return run_dashboard(args.logs, host=args.host, port=args.port, bench=args.bench, interval=args.interval)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "retime":
            return cmd_retime(args)
        if args.command == "cache":
            return cmd_cache(args)
        if args.command == "peak":
            return cmd_peak(args)
        if args.command in ("generate-layout", "train-layout", "evaluate-layout"):
            from autotune.backends.tpu.layout_commands import run_layout_command
            return run_layout_command(args)
        return cmd_bench(args)
    except AutotuneError as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, and keep Python's exit flush quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
