"""Tile-size selection on the TPU emulator, judged as in "A Learned Performance Model for Tensor
Processing Units": for each held-out kernel a model picks the tile config it ranks best, and

    APE = 100 * sum_k |t(chosen_k) - t(best_k)| / sum_k t(best_k)

over the held-out kernels (plus the per-kernel median, top-5 error and Kendall tau). Splits: a
random split of kernels, and by model family (train on two families, test on the third).

    autotune evaluate-tiles --kernels 300 [--export DIR] [--json OUT]
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from autotune.backends.tpu.emulator import PRESETS, TileError, emulate
from autotune.backends.tpu.features import tpu_graph
from autotune.cost_model import Dataset, make_model
from autotune.cost_model.metrics import kendall_tau
from autotune.space import Config
from autotune.task import Task
from templates.tpu import FAMILIES, random_kernel, tiled_kernel

MODELS = ("analytical", "xgb", "lgbm", "gnn", "random")


@dataclass
class KernelData:
    family: str
    task: Task
    configs: list[Config]
    seconds: np.ndarray      # inf where the tiles do not fit
    graphs: list[Any]

    @property
    def X(self) -> np.ndarray:
        return np.stack([g.config_feat for g in self.graphs])

    @property
    def best(self) -> float:
        return float(np.min(self.seconds))


def generate(n_kernels: int, seed: int = 0, core: str = "v4") -> list[KernelData]:
    """Random kernels of each family, every tile config of each timed on the emulator."""
    rng = np.random.default_rng(seed)
    out: list[KernelData] = []
    seen: set[str] = set()
    while len(out) < n_kernels:
        family = FAMILIES[len(out) % len(FAMILIES)]
        op, shape = random_kernel(family, rng)
        task = Task.create(op, shape, threads=1)
        if task.key() in seen:
            continue
        seen.add(task.key())
        cfgs = list(task.space().grid())
        secs = []
        for c in cfgs:
            try:
                secs.append(emulate(tiled_kernel(task, c), PRESETS[core]).seconds)
            except TileError:
                secs.append(math.inf)
        secs_a = np.asarray(secs)
        if np.isfinite(secs_a).sum() < 2:
            continue
        out.append(KernelData(family, task, cfgs, secs_a, [tpu_graph(task, c) for c in cfgs]))
    return out


def dataset(kernels: Sequence[KernelData], max_configs: int | None = None, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    ds = Dataset(X=np.zeros((0, kernels[0].X.shape[1] if kernels else 30), np.float32))
    for k in kernels:
        idx = np.arange(len(k.configs))
        if max_configs and len(idx) > max_configs:
            idx = rng.choice(idx, max_configs, replace=False)
        ds.add(k.X[idx], list(k.seconds[idx]), k.task.key(), [k.graphs[i] for i in idx])
    return ds


def score(model, kernels: Sequence[KernelData]) -> dict[str, float]:  # type: ignore[no-untyped-def]
    err = err5 = best_sum = 0.0
    apes, taus = [], []
    for k in kernels:
        d = Dataset(X=k.X)
        d.graphs = k.graphs
        s = np.asarray(model.predict(d))
        s = np.where(np.isfinite(k.seconds), s, -np.inf)  # configs that do not fit are never picked
        chosen = k.seconds[int(np.argmax(s))]
        top5 = k.seconds[np.argsort(-s)[:5]].min()
        err += abs(chosen - k.best)
        err5 += abs(top5 - k.best)
        best_sum += k.best
        apes.append(100 * abs(chosen - k.best) / k.best)
        taus.append(kendall_tau(s[np.isfinite(k.seconds)], k.seconds[np.isfinite(k.seconds)]))
    return {"ape": 100 * err / best_sum, "median_ape": statistics.median(apes), "top5_error": 100 * err5 / best_sum,
            "kendall_tau": statistics.median(taus), "kernels": len(kernels)}


def train(kind: str, kernels: Sequence[KernelData], seed: int = 0):  # type: ignore[no-untyped-def]
    m = make_model(kind, seed=seed)
    t0 = time.perf_counter()
    m.fit(dataset(kernels, max_configs=64 if kind == "gnn" else None, seed=seed))
    return m, time.perf_counter() - t0


def splits(kernels: Sequence[KernelData], seed: int) -> list[tuple[str, list[KernelData], list[KernelData]]]:
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(kernels))
    cut = int(0.8 * len(kernels))
    out = [("random", [kernels[i] for i in idx[:cut]], [kernels[i] for i in idx[cut:]])]
    for fam in FAMILIES:
        out.append((f"held-out {fam}", [k for k in kernels if k.family != fam], [k for k in kernels if k.family == fam]))
    return out


def calls_to_best(kind: str, model_path: str | None, kernels: Sequence[KernelData], batch: int = 2,
                  budget: int = 40, seed: int = 0) -> list[int]:
    """Emulator calls the model-guided search needs to reach each kernel's best tile."""
    from autotune.search.guided import guided_search
    from autotune.tuner import Tuner, TuneOptions
    from measure.tpu_runner import TpuRunner
    out = []
    for k in kernels:
        best = k.configs[int(np.argmin(k.seconds))]
        strategy, updater = guided_search(k.task, kind, pretrained=model_path, seed=seed, epsilon=0.0)
        runner = TpuRunner()
        found: list[int] = []

        def watch(task, configs, results, runner=runner, found=found, best=best):  # type: ignore[no-untyped-def]
            if not found and best in configs:
                found.append(runner.calls - len(configs) + list(configs).index(best) + 1)
        Tuner(k.task, strategy, runner, callbacks=[updater, watch]).run(
            TuneOptions(trials=budget, batch=batch, early_stopping=None))
        out.append(found[0] if found else budget + 1)
    return out


def export_tpugraphs(kernels: Sequence[KernelData], directory: str | Path) -> int:
    """One TpuGraphs tile .npz per kernel (node_feat: the op graph's 8 features padded to 140
    columns; edges [consumer, producer]; config_feat: the tile as dataset bounds, output (bm/8,
    bn/128) and kernel (bk/8, bn/128); runtimes in ns, normalised by the kernel's best runtime).
    Configs whose tiles do not fit are left out."""
    from autotune.backends.tpu.hlo import TileConfig
    from autotune.cost_model.tpugraphs import NODE_FEAT, TileGraph, write_tile
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for i, k in enumerate(kernels):
        ok = np.isfinite(k.seconds)
        g = k.graphs[0]
        nf = np.zeros((g.num_nodes, NODE_FEAT), np.float32)
        nf[:, :g.node_feat.shape[1]] = g.node_feat
        rt = np.rint(k.seconds[ok] * 1e9).astype(np.int64)
        write_tile(d / f"{i:04d}_{k.family}_{k.task.op}.npz",
                   TileGraph(nf, g.node_opcode, g.edge_index[:, ::-1].copy(),
                             np.stack([TileConfig((-(-c["bk"] // 8), -(-c["bn"] // 128)),
                                                  (-(-c["bm"] // 8), -(-c["bn"] // 128))).config_feat()
                                       for c, good in zip(k.configs, ok) if good]), rt,
                             np.full(len(rt), max(int(rt.min()), 1), np.int64)))
    return len(kernels)


def run(n_kernels: int = 90, seed: int = 0, models: Sequence[str] = MODELS, export: str | None = None,
        search_kernels: int = 10) -> dict[str, Any]:
    t0 = time.perf_counter()
    kernels = generate(n_kernels, seed)
    gen_s = time.perf_counter() - t0
    print(f"{len(kernels)} kernels ({', '.join(f'{sum(k.family == f for k in kernels)} {f}' for f in FAMILIES)}), "
          f"{sum(len(k.configs) for k in kernels)} tile configs emulated in {gen_s:.1f} s")
    result: dict[str, Any] = {"kernels": len(kernels), "splits": {}}
    header = f"{'split':<24} {'model':<11} {'APE %':>7} {'med APE %':>9} {'top-5 err %':>11} {'tau':>6} {'train s':>8}"
    print(header)
    for name, tr, te_ in splits(kernels, seed):
        rows = {}
        for kind in models:
            m, secs = train(kind, tr, seed)
            r = score(m, te_)
            r["train_seconds"] = secs
            rows[kind] = r
            print(f"{name:<24} {kind:<11} {r['ape']:>7.2f} {r['median_ape']:>9.2f} {r['top5_error']:>11.2f} "
                  f"{r['kendall_tau']:>6.3f} {secs:>8.1f}")
        result["splits"][name] = rows
    if search_kernels:
        import tempfile
        name, tr, te_ = splits(kernels, seed)[0]
        with tempfile.TemporaryDirectory() as tmp:
            m, _ = train("xgb", tr, seed)
            path = f"{tmp}/xgb.json"
            m.save(path)
            calls = calls_to_best("xgb", path, te_[:search_kernels], seed=seed)
        an = make_model("analytical")
        hits = sum(k.configs[int(np.argmax(np.where(np.isfinite(k.seconds), an.predict(k.X), -np.inf)))] ==
                   k.configs[int(np.argmin(k.seconds))] for k in te_[:search_kernels])
        result["search"] = {"calls_to_best": calls, "median_calls": statistics.median(calls),
                            "analytical_top1_is_best": hits, "kernels": len(calls)}
        print(f"model-guided search (pretrained xgb, batches of 2): emulator calls to reach the best tile: "
              f"median {statistics.median(calls)} over {len(calls)} held-out kernels {calls}; "
              f"the analytical model's first pick is the best tile for {hits} of {len(calls)}")
    if export:
        n = export_tpugraphs(kernels, export)
        print(f"exported {n} kernels in the TpuGraphs tile format to {export}")
    return result


# ---- against real TPU runs (`autotune evaluate-tiles --real FILE`) -------------------------------

REAL_MODELS = ("xgb", "lgbm")


def _metrics(scores: np.ndarray, ns: np.ndarray) -> dict[str, Any]:
    """tau of the scores (higher = faster) against the runtimes, whether the top pick is the best
    config (top1) or the best is among the top five picks (top5), and the pick's excess time (ape %)."""
    order = np.argsort(-scores, kind="stable")
    best = float(ns.min())
    tau = kendall_tau(scores, ns) if len(ns) > 1 else float("nan")
    return {"tau": None if not np.isfinite(tau) else float(tau), "top1": bool(ns[order[0]] <= best),
            "top5": bool(ns[order[:5]].min() <= best), "ape": 100.0 * (float(ns[order[0]]) - best) / best,
            "chosen_ns": float(ns[order[0]]), "best_ns": best}


def emulator_training_set(kernels: Sequence[Any], core: Any, per_kernel: int, seed: int) -> Dataset:
    """Configs sampled from each kernel's whole tile space, labelled by the emulator only."""
    from autotune.backends.tpu.features import hlo_features
    from autotune.backends.tpu.hlo import TileSpace
    from autotune.backends.tpu.lowering import lower
    rng = np.random.default_rng(seed)
    ds = Dataset(X=np.zeros((0, 38), np.float32))
    for rk in kernels:
        space = TileSpace(rk.kernel)
        xs, secs = [], []
        for c in space.sample(rng, per_kernel):
            try:
                secs.append(emulate(lower(rk.kernel, c, core, space), core).seconds)
            except TileError:
                continue
            xs.append(hlo_features(rk.kernel, c, space))
        if len(xs) > 1:
            ds.add(np.stack(xs), secs, rk.kernel.name)
    return ds


def run_real(path: str, models: Sequence[str] = REAL_MODELS, core: str = "calibrated", seed: int = 0,
             train_configs: int = 200, loko: bool = False) -> dict[str, Any]:
    """Score the emulator, learned models trained on emulator data only, the analytical model and
    XLA's default config on real timed runs; print a table per kernel and the pooled result."""
    from autotune.backends.tpu.calibration import calibrate
    from autotune.backends.tpu.features import HLO_ROOFLINE_COLS, HLO_STEPS_COL, hlo_features
    from autotune.backends.tpu.hlo import TileSpace, load_real
    from autotune.backends.tpu.lowering import lower
    from autotune.cost_model.analytical import AnalyticalModel
    kernels = load_real(path)
    cr = PRESETS[core]
    learned = {}
    if models:
        train = emulator_training_set(kernels, cr, train_configs, seed)
        for kind in models:
            m = make_model(kind, seed=seed)
            m.fit(train)
            learned[kind] = m
    analytical = AnalyticalModel(HLO_ROOFLINE_COLS, HLO_STEPS_COL)
    preds = ["emulator", *learned, "analytical", "xla_default"] + (["emulator_loko"] if loko else [])
    out: dict[str, Any] = {"file": path, "core": core, "configs": {}, "kernels": {}, "pooled": {}}
    for rk in kernels:
        space = TileSpace(rk.kernel)
        cfgs, ns = rk.configs()
        X = np.stack([hlo_features(rk.kernel, c, space) for c in cfgs])
        emu = np.asarray([emulate(lower(rk.kernel, c, cr, space), cr).seconds for c in cfgs])
        scores = {"emulator": -emu, **{k: np.asarray(m.predict(X)) for k, m in learned.items()},
                  "analytical": np.asarray(analytical.predict(X)),
                  "xla_default": np.asarray([1.0 if c == rk.default else 0.0 for c in cfgs])}
        if loko:  # the constants fitted without this kernel's runs
            held, _ = calibrate([o for o in kernels if o is not rk], cr, sweeps=2)
            scores["emulator_loko"] = -np.asarray([emulate(lower(rk.kernel, c, held, space), held).seconds
                                                   for c in cfgs])
        row = {p: _metrics(scores[p], ns) for p in preds}
        row["xla_default"]["tau"] = None  # one marked config: no ranking
        out["configs"][rk.kernel.name] = len(cfgs)
        out["kernels"][rk.kernel.name] = row
    for p in preds:
        rows = [out["kernels"][k][p] for k in out["kernels"]]
        taus = [r["tau"] for r in rows if r["tau"] is not None]
        out["pooled"][p] = {"tau": statistics.mean(taus) if taus else None, "top1": sum(r["top1"] for r in rows),
                            "top5": sum(r["top5"] for r in rows),
                            "ape": 100.0 * sum(r["chosen_ns"] - r["best_ns"] for r in rows) / sum(r["best_ns"] for r in rows)}
    _print_real(out, preds)
    return out


def _print_real(out: dict[str, Any], preds: Sequence[str]) -> None:
    def cell(r: dict[str, Any]) -> str:
        tau = "  -  " if r["tau"] is None else f"{r['tau']:5.2f}"
        return f"{tau} {'Y' if r['top1'] else '.'}{'Y' if r['top5'] else '.'} {r['ape']:5.1f}"
    print(f"{len(out['kernels'])} kernels, {sum(out['configs'].values())} distinct configs from {out['file']}; "
          f"emulator core {out['core']!r}. Per predictor: tau, top-1/top-5 hit (Y/.), chosen tile's APE %")
    print(f"{'kernel':<12} {'cfgs':>4}  " + "  ".join(f"{p:<16}" for p in preds))
    for name, row in out["kernels"].items():
        print(f"{name:<12} {out['configs'][name]:>4}  " + "  ".join(f"{cell(row[p]):<16}" for p in preds))
    n = len(out["kernels"])
    pooled = []
    for p in preds:
        r = out["pooled"][p]
        tau = "  -  " if r["tau"] is None else f"{r['tau']:5.2f}"
        pooled.append(f"{tau} {r['top1']:>2}/{r['top5']:<2} {r['ape']:5.2f}")
    print(f"{'pooled':<12} {'':>4}  " + "  ".join(f"{c:<16}" for c in pooled)
          + f"   (mean tau; top-1/top-5 hits of {n}; pooled APE %)")
