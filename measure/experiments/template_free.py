"""template-free: operators tuned from their definition alone (the auto-scheduler's derived
space) against the hand templates or NumPy, each ratio timed in the same run.

Each row registers a definition as data (a template's `define` at the shape, or a user's
te.compute), tunes it with the real tuner (presets first, at most --trials configs), tunes the
template baseline the same way, then times the two best kernels (or the kernel and NumPy) in
alternating blocks under the timing lock, --runs times; the ratio shown is the median of the
runs' ratios (baseline time / definition time: above 1 the definition is faster).

    python -m autotune.measure.experiments template-free --rows matmul,rowsum --trials 32 --log-dir /tmp/tf
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Row:
    name: str
    op: str            # the template whose definition is tuned (and which is the baseline, if no numpy)
    shape: str
    target: float      # the ratio the issue asks for
    numpy: str = ""    # the NumPy baseline's name, when the baseline is not the template
    epilogue: str = ""  # bias + relu after the op, in the definition; the baseline runs it in NumPy after the template


ROWS = (
    Row("matmul", "matmul", "1024x1024x1024", 0.8),
    Row("conv2d", "conv2d", "1x64x56x56x64x3x3x1x1", 0.8),
    Row("conv2d_bias_relu", "conv2d", "1x64x56x56x64x3x3x1x1", 1.0, epilogue="np.maximum(y + b[:, None, None], 0)"),
    Row("dense_bias_relu", "dense_bias_relu", "512x512x512", 1.0, numpy="np.maximum(x @ w + b, 0)"),
    Row("rowsum", "", "4096x4096", 1.0, numpy="x.sum(axis=1)"),
    Row("softmax", "softmax", "4096x1024", 0.8),
    Row("layernorm", "layernorm", "4096x1024", 0.8),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", default=",".join(r.name for r in ROWS), help="rows to run, comma separated "
                   f"(default: all of {', '.join(r.name for r in ROWS)})")
    p.add_argument("--trials", type=int, default=32, help="configs tuned per path and row (at most 64)")
    p.add_argument("--runs", type=int, default=3, help="timing runs per row; the median ratio is shown")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--log-dir", default=None, help="tuning logs, kept and reused (default: a temporary directory)")


def _definition(row: Row, threads: int) -> Any:
    """The row's definition registered as a template-free operator, and its task."""
    from autotune.definition import register_definition
    from autotune.ir import te
    from autotune.ir.serialize import to_data
    from autotune.task import Task
    from autotune.templates import get_template
    if row.op:
        from autotune.templates.conv2d import define_bias_relu
        t = get_template(row.op)
        define = define_bias_relu if row.epilogue else t.define
        out = define(t.parse_shape(row.shape), "float32")
    else:
        M, N = (int(x) for x in row.shape.split("x"))
        x = te.placeholder((M, N), "float32", name="x")
        j = te.reduce_axis(N, name="j")
        out = te.compute((M,), lambda i: te.sum(x[i, j], axis=j), name="out")
    phs = [t for t in te.input_tensors(out) if t.is_placeholder]
    tmpl = register_definition(f"{row.name}_def", to_data(out, phs))
    shape = {f"{p.name}{d}": n for p in phs for d, n in enumerate(p.shape)}
    return Task.create(tmpl, shape, "float32", threads)


def _numpy(row: Row, inputs: list[np.ndarray]) -> Callable[[], Any]:
    if row.name == "rowsum":
        (x,) = inputs
        return lambda: x.sum(axis=1)
    x, w, b = inputs
    return lambda: np.maximum(x @ w + b, 0)


def _then_bias_relu(kernel: Callable[[], np.ndarray], b: np.ndarray) -> Callable[[], Any]:
    """The template's bound kernel, then NumPy's bias + relu over its NCHW output."""
    return lambda: np.maximum(kernel() + b[:, None, None], 0)


def _best(task: Any, trials: int, log: Path) -> tuple[Any, float, int]:
    """Tune (or reuse the log); the best config, its tuning time, and the candidates measured."""
    from autotune.bench import BenchOptions, tune_candidates
    t0 = time.perf_counter()
    cands = tune_candidates(task, BenchOptions(trials=trials, progress=False), str(log))
    ok = [c for c in cands if c.seconds is not None]
    if not ok:
        raise SystemExit(f"{task.key()}: no candidate compiled and passed the check "
                         f"({next((c.error for c in cands if c.error), 'none measured')})")
    return min(ok, key=lambda c: c.seconds).config, time.perf_counter() - t0, len(cands)


def _time_pair(mine: Callable[[], Any], base: Callable[[], Any], threads: int, rounds: int = 3) -> tuple[float, float]:
    """Median seconds of the kernel and the baseline, timed in alternating blocks under the timing lock."""
    from autotune.bench import BenchOptions, blas_threads
    from autotune.environment import settings
    from autotune.timing_lock import TimingLock, lock_path
    from autotune.measure.timing import time_callable
    opts = BenchOptions()
    a: list[float] = []
    b: list[float] = []
    with TimingLock(lock_path(settings().cache_dir)):
        for _ in range(rounds):
            with blas_threads(threads):
                b.append(time_callable(base, opts.protocol).median)
            time.sleep(opts.pause_s)
            a.append(time_callable(mine, opts.protocol).median)
            time.sleep(opts.pause_s)
    return statistics.median(a), statistics.median(b)


def run_row(row: Row, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    from autotune.bench import keep_freed_memory
    from autotune.task import Task
    trials = min(args.trials, 64)
    task = _definition(row, args.threads)
    cfg, tune_s, n = _best(task, trials, log_dir / f"{row.name}_def.jsonl")
    inputs = task.inputs(seed=1)
    mine = task.build(cfg).bind(*inputs)
    res: dict[str, Any] = {"row": row.name, "shape": row.shape, "target": row.target, "trials": n,
                           "config": dict(cfg), "tuning_seconds": tune_s}
    if row.numpy:
        base, res["baseline"] = _numpy(row, inputs), f"NumPy {row.numpy}"
    else:
        t = Task.create(row.op, row.shape, "float32", args.threads)
        tcfg, _, tn = _best(t, trials, log_dir / f"{row.name}_template.jsonl")
        base, res["baseline"] = t.build(tcfg).bind(*t.inputs(seed=1)), f"{row.op} template ({tn} trials)"
        if row.epilogue:
            base = _then_bias_relu(base, inputs[-1])
            res["baseline"] += f", then NumPy {row.epilogue}"
        res["template_config"] = dict(tcfg)
    keep_freed_memory()
    runs = [_time_pair(mine, base, args.threads) for _ in range(args.runs)]
    res["runs"] = [{"definition_s": m, "baseline_s": b, "ratio": b / m} for m, b in runs]
    res["definition_ms"] = statistics.median(m for m, _ in runs) * 1e3
    res["baseline_ms"] = statistics.median(b for _, b in runs) * 1e3
    res["ratio"] = statistics.median(b / m for m, b in runs)
    return res


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| definition | shape | baseline | definition ms | baseline ms | ratio (median of runs) | target |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in results:
        ok = "ok" if r["ratio"] >= r["target"] else "below"
        lines.append(f"| {r['row']} | {r['shape']} | {r['baseline']} | {r['definition_ms']:.3f} | "
                     f"{r['baseline_ms']:.3f} | **{r['ratio']:.2f}x** | >= {r['target']}x ({ok}) |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    """Run the chosen rows one after another and print the table."""
    import tempfile
    from autotune.target import cpu_model
    by_name = {r.name: r for r in ROWS}
    unknown = [n for n in args.rows.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"template-free: unknown rows {unknown}; rows are {list(by_name)}")
    tmp = None
    if args.log_dir is None:
        tmp = tempfile.TemporaryDirectory()
        log_dir = Path(tmp.name)
    else:
        log_dir = Path(args.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name in args.rows.split(","):
            r = run_row(by_name[name], args, log_dir)
            print(f"{r['row']}: {r['ratio']:.2f}x ({r['definition_ms']:.3f} ms vs {r['baseline_ms']:.3f} ms, "
                  f"{r['trials']} trials)", flush=True)
            results.append(r)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"\n{cpu_model()}, {args.threads} threads, at most {min(args.trials, 64)} trials per path\n")
    print(table(results))
    return {"cpu": cpu_model(), "threads": args.threads, "rows": results}
