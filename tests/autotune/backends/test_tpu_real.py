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
        assert set(row) == {"emulator", "xgb", "analytical", "xla_default"}
        assert all({"tau", "top1", "top5", "ape"} <= set(m) for m in row.values())
    assert res["pooled"]["emulator"]["ape"] <= res["pooled"]["xla_default"]["ape"] + 1e-9


@needs_real
def test_real_kernels_export_to_tile_files_and_load_back(kernels, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from autotune.cost_model.tpugraphs import HLO_OPCODES, dataset_from_tiles, read_tile, tile_graph_from_real, write_tile
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
