"""layout-scaling: peak memory and seconds per epoch of the layout model's training against graph size, for
full-graph training and for Graph Segment Training (segments of at most S nodes), on SYNTHETIC layout graphs.

Each (size, mode) runs `autotune.backends.tpu.layout_model.train_layout` in a fresh Python subprocess, so
its peak resident memory is its own (os.wait4's ru_maxrss of that child); the child also reports its
resident peak after loading the graphs (the input arrays, which every mode holds) and the seconds of each
training epoch (--epoch: 'segments', train-layout's default, trains every segment of every graph once per
epoch, so a GST epoch has as many gradient nodes as a full-graph one; 'graphs' one step per graph, as GST's
code). No validation and no head finetuning run: only the training epochs.
The graphs are written by autotune.backends.tpu.layout_data (a planted cost, not measured on a TPU).
Run it alone on a quiet machine: the seconds are wall-clock.

    python -m autotune.measure.experiments layout-scaling --sizes 1000,10000,100000 --segment-size 1000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("full", "gst")


def _sizes(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated node counts, got {text!r}") from None
    if not out or min(out) < 3:
        raise argparse.ArgumentTypeError(f"node counts must be at least 3, got {text!r}")
    return out


def _modes(text: str) -> list[str]:
    out = [v.strip() for v in text.split(",") if v.strip()]
    if not out or any(m not in MODES for m in out):
        raise argparse.ArgumentTypeError(f"modes must be among {','.join(MODES)}, got {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=_sizes, default=[1000, 10000, 100000], help="nodes per graph, comma-separated "
                   "(default: 1000,10000,100000)")
    p.add_argument("--segment-size", type=int, default=1000, help="S: GST's segment size in nodes (default: 1000)")
    p.add_argument("--sample-segments", type=int, default=1, help="GST: segments with gradient per step (default: 1)")
    p.add_argument("--halo", type=int, default=1, help="GST: hops of read-only context around each segment "
                   "(train-layout --halo; default: 1)")
    p.add_argument("--epoch", dest="epoch_unit", choices=("segments", "graphs"), default="segments",
                   help="GST: what an epoch is (train-layout --epoch; default: segments, every segment trained once)")
    p.add_argument("--modes", type=_modes, default=list(MODES), help="full,gst (default: both)")
    p.add_argument("--graphs", type=int, default=2, help="training graphs per size (default: 2)")
    p.add_argument("--configs", type=int, default=16, help="configs per graph (default: 16)")
    p.add_argument("--sample-configs", type=int, default=16, help="configs per training step (default: 16)")
    p.add_argument("--epochs", type=int, default=3, help="training epochs per run (default: 3)")
    p.add_argument("--hidden", type=int, default=32, help="hidden width (default: 32)")
    p.add_argument("--layers", type=int, default=3, help="message-passing layers (default: 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads in each run (default: 1)")
    p.add_argument("--workdir", default=None, help="where to write the graphs (default: a temporary directory)")


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in the subprocess: load, train, report (resident peaks in MB: ru_maxrss is KB on Linux)."""
    import resource

    import torch

    from autotune.backends.tpu import layout_model as lm
    torch.set_num_threads(spec["threads"])
    seg = spec["segment_size"] if spec["mode"] == "gst" else None
    t0 = time.perf_counter()
    halo = spec.get("halo", 1)
    graphs = lm.load_split(spec["directory"], "train", seg, halo)      # what train_layout reads first
    load_s = time.perf_counter() - t0
    loaded_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del graphs
    res = lm.train_layout(spec["directory"], epochs=spec["epochs"], segment_size=seg,
                          sample_segments=spec["sample_segments"], sample_configs=spec["sample_configs"],
                          finetune_epochs=0, hidden=spec["hidden"], layers=spec["layers"], progress=False,
                          threads=spec["threads"], halo=halo, epoch_unit=spec.get("epoch_unit", "segments"))
    epoch_s = [h["seconds"] for h in res.history]
    return {"loaded_rss_mb": loaded_mb, "load_seconds": load_s, "epoch_seconds": epoch_s,
            "max_grad_nodes": res.max_grad_nodes, "max_graph_nodes": res.max_graph_nodes}


def measure(directory: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One (graphs, mode) run in a fresh interpreter: its peak RSS (wait4) and what it reports."""
    spec = {"directory": directory, "mode": mode, "segment_size": args.segment_size,
            "sample_segments": args.sample_segments, "sample_configs": args.sample_configs, "epochs": args.epochs,
            "hidden": args.hidden, "layers": args.layers, "threads": args.threads, "halo": args.halo,
            "epoch_unit": args.epoch_unit}
    code = ("import json, sys; from autotune.measure.experiments.layout_scaling import _child; "
            "print(json.dumps(_child(json.loads(sys.argv[1]))))")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(spec)], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errtext = out.read(), err.read()
    if proc.returncode != 0:
        return {"mode": mode, "error": f"exit {proc.returncode}: " + (errtext.strip().splitlines() or [""])[-1]}
    rep = json.loads(text.strip().splitlines()[-1])
    peak = usage.ru_maxrss / 1024
    eps = rep["epoch_seconds"]
    return {"mode": mode, "peak_rss_mb": peak, "training_mb": peak - rep["loaded_rss_mb"], **rep,
            "seconds_per_epoch": sorted(eps)[len(eps) // 2] if eps else float("nan")}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Generate the graphs of each size, train each mode in its own subprocess, print a table."""
    from autotune.backends.tpu.layout_data import generate_layout_dataset
    work = Path(args.workdir or tempfile.mkdtemp(prefix="layout-scaling-"))
    rows: list[dict[str, Any]] = []
    print(f"SYNTHETIC layout graphs, {args.graphs} per size, {args.configs} configs, {args.sample_configs} per step, "
          f"{args.epochs} epochs, hidden {args.hidden}, {args.layers} layers, {args.threads} thread(s); "
          f"GST: S={args.segment_size}, {args.sample_segments} segment(s) with gradient per step, halo {args.halo} "
          f"hop(s), epoch = {args.epoch_unit}; grad nodes: the most a step ran with gradient (halo included)")
    print(f"{'nodes':>8} {'mode':>5} {'peak RSS MB':>12} {'after load MB':>14} {'training MB':>12} "
          f"{'s/epoch':>9} {'grad nodes':>11}")
    for n in args.sizes:
        d = work / f"n{n}"
        if not (d / "train").is_dir():
            generate_layout_dataset(d, train=args.graphs, valid=0, test=0, nodes=(n, n), configs=args.configs,
                                    seed=n)
        for mode in args.modes:
            r = {"nodes": n, **measure(str(d), mode, args)}
            rows.append(r)
            if "error" in r:
                print(f"{n:>8} {mode:>5} {r['error']}")
            else:
                print(f"{n:>8} {mode:>5} {r['peak_rss_mb']:>12.0f} {r['loaded_rss_mb']:>14.0f} "
                      f"{r['training_mb']:>12.0f} {r['seconds_per_epoch']:>9.3f} {r['max_grad_nodes']:>11}", flush=True)
    return {"synthetic": True, "workdir": str(work), "segment_size": args.segment_size,
            "sample_segments": args.sample_segments, "halo": args.halo, "epoch_unit": args.epoch_unit,
            "graphs": args.graphs, "configs": args.configs,
            "sample_configs": args.sample_configs, "epochs": args.epochs, "hidden": args.hidden,
            "layers": args.layers, "threads": args.threads, "rows": rows}
