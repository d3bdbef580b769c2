"""The layout subcommands of the `autotune` command line (wired in autotune/cli.py):

    autotune generate-layout DIR [--train N --valid N --test N --nodes MIN:MAX --configs C]
                                                    write a SYNTHETIC layout set (TpuGraphs .npz)
    autotune train-layout DIR [--out M.pt] [--segment-size S] [--sample-segments K] ...
                                                    train the layout GNN with Graph Segment Training
    autotune evaluate-layout DIR --model M.pt [--split test] [--csv F]
                                                    Kendall tau per graph of a trained layout model

Only argparse is imported here; numpy, torch and the model load when a command runs.

Example::

    >>> import argparse
    >>> p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command")
    >>> add_layout_parsers(sub)
    >>> p.parse_args(["train-layout", "d", "--segment-size", "500"]).segment_size
    500
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autotune.arguments import float_where, int_at_least

COMMANDS = ("generate-layout", "train-layout", "evaluate-layout")


_fraction = float_where(lambda v: 0 <= v < 1, "a probability in [0, 1)")


def _segment(text: str) -> int | None:
    if text.lower() in ("none", "full", "0"):
        return None
    return int_at_least(1)(text)


def _nodes(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be MIN:MAX node counts (e.g. 300:600), got {text!r}") from None
    if not 3 <= a <= b:
        raise argparse.ArgumentTypeError(f"must be MIN:MAX with 3 <= MIN <= MAX, got {text!r}")
    return a, b


def add_layout_parsers(sub: Any) -> None:
    """Add generate-layout, train-layout and evaluate-layout to an argparse subparsers object."""
    gen = sub.add_parser("generate-layout", help="write a SYNTHETIC TpuGraphs layout set (planted cost) to DIR")
    gen.add_argument("directory", help="where to write train/, valid/ and test/ (and SYNTHETIC.json)")
    gen.add_argument("--train", type=int_at_least(0), default=24, help="training graphs (default: 24)")
    gen.add_argument("--valid", type=int_at_least(0), default=6, help="validation graphs (default: 6)")
    gen.add_argument("--test", type=int_at_least(0), default=6, help="test graphs (default: 6)")
    gen.add_argument("--nodes", type=_nodes, default=(300, 600), help="MIN:MAX nodes per graph, log-uniform "
                     "(default: 300:600; up to 100000 and more)")
    gen.add_argument("--configs", type=int_at_least(2), default=32,
                     help="configs per graph (default: 32; the real collection has thousands, and with few "
                     "the model fits the training graphs' configs: RESULTS uses 256)")
    gen.add_argument("--seed", type=int_at_least(0), default=0, help="random seed of the graphs and their costs")

    tr = sub.add_parser("train-layout", help="train the layout GNN on DIR/train (Graph Segment Training), "
                        "validated on DIR/valid")
    tr.add_argument("directory", help="a layout set: train/, valid/ (and test/) of TpuGraphs layout .npz files")
    tr.add_argument("--out", default="layout-model.pt", help="where to save the model (default: layout-model.pt)")
    tr.add_argument("--epochs", type=int_at_least(0), default=20,
                    help="training epochs (default: 20; what one is: --epoch)")
    tr.add_argument("--epoch", dest="epoch_unit", choices=("segments", "graphs"), default="segments",
                    help="what an epoch is: 'segments' (default) one pass over the training data, every segment of "
                    "every graph trained once (ceil(segments/K) steps per graph on one sample of its configs, K = "
                    "--sample-segments), so every node gets a gradient once per epoch as in full-graph training; "
                    "'graphs' GST's code's epoch, one step per graph with K random segments (a node of a graph of k "
                    "segments is trained about once in k/K epochs). With whole graphs both are one step per graph")
    tr.add_argument("--segment-size", type=_segment, default=1000,
                    help="S: at most this many nodes per segment; 'none' trains whole graphs (default: 1000)")
    tr.add_argument("--accumulate", action="store_true",
                    help="with --epoch segments: add up the gradients of a graph's segments into one optimizer step "
                    "per graph (as many steps as full-graph training; memory still one segment's at a time)")
    tr.add_argument("--halo", type=int_at_least(0), default=1,
                    help="hops of read-only context around each segment: the outside nodes within this many hops "
                    "run with it (not counted in its readout), so an edge cut by the segmentation still carries its "
                    "other end's layout; 0 drops cut edges, as GST's code does (default: 1)")
    tr.add_argument("--sample-segments", type=int_at_least(1), default=1,
                    help="segments run with gradient per step; the others come from the embedding table (default: 1)")
    tr.add_argument("--sample-configs", type=int_at_least(2), default=16, help="configs per step (default: 16)")
    tr.add_argument("--sed", type=_fraction, default=0.0, help="Stale Embedding Dropout: the probability of leaving "
                    "out each other segment in a step (default: 0; the runtime being ranked includes it)")
    tr.add_argument("--fill", choices=("all", "missing", "none"), default="all",
                    help="the other segments' embeddings of the step's configs: recomputed without gradient ('all', "
                    "default: at every step with --epoch graphs; with --epoch segments at a graph's first step of the "
                    "epoch, its later steps taking what that pass computed or trained), only when the table lacks them "
                    "('missing': stale ones otherwise), or never ('none': missing ones left out)")
    tr.add_argument("--finetune-epochs", type=int_at_least(0), default=5,
                    help="prediction-head finetuning epochs on fresh embeddings (default: 5)")
    tr.add_argument("--hidden", type=int_at_least(1), default=32, help="width of the GraphSAGE layers (default: 32)")
    tr.add_argument("--layers", type=int_at_least(1), default=3, help="GraphSAGE layers (default: 3)")
    tr.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate (default: 0.002)")
    tr.add_argument("--seed", type=int_at_least(0), default=0, help="random seed of the weights and the sampling")
    tr.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads (default: torch's)")
    tr.add_argument("--generate", action="store_true",
                    help="first write a SYNTHETIC set into DIR (generate-layout's defaults) if DIR/train is absent")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.add_argument("--json", dest="json_out", help="write the training history as JSON to this file")

    ev = sub.add_parser("evaluate-layout", help="Kendall tau per graph of a layout model on DIR/SPLIT")
    ev.add_argument("directory", help="a layout set: its test/ (or --split) files are scored")
    ev.add_argument("--model", required=True, help="a model written by train-layout")
    ev.add_argument("--split", default="test", help="the split to score (default: test)")
    ev.add_argument("--csv", help="write the rankings in the dataset's submission form (ID,TopConfigs)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.add_argument("--json", dest="json_out", help="write the per-graph results as JSON to this file")


def _dump(path: str | None, obj: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(obj, indent=2, default=float) + "\n")


def run_layout_command(args: argparse.Namespace) -> int:
    """Run a parsed generate-layout / train-layout / evaluate-layout command; errors raise
    AutotuneError subclasses (the CLI prints them as one line)."""
    from autotune.backends.tpu.layout_data import generate_layout_dataset
    if args.command == "generate-layout":
        out = generate_layout_dataset(args.directory, args.train, args.valid, args.test, args.nodes, args.configs,
                                      args.seed)
        print(f"wrote a SYNTHETIC layout set to {args.directory}: "
              + ", ".join(f"{k} {len(v)}" for k, v in out.items()) + " graphs")
        return 0
    from autotune.backends.tpu.layout_model import evaluate_layout, train_layout
    if args.command == "train-layout":
        if args.generate and not (Path(args.directory) / "train").is_dir():
            generate_layout_dataset(args.directory)
            print(f"wrote a SYNTHETIC layout set to {args.directory}")
        res = train_layout(args.directory, out=args.out, epochs=args.epochs, segment_size=args.segment_size,
                           sample_segments=args.sample_segments, sample_configs=args.sample_configs, sed=args.sed,
                           finetune_epochs=args.finetune_epochs, hidden=args.hidden, layers=args.layers, lr=args.lr,
                           seed=args.seed, progress=not args.no_progress, threads=args.threads, fill=args.fill,
                           halo=args.halo, epoch_unit=args.epoch_unit, accumulate=args.accumulate)
        print(f"trained on {res.train_graphs} graphs (largest {res.max_graph_nodes} nodes; at most "
              f"{res.max_grad_nodes} nodes with gradient per step, halo included) in {res.seconds:.1f} s; "
              f"best validation tau {res.best_val_tau:.3f}; saved {args.out}")
        _dump(args.json_out, res.summary())
        return 0
    res_ev = evaluate_layout(args.directory, args.model, split=args.split, csv=args.csv, progress=not args.no_progress)
    print(f"{args.split}: mean Kendall tau {res_ev['mean_tau']:.3f} over {res_ev['labelled']} labelled graphs "
          f"(random scores: {res_ev['random_mean_tau']:.3f})", file=sys.stdout)
    _dump(args.json_out, res_ev)
    return 0


__all__ = ["COMMANDS", "add_layout_parsers", "run_layout_command"]
