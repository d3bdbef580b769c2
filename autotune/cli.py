"""The `autotune` command line.

    autotune list                                   operators, their dims and knobs
    autotune show OP --shape S [--config JSON]      print the generated Numba source
    autotune bench OP --shape S [--trials N]        best config vs NumPy (and torch) in one run

Errors print one line naming what is wrong, and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Sequence

from autotune.errors import AutotuneError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune", description="Tune tensor-program schedules compiled with Numba.")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list operators, their shape dims and knobs")

    def task_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("op", help="operator name (see `autotune list`)")
        sp.add_argument("--shape", help="shape like 1024x1024x1024 (default: the operator's default)")
        sp.add_argument("--dtype", default="float32", choices=["float32", "float64"])
        sp.add_argument("--threads", type=int, default=None, help="threads for parallel kernels (default: all cores)")

    show = sub.add_parser("show", help="print the generated source of a config")
    task_args(show)
    show.add_argument("--config", help="config as JSON (missing knobs take the default), or @file.json")
    show.add_argument("--trace", action="store_true", help="print the schedule trace (JSON) too")

    bench = sub.add_parser("bench", help="find the best config and time it against NumPy/torch in one run")
    task_args(bench)
    bench.add_argument("--trials", type=int, default=16, help="configs to try (presets first, then random)")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--rounds", type=int, default=3, help="alternating timing blocks for the comparison")
    bench.add_argument("--json", dest="json_out", help="write the result as JSON to this file")
    bench.add_argument("--no-progress", action="store_true")
    return p


def _task(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from autotune.task import Task
    from templates import get_template
    t = get_template(args.op)
    if args.threads is not None and args.threads < 1:
        raise AutotuneError(f"--threads must be >= 1, got {args.threads}")
    return Task.create(t, args.shape or t.default_shape, args.dtype, args.threads)


def _config(task, text: str | None):  # type: ignore[no-untyped-def]
    space = task.space()
    presets = task.template.presets(task.shape_dict, task.dtype, task.threads) if task.template.presets else []
    default = space.validate(presets[0]) if presets else space.sample(random.Random(0))
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


def cmd_list() -> int:
    from templates import TEMPLATES
    for name, t in sorted(TEMPLATES.items()):
        shape = t.parse_shape(t.default_shape)
        space = t.space(shape, "float32", 2)
        print(f"{name:<18} {t.description}")
        print(f"{'':<18} shape: {t.dims_help()}  (default {t.default_shape})")
        for k in space.knobs:
            vals = k.values()
            shown = ", ".join(map(str, vals[:6])) + (", ..." if len(vals) > 6 else "")
            print(f"{'':<18}   {k.name:<14} {len(vals):>5} values: {shown}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    task = _task(args)
    cfg = _config(task, args.config)
    sched, opts = task.schedule(cfg)
    from autotune.codegen import generate_source
    print(f"# {task.key()}  config {cfg.key()}")
    if args.trace:
        print("# trace: " + json.dumps(sched.trace_json()))
    print(generate_source(sched, reassoc=opts.reassoc))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from autotune.bench import BenchOptions, format_result, run_bench
    task = _task(args)
    if args.trials < 1:
        raise AutotuneError(f"--trials must be >= 1, got {args.trials}")
    opts = BenchOptions(trials=args.trials, seed=args.seed, rounds=max(1, args.rounds),
                        progress=not args.no_progress and sys.stderr.isatty())
    result = run_bench(task, opts)
    print(format_result(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return cmd_list()
        if args.command == "show":
            return cmd_show(args)
        return cmd_bench(args)
    except AutotuneError as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"autotune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
