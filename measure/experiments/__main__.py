"""python -m autotune.measure.experiments NAME [flags]: run one experiment; --help lists them.

    python -m autotune.measure.experiments throughput --shape 512x512x512 --trials 16 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

from autotune.measure.experiments import (busy_machine, call_overhead, fused_activation, layout_scaling, model_accuracy,
                                          ray_scaling, search_efficiency, spread, streaming_stores, surrogate_efficiency,
                                          template_free, throughput, winograd)

# name -> module with add_arguments(parser), run(args) -> dict, and a docstring whose first line is its summary
EXPERIMENTS: dict[str, ModuleType] = {
    "spread": spread,
    "throughput": throughput,
    "ray-scaling": ray_scaling,
    "search-efficiency": search_efficiency,
    "surrogate-efficiency": surrogate_efficiency,
    "model-accuracy": model_accuracy,
    "call-overhead": call_overhead,
    "template-free": template_free,
    "winograd": winograd,
    "busy-machine": busy_machine,
    "fused-activation": fused_activation,
    "layout-scaling": layout_scaling,
    "streaming-stores": streaming_stores,
}


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per experiment, each with only its own flags (and --json)."""
    p = argparse.ArgumentParser(prog="python -m autotune.measure.experiments",
                                description="Run one experiment (results: measure/experiments/RESULTS.md).")
    sub = p.add_subparsers(dest="experiment", required=True, metavar="NAME")
    for name, mod in EXPERIMENTS.items():
        doc = mod.__doc__ or ""
        summary = doc.split(":", 1)[1].strip().split("\n\n")[0].replace("\n", " ").replace("%", "%%")
        sp = sub.add_parser(name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sp)
        sp.add_argument("--json", dest="json_out", default=None, help="also write the results here as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    res = EXPERIMENTS[args.experiment].run(args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
