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
from autotune.backends.tpu.templates import FAMILIES, random_kernel, tiled_kernel

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
    """Emulator calls the model-guided search (no random exploration) needs to reach each kernel's best tile."""
    from autotune.tuning import NoValidConfig, make_runner, tune
    out = []
    for k in kernels:
        best = k.configs[int(np.argmin(k.seconds))]
        runner = make_runner(task=k.task)  # the emulator's; its call count says when the best was measured
        found: list[int] = []

        def watch(task, configs, results, runner=runner, found=found, best=best):  # type: ignore[no-untyped-def]
            if not found and best in configs:
                found.append(runner.calls - len(configs) + list(configs).index(best) + 1)
        try:
            tune(op=k.task, trials=budget, batch=batch, cost_model=kind, pretrained=model_path, seed=seed,
                 exploration=0.0, runner=runner, callbacks=[watch], presets=False, progress=False, finalists=None)
        except NoValidConfig:
            pass  # no tile fitted: the best was never reached
        out.append(found[0] if found else budget + 1)
    return out


def export_tpugraphs(kernels: Sequence[KernelData], directory: str | Path) -> int:
    """One TpuGraphs tile .npz per kernel in the dataset's form: the op graph as one HLO computation
    (the dataset's opcode ids and 140 node features: tpugraphs.tile_graph_from_ops), config_feat the
    dataset's 24 from the tile as bounds, emulated runtimes in ns normalised by the runtime of the
    config the analytical model picks (standing in for XLA's default: its own cost model's choice).
    Configs whose tiles do not fit are left out."""
    from autotune.backends.tpu.hlo import TileConfig
    from autotune.backends.tpu.tpugraphs import tile_graph_from_ops, write_tile
    from autotune.backends.tpu.templates import kernel_ops
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    analytical = make_model("analytical")
    for i, k in enumerate(kernels):
        ok = np.isfinite(k.seconds)
        feat = np.stack([TileConfig((-(-c["bk"] // 8), -(-c["bn"] // 128)),
                                    (-(-c["bm"] // 8), -(-c["bn"] // 128))).config_feat()
                         for c, good in zip(k.configs, ok) if good])
        default = int(np.argmax(analytical.predict(k.X[ok])))
        write_tile(d / f"{i:04d}_{k.family}_{k.task.op}.npz",
                   tile_graph_from_ops(kernel_ops(k.task), feat, k.seconds[ok] * 1e9, default, k.task.key()))
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


def _metrics(scores: np.ndarray, ns: np.ndarray, single: bool = False) -> dict[str, Any]:
    """tau of the scores (higher = faster) against the runtimes, whether the top pick is the best
    config (top1) or the best is among the top five picks (top5), the pick's slowdown over the best
    (ape %) and the TpuGraphs tile metric's slowdown: the best of the top five picks over the best
    (top5_ape %). single: the predictor names one config only (XLA's default): no tau, its top five
    is that one config."""
    order = np.argsort(-scores, kind="stable")
    best = float(ns.min())
    top5 = order[:1] if single else order[:5]
    tau = kendall_tau(scores, ns) if len(ns) > 1 and not single else float("nan")
    return {"tau": None if not np.isfinite(tau) else float(tau), "top1": bool(ns[order[0]] <= best),
            "top5": bool(ns[top5].min() <= best), "ape": 100.0 * (float(ns[order[0]]) - best) / best,
            "top5_ape": 100.0 * (float(ns[top5].min()) - best) / best,
            "chosen_ns": float(ns[order[0]]), "top5_ns": float(ns[top5].min()), "best_ns": best}


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


@dataclass
class _RealKernelData:
    """One real kernel's successfully timed configs: features, runtimes, the default's index."""
    rk: Any
    space: Any
    cfgs: list[Any]
    ns: np.ndarray
    X: np.ndarray
    default: int | None   # index of XLA's default among cfgs (None: not marked, or it failed)
    failed_runs: int
    failed_configs: int   # distinct configs with no successful run

    @property
    def name(self) -> str:
        return str(self.rk.kernel.name)


def _emulated(kd: _RealKernelData, core: Any) -> np.ndarray:
    """The emulator's seconds for each config (inf where it does not fit)."""
    from autotune.backends.tpu.lowering import lower
    out = []
    for c in kd.cfgs:
        try:
            out.append(emulate(lower(kd.rk.kernel, c, core, kd.space), core).seconds)
        except TileError:
            out.append(math.inf)
    return np.asarray(out)


def _with_emulator(X: np.ndarray, emu_s: np.ndarray) -> np.ndarray:
    """Config features and the emulator's estimate (log2 seconds) as one more column."""
    col = np.log2(np.where(np.isfinite(emu_s), emu_s, 1e3))
    return np.hstack([X, col[:, None]]).astype(np.float32)


def real_training_set(kds: Sequence[_RealKernelData], emu: dict[str, np.ndarray]) -> Dataset:
    """The real timed runs of kds for a learned correction of the emulator: features = config
    features + log2 emulator estimate; label = the emulator's error, real / emulated runtime, all
    kernels in one group (so a regression on the dataset's log label fits -log(real / emulated)
    up to one constant)."""
    ds = Dataset(X=np.zeros((0, (kds[0].X.shape[1] if kds else 38) + 1), np.float32))
    for kd in kds:
        ok = np.isfinite(emu[kd.name])
        if ok.any():
            ds.add(_with_emulator(kd.X[ok], emu[kd.name][ok]), list(kd.ns[ok] * 1e-9 / emu[kd.name][ok]), "real/emulated")
    return ds


def _corrected(model: Any, X: np.ndarray, emu_s: np.ndarray) -> np.ndarray:
    """Score (higher = faster) of the emulator's estimate corrected by the model: -log(emulated
    seconds) + the predicted log(emulated / real); configs the emulator rejects rank last."""
    pred = np.asarray(model.predict(_with_emulator(X, emu_s)), np.float64)
    return np.where(np.isfinite(emu_s), pred - np.log(np.where(np.isfinite(emu_s), emu_s, 1.0)), -np.inf)


def _score_set(kds: Sequence[_RealKernelData], test: Sequence[_RealKernelData], core: Any, models: Sequence[str],
               analytical: Any, seed: int, train_configs: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Fit every predictor on kds (the emulator's constants are `core`, already fitted on them)
    and score it on each kernel of test: {kernel: {predictor: metrics}}."""
    emu = {kd.name: _emulated(kd, core) for kd in {id(k): k for k in [*kds, *test]}.values()}
    learned, corrected = {}, {}
    if models:
        train = emulator_training_set([kd.rk for kd in kds], core, train_configs, seed)
        real = real_training_set(kds, emu)
        for kind in models:
            m = make_model(kind, seed=seed)
            m.fit(train)
            learned[kind] = m
            if len(real) > 1:
                c = make_model(kind, objective="regression", seed=seed)
                c.fit(real)
                corrected[kind + "+emu"] = c
    out = {}
    for kd in test:
        scores = {"emulator": -emu[kd.name], **{k: np.asarray(m.predict(kd.X)) for k, m in learned.items()},
                  **{k: _corrected(m, kd.X, emu[kd.name]) for k, m in corrected.items()},
                  "analytical": np.asarray(analytical.predict(kd.X))}
        row = {p: _metrics(s, kd.ns) for p, s in scores.items()}
        if kd.default is not None:
            row["xla_default"] = _metrics(np.asarray([1.0 if i == kd.default else 0.0 for i in range(len(kd.cfgs))]),
                                          kd.ns, single=True)
        else:
            row["xla_default"] = None  # no default marked, or the default config failed
        out[kd.name] = row
    return out


def _pool(kernels: dict[str, dict[str, Any]], configs: dict[str, int], preds: Sequence[str]) -> dict[str, Any]:
    pooled: dict[str, Any] = {}
    for p in preds:
        rows = [(k, r[p]) for k, r in kernels.items() if r.get(p) is not None]
        if not rows:
            pooled[p] = None
            continue
        taus = [r["tau"] for _, r in rows if r["tau"] is not None]
        taus10 = [r["tau"] for k, r in rows if r["tau"] is not None and configs[k] >= 10]
        best = sum(r["best_ns"] for _, r in rows)
        pooled[p] = {"tau": statistics.mean(taus) if taus else None, "min_tau_10": min(taus10) if taus10 else None,
                     "top1": sum(r["top1"] for _, r in rows), "top5": sum(r["top5"] for _, r in rows),
                     "ape": 100.0 * sum(r["chosen_ns"] - r["best_ns"] for _, r in rows) / best,
                     "top5_ape": 100.0 * sum(r["top5_ns"] - r["best_ns"] for _, r in rows) / best,
                     "kernels": len(rows)}
        if p != "xla_default":  # kernels whose top-5 slowdown is worse than XLA's default's
            pooled[p]["top5_worse_than_default"] = sorted(
                k for k, r in rows if kernels[k].get("xla_default") is not None
                and r["top5_ns"] > kernels[k]["xla_default"]["chosen_ns"] * (1 + 1e-9))
    return pooled


def run_real(path: str, models: Sequence[str] = REAL_MODELS, core: str = "calibrated", seed: int = 0,
             train_configs: int = 200, loko: bool = False, sweeps: int = 3) -> dict[str, Any]:
    """Score on real timed runs: the emulator, learned models trained on emulator data only
    (`xgb`, `lgbm`), learned corrections of the emulator trained on the real runs (`xgb+emu`,
    `lgbm+emu`: a regression of log(real / emulated runtime) on the config features and the
    emulator's estimate; the score is the corrected estimate), the analytical model and XLA's default
    config. `kernels`/`pooled`: everything fitted on all kernels (the emulator's constants are the
    `core` preset). loko: also `loko` - each kernel scored by predictors fitted without it (the
    emulator's constants refitted by calibration.calibrate from its BASE on the other kernels, the
    learned models trained on the other kernels only). Failed runs are counted, never ranked."""
    from autotune.backends.tpu.calibration import BASE, calibrate
    from autotune.backends.tpu.features import HLO_ROOFLINE_COLS, HLO_STEPS_COL, hlo_features
    from autotune.backends.tpu.hlo import TileSpace, load_real
    from autotune.backends.tpu.analytical import AnalyticalModel
    kernels = load_real(path)
    cr = PRESETS[core]
    kds, failed = [], {}
    for rk in kernels:
        space = TileSpace(rk.kernel)
        cfgs, ns = rk.configs()
        bad = {r.config for r in rk.runs if r.error} - set(cfgs)
        failed[rk.kernel.name] = {"runs": sum(r.error for r in rk.runs), "configs": len(bad)}
        if not cfgs:
            continue  # every run failed: counted, nothing to rank
        X = np.stack([hlo_features(rk.kernel, c, space) for c in cfgs])
        d = rk.default
        kds.append(_RealKernelData(rk, space, cfgs, ns, X, cfgs.index(d) if d in cfgs else None,
                                   failed[rk.kernel.name]["runs"], failed[rk.kernel.name]["configs"]))
    analytical = AnalyticalModel(HLO_ROOFLINE_COLS, HLO_STEPS_COL)
    preds = ["emulator", *models, *(m + "+emu" for m in models), "analytical", "xla_default"]
    configs = {kd.name: len(kd.cfgs) for kd in kds}
    out: dict[str, Any] = {"file": path, "core": core, "predictors": preds, "configs": configs, "failed": failed,
                           "runs": sum(len(rk.runs) for rk in kernels),
                           "failed_runs": sum(f["runs"] for f in failed.values()), "kernels": {}, "pooled": {}}
    out["kernels"] = _score_set(kds, kds, cr, models, analytical, seed, train_configs)
    out["pooled"] = _pool(out["kernels"], configs, preds)
    if loko:
        rows, cores = {}, {}
        for kd in kds:
            others = [o for o in kds if o is not kd]
            held, ls = calibrate([o.rk for o in others], BASE, sweeps=sweeps)
            cores[kd.name] = {"loss": ls, **{f: getattr(held, f) for f in _fitted()}}
            rows.update(_score_set(others, [kd], held, models, analytical, seed, train_configs))
        out["loko"] = {"kernels": rows, "pooled": _pool(rows, configs, preds), "constants": cores}
    _print_real(out, preds)
    return out


def _fitted() -> tuple[str, ...]:
    from autotune.backends.tpu.calibration import FITTED
    return tuple(FITTED)


def _print_real(out: dict[str, Any], preds: Sequence[str]) -> None:
    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "n/a"
        tau = "  -  " if r["tau"] is None else f"{r['tau']:5.2f}"
        return f"{tau} {'Y' if r['top1'] else '.'}{'Y' if r['top5'] else '.'} {r['ape']:5.1f} {r['top5_ape']:4.1f}"
    w = 22
    print(f"{len(out['failed'])} kernels, {out['runs']} runs ({out['failed_runs']} failed: counted, never chosen), "
          f"{sum(out['configs'].values())} distinct timed configs from {out['file']}; emulator core {out['core']!r}.")
    print("Per predictor: tau, top-1/top-5 hit (Y/.), chosen tile's slowdown %, best-of-top-5 slowdown % "
          "(the TpuGraphs tile metric)")
    tables = [("fitted on all kernels", out["kernels"], out["pooled"])]
    if "loko" in out:
        tables.append(("leave-one-kernel-out (each kernel scored by predictors fitted without it)",
                       out["loko"]["kernels"], out["loko"]["pooled"]))
    for title, kernels, pooled in tables:
        print(f"-- {title}")
        print(f"{'kernel':<12} {'cfgs':>4} {'fail':>4}  " + " ".join(f"{p:<{w}}" for p in preds))
        for name, row in kernels.items():
            print(f"{name:<12} {out['configs'][name]:>4} {out['failed'][name]['runs']:>4}  "
                  + " ".join(f"{cell(row.get(p)):<{w}}" for p in preds))
        n = len(kernels)
        cells = []
        for p in preds:
            r = pooled[p]
            if r is None:
                cells.append("n/a")
                continue
            tau = "  -  " if r["tau"] is None else f"{r['tau']:5.2f}"
            cells.append(f"{tau} {r['top1']:>2}/{r['top5']:<2} {r['ape']:5.1f} {r['top5_ape']:4.1f}")
        fewer = [f"{p} of {pooled[p]['kernels']}" for p in preds
                 if pooled[p] is not None and pooled[p]["kernels"] != n]  # xla_default: kernels with the default timed
        print(f"{'pooled':<12} {'':>4} {'':>4}  " + " ".join(f"{c:<{w}}" for c in cells)
              + f"   (mean tau; top-1/top-5 hits of {n} kernels{' (' + ', '.join(fewer) + ')' if fewer else ''}; "
              "pooled slowdowns %)")
        mins = [f"{p} {pooled[p]['min_tau_10']:.2f}" for p in preds
                if pooled[p] is not None and pooled[p].get("min_tau_10") is not None]
        worse = [f"{p} {len(pooled[p]['top5_worse_than_default'])}" for p in preds
                 if pooled[p] is not None and "top5_worse_than_default" in pooled[p]]
        print(f"{'':<12} min tau over kernels with >= 10 configs: {', '.join(mins)}; "
              f"kernels whose top-5 is slower than XLA's default: {', '.join(worse)}")
