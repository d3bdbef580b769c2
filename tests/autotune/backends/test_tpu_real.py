"""HLO kernels, dataset tile bounds, the lowering and calibration against the real TPU runs in
../shared/tpu_real (skipped where that directory is absent)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.backends.tpu.emulator import PRESETS, TileError, emulate
from autotune.backends.tpu.hlo import HloError, TileConfig, TileSpace, load_real
from autotune.backends.tpu.lowering import lower
from autotune.cost_model.metrics import kendall_tau

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT.parent / "shared" / "tpu_real" / "kernels.json"
needs_real = pytest.mark.skipif(not REAL.exists(), reason=f"real TPU runs not found at {REAL} (../shared/tpu_real "
                                                          "beside the checkout)")
CORE = PRESETS["calibrated"]


@pytest.fixture(scope="module")
def kernels():  # type: ignore[no-untyped-def]
    return {rk.kernel.name: rk for rk in load_real(REAL)}


@needs_real
def test_every_real_config_is_in_its_kernels_space_and_runs(kernels) -> None:  # type: ignore[no-untyped-def]
    assert len(kernels) == 14
    for rk in kernels.values():
        space = TileSpace(rk.kernel)
        cfgs, ns = rk.configs()
        assert all(space.contains(c) for c in cfgs), rk.kernel.name
        assert rk.default in cfgs
        for c in cfgs:
            assert emulate(lower(rk.kernel, c, CORE, space), CORE).seconds > 0


@needs_real
def test_bounds_map_to_the_tensors_physical_dims(kernels) -> None:  # type: ignore[no-untyped-def]
    rk = kernels["fusion.261"]  # W[4096, 1000] (minor_to_major [0, 1]) -= X^T[4096, 32] @ G[32, 1000]
    k = lower(rk.kernel, TileConfig((4, 1), (16, 32)), CORE)
    w = k.inputs[0]
    assert w.shape == (1000, 4096) and w.block == (128, 4096) and w.runs() == 1  # whole rows: one run
    assert k.mxu == (4096, 32, 128) and k.grid == (8, 1, 1)
    narrow = lower(rk.kernel, TileConfig((4, 2), (32, 1)), CORE).inputs[0]
    assert narrow.block == (256, 128) and narrow.runs() == 32                      # one 4 KiB tile per row


@needs_real
def test_sub_32_bit_types_tile_8_rows_in_memory_and_pack_rows_in_registers(kernels) -> None:  # type: ignore[no-untyped-def]
    """XLA's tiled layout: bf16 T(8,128)(2,1) and pred T(8,128)(4,1) pad to 8 x 128 elements (the
    later tiles only order elements inside the first); a vector register packs 2 bf16 or 4 pred rows."""
    bf16 = kernels["copy.24"].kernel.parameters()[0].shape
    pred = next(p.shape for p in kernels["fusion.261"].kernel.parameters() if p.shape.dtype == "pred")
    assert bf16.tiles == ((8, 128), (2, 1)) and bf16.memory_tile == (8, 128) and bf16.vreg_tile == (16, 128)
    assert pred.tiles == ((8, 128), (4, 1)) and pred.memory_tile == (8, 128) and pred.vreg_tile == (32, 128)
    f32 = kernels["fusion.261"].kernel.parameters()[0].shape
    assert f32.memory_tile == f32.vreg_tile == (8, 128)


@needs_real
def test_a_run_costs_more_the_further_it_jumps(kernels) -> None:  # type: ignore[no-untyped-def]
    """fusion.261's (256, 128) block of W (1000 x 4096 f32): 32 runs of one 4 KiB tile, each 31
    tiles past the last; fusion.232's 128-lane blocks of 32 rows skip one tile between runs, and a
    whole (i0) slab row where the block's rows end."""
    narrow = lower(kernels["fusion.261"].kernel, TileConfig((4, 2), (32, 1)), CORE).inputs[0]
    assert narrow.run_gaps() == [(31, 31 * 4096)]
    assert narrow.run_cost(0.0) == narrow.runs() == 32
    assert narrow.run_cost(0.25) == pytest.approx(32 * 31 ** 0.25)
    split = lower(kernels["fusion.232"].kernel, TileConfig((), (7, 6, 4, 1)), CORE).inputs[0]
    assert split.block == (7, 6, 32, 128) and split.runs() == 7 * 6 * 4
    gaps: dict[float, int] = {}
    for c, g in split.run_gaps():
        gaps[g] = gaps.get(g, 0) + c
    assert gaps[4096] == 7 * (6 * 4 - 1)  # within an (i0) row: every other tile
    assert max(gaps) == (26 * 8 - 6 * 8 + 1) * 4096 and gaps[max(gaps)] == 6  # to the next i0 row
    whole = lower(kernels["fusion.232"].kernel, TileConfig((), (2, 26, 4, 2)), CORE).inputs[0]
    assert whole.runs() == 1 and whole.run_gaps() == [] and whole.run_cost(0.25) == 1.0


@needs_real
def test_space_validation_names_the_problem(kernels) -> None:  # type: ignore[no-untyped-def]
    space = TileSpace(kernels["fusion.205"].kernel)
    with pytest.raises(HloError, match="output feature dim"):
        space.validate(TileConfig((16, 32), (4, 2)))
    with pytest.raises(HloError, match="outside"):
        space.validate(TileConfig((16, 32), (5, 1)))
    with pytest.raises(TileError):
        lower(kernels["copy.24"].kernel, TileConfig((), (1, 2, 3)), CORE)
    assert all(space.contains(c) for c in space.sample(np.random.default_rng(0), 50))


@needs_real
def test_calibrated_emulator_ranks_the_matmul_fusions(kernels) -> None:  # type: ignore[no-untyped-def]
    taus = {}
    for name in ("fusion.261", "fusion.209", "fusion.205"):
        rk = kernels[name]
        cfgs, ns = rk.configs()
        emu = np.asarray([emulate(lower(rk.kernel, c, CORE), CORE).seconds for c in cfgs])
        taus[name] = kendall_tau(-emu, ns)
        assert ns[np.argmin(emu)] == ns.min(), name  # it picks the real best
        assert 0.5 < np.median(emu * 1e9 / ns) < 2.0  # absolute times within 2x
    assert min(taus.values()) >= 0.8, taus


@needs_real
def test_evaluate_tiles_real_json(tmp_path: Path) -> None:
    import json
    from autotune.cli import main
    out = tmp_path / "r.json"
    assert main(["evaluate-tiles", "--real", str(REAL), "--models", "xgb", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["kernels"]) == 14
    for row in res["kernels"].values():
        assert set(row) == {"emulator", "xgb", "xgb+emu", "analytical", "xla_default"}
        assert all({"tau", "top1", "top5", "ape", "top5_ape"} <= set(m) for m in row.values())
    assert res["pooled"]["emulator"]["ape"] <= res["pooled"]["xla_default"]["ape"] + 1e-9


def _failing_copy(tmp_path: Path) -> tuple[Path, dict[str, list[float]]]:
    """kernels.json with failed runs: copy.24's fastest run and copy.25's default config fail (`"ns": null`),
    every run of fusion.207 fails, and one fusion.232 run is marked failed but keeps its time.
    Returns the file and each kernel's runtimes that did not fail."""
    import json
    data = json.loads(REAL.read_text())
    by = {d["kernel"]: d for d in data}
    fastest = min(by["copy.24"]["runs"], key=lambda r: r["ns"])
    fastest.update(ns=None, error=True)
    bounds = ("kernel_bounds", "output_bounds", "input_bounds", "iteration_bounds")
    default = next(r for r in by["copy.25"]["runs"] if r.get("default"))
    for r in by["copy.25"]["runs"]:  # every run of the default's config (it ran twice)
        if all(r.get(b) == default.get(b) for b in bounds):
            r.update(ns=None, error=True)
    for r in by["fusion.207"]["runs"]:
        r.update(ns=None, error=True)
    by["fusion.232"]["runs"][3]["error"] = True
    path = tmp_path / "kernels_failed.json"
    path.write_text(json.dumps(data))
    ok = {}
    for d in data:  # repeated runs of one config: their median
        times: dict[str, list[float]] = {}
        for r in d["runs"]:
            if not r.get("error"):
                key = json.dumps([r.get(b) for b in bounds])
                times.setdefault(key, []).append(r["ns"])
        ok[d["kernel"]] = [float(np.median(t)) for t in times.values()]
    return path, ok


@needs_real
def test_evaluate_tiles_real_counts_failed_runs_and_never_chooses_them(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 39: a real run file with failed configs ("ns": null, "error": true) crashed load_real
    with a TypeError; failed runs are now loaded, counted, and never ranked or chosen."""
    import json
    from autotune.cli import main
    path, ok = _failing_copy(tmp_path)
    out = tmp_path / "r.json"
    assert main(["evaluate-tiles", "--real", str(path), "--models", "xgb", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["failed_runs"] == 7
    assert res["failed"]["copy.24"] == {"runs": 1, "configs": 1}
    assert res["failed"]["copy.25"] == {"runs": 2, "configs": 1}
    assert res["failed"]["fusion.207"] == {"runs": 3, "configs": 3}
    assert res["failed"]["fusion.232"]["runs"] == 1
    assert "fusion.207" not in res["kernels"]  # nothing ran: counted, nothing to rank
    assert res["configs"]["copy.24"] == 9
    for name, row in res["kernels"].items():
        for pred, m in row.items():
            if m is None:
                continue
            assert m["best_ns"] == min(ok[name]), (name, pred)
            assert m["chosen_ns"] in ok[name] and m["top5_ns"] in ok[name], (name, pred)
    assert res["kernels"]["copy.24"]["emulator"]["best_ns"] > 3872  # the failed fastest run is not the best
    assert res["kernels"]["copy.25"]["xla_default"] is None  # its default failed: n/a, not a pick
    text = capsys.readouterr().out
    assert "7 failed" in text
    n, k = len(res["kernels"]), res["pooled"]["xla_default"]["kernels"]  # the pooled hits say of how many
    assert k < n and f"hits of {n} kernels (xla_default of {k})" in text


@needs_real
def test_evaluate_tiles_real_loko_refits_without_the_held_out_kernel(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--loko: every predictor scored on a kernel was fitted without it - the emulator's constants
    (calibration.calibrate on the other kernels), the models trained on emulator data and the
    learned corrections trained on the other kernels' real runs."""
    import json
    import autotune.backends.tpu.calibration as calibration
    import autotune.backends.tpu.evaluate as tpu_eval
    from autotune.cli import main
    data = [d for d in json.loads(REAL.read_text()) if d["kernel"] in ("copy.24", "copy.25", "fusion.207")]
    data[0]["runs"][1].update(ns=None, error=True)
    path = tmp_path / "three.json"
    path.write_text(json.dumps(data))
    calls: dict[str, list[list[str]]] = {"calibrate": [], "emulator": [], "real": []}
    real_calibrate, real_emu, real_real = calibration.calibrate, tpu_eval.emulator_training_set, tpu_eval.real_training_set

    def calibrate(kernels, base=calibration.BASE, sweeps=3):  # type: ignore[no-untyped-def]
        calls["calibrate"].append(sorted(k.kernel.name for k in kernels))
        return real_calibrate(kernels, base, sweeps=1)

    def emu_set(kernels, *a):  # type: ignore[no-untyped-def]
        calls["emulator"].append(sorted(k.kernel.name for k in kernels))
        return real_emu(kernels, *a)

    def real_set(kds, *a):  # type: ignore[no-untyped-def]
        calls["real"].append(sorted(k.name for k in kds))
        return real_real(kds, *a)
    monkeypatch.setattr(calibration, "calibrate", calibrate)
    monkeypatch.setattr(tpu_eval, "emulator_training_set", emu_set)
    monkeypatch.setattr(tpu_eval, "real_training_set", real_set)
    out = tmp_path / "r.json"
    assert main(["evaluate-tiles", "--real", str(path), "--models", "xgb", "--loko", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    names = ["copy.24", "copy.25", "fusion.207"]
    assert calls["calibrate"] == [[n for n in names if n != held] for held in names]
    assert calls["emulator"] == [names] + calls["calibrate"]  # first: fitted on all kernels
    assert calls["real"] == [names] + calls["calibrate"]
    assert set(res["loko"]["kernels"]) == set(names) and set(res["loko"]["constants"]) == set(names)
    for row in res["loko"]["kernels"].values():
        assert set(row) == {"emulator", "xgb", "xgb+emu", "analytical", "xla_default"}
        assert all({"tau", "top1", "top5", "ape", "top5_ape"} <= set(m) for m in row.values())
    assert res["loko"]["pooled"]["xla_default"]["tau"] is None
    assert res["failed"]["copy.24"]["runs"] == 1


@needs_real
def test_real_kernels_export_to_tile_files_and_load_back(kernels, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from autotune.backends.tpu.tpugraphs import HLO_OPCODES, dataset_from_tiles, read_tile, tile_graph_from_real, write_tile
    paths = []
    for name, rk in kernels.items():
        t = tile_graph_from_real(rk)
        write_tile(tmp_path / f"{name}.npz", t)
        back = read_tile(tmp_path / f"{name}.npz")
        np.testing.assert_array_equal(back.config_feat, t.config_feat)
        cfgs, ns = rk.configs()
        assert back.config_feat.shape == (len(cfgs), 24)
        assert list(back.config_feat[0, 8:8 + len(cfgs[0].output_bounds)]) == list(cfgs[0].output_bounds)
        # [consumer, producer], producers first (topological order)
        assert (back.edge_index[:, 0] > back.edge_index[:, 1]).all()
        paths.append(tmp_path / f"{name}.npz")
    copy = read_tile(tmp_path / "copy.24.npz")
    assert list(copy.node_opcode) == [HLO_OPCODES["parameter"], HLO_OPCODES["copy"]] == [63, 27]
    assert copy.edge_index.tolist() == [[1, 0]]
    assert copy.node_feat[1, 0] == 1 and copy.node_feat[1, 15] == 1  # the root, bf16
    assert list(copy.node_feat[1, 134:138]) == [3, 2, 1, 0]
    assert len(dataset_from_tiles(paths)) == sum(len(rk.configs()[0]) for rk in kernels.values())


@needs_real
def test_splitting_the_contraction_at_one_output_tile_costs_little(kernels) -> None:  # type: ignore[no-untyped-def]
    """fusion.261 (a weight update: param - lr * conv): the same output tile with the contraction in
    one step or in two ran 99.0 and 97.8 us; the epilogue runs once per output block and the output
    block's DMA overlaps both steps, so the emulator keeps the two within 10%."""
    from autotune.backends.tpu.lowering import epilogue_ids
    rk = kernels["fusion.261"]
    assert {i.name for _, i in rk.kernel.walk() if i.id in epilogue_ids(rk.kernel)} == {"multiply.201", "subtract.185"}
    whole, split = (lower(rk.kernel, TileConfig(kb, (64, 8)), CORE) for kb in ((4, 4), (2, 4)))
    assert whole.grid[-1] == 1 and split.grid[-1] == 2
    assert whole.epilogue_vreg_ops == split.epilogue_vreg_ops > 0
    ratio = emulate(split, CORE).seconds / emulate(whole, CORE).seconds
    assert 0.9 < ratio < 1.1, ratio


@needs_real
def test_calibration_caches_lowering_by_the_fields_lowering_reads(kernels) -> None:  # type: ignore[no-untyped-def]
    """calibration.emulated_ns reuses lowered kernels across a search over the other constants;
    its times equal a fresh lowering, and a change of a field lower() reads is lowered anew."""
    import dataclasses
    import math
    from autotune.backends.tpu import calibration
    from autotune.backends.tpu.lowering import LOWERING_FIELDS
    assert set(LOWERING_FIELDS) == {"f32_mxu_passes", "transcendental_cost"}
    rk = kernels["fusion.261"]  # an f32 convolution: f32_mxu_passes changes its lowering
    space = TileSpace(rk.kernel)

    def fresh(core):  # type: ignore[no-untyped-def]
        out = []
        for c in rk.configs()[0]:
            try:
                out.append(emulate(lower(rk.kernel, c, core, space), core).seconds * 1e9)
            except TileError:
                out.append(math.inf)
        return np.asarray(out)
    for core in (CORE, dataclasses.replace(CORE, hbm_gbps=300.0), dataclasses.replace(CORE, f32_mxu_passes=1)):
        assert np.allclose(calibration.emulated_ns(rk, core), fresh(core))
    assert not np.allclose(fresh(CORE), fresh(dataclasses.replace(CORE, f32_mxu_passes=1)))
