"""The GNN cost model on small generated data, and the TpuGraphs tile format."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import Dataset, load_model
from autotune.cost_model.gnn_model import GNNModel
from autotune.cost_model.graph import NODE_FEATS, OPCODES, ProgramGraph
from autotune.cost_model.metrics import kendall_tau
from autotune.backends.tpu.tpugraphs import TileGraph, TpuGraphsError, dataset_from_tiles, read_tile, write_tile


def toy(n: int = 48, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    """Chains of loops whose runtime is set by one node feature: separable by construction."""
    rng = np.random.default_rng(seed)
    ds = Dataset(X=np.zeros((0, 4), np.float32))
    secs = []
    graphs = []
    for i in range(n):
        k = int(rng.integers(3, 7))
        ext = rng.uniform(1, 8, k).astype(np.float32)
        feat = np.zeros((k, NODE_FEATS), np.float32)
        feat[:, 0] = ext
        edges = np.array([[j, j + 1] for j in range(k - 1)], np.int64)
        cfg = rng.uniform(0, 1, 4).astype(np.float32)
        graphs.append(ProgramGraph(np.zeros(k, np.int64), feat, edges, cfg))
        secs.append(float(np.exp(ext.sum() / 4 + cfg[0])))
    ds.add(np.stack([g.config_feat for g in graphs]), secs, "toy", graphs)
    return ds, np.array(secs)


@pytest.mark.parametrize("loss", ["mse", "rank_logistic", "rank_hinge"])
def test_loss_falls_and_ranks_a_separable_set(loss: str) -> None:
    ds, secs = toy()
    m = GNNModel(loss=loss, epochs=60, hidden=32, seed=0)
    m.fit(ds)
    assert m.losses[-1] < 0.5 * m.losses[0], m.losses[::10]
    assert kendall_tau(m.predict(ds), secs) > 0.8


def test_deterministic_under_a_seed_and_save_load_exact(tmp_path: Path) -> None:
    ds, _ = toy()
    a, b = GNNModel(epochs=5, seed=3), GNNModel(epochs=5, seed=3)
    a.fit(ds)
    b.fit(ds)
    np.testing.assert_array_equal(a.predict(ds), b.predict(ds))
    a.save(tmp_path / "g.json")
    np.testing.assert_array_equal(load_model(tmp_path / "g.json").predict(ds), a.predict(ds))


def tile(n: int = 5, c: int = 3) -> TileGraph:
    rng = np.random.default_rng(0)
    return TileGraph(rng.random((n, 140), dtype=np.float32), rng.integers(0, 100, n),
                     np.array([[i, i + 1] for i in range(n - 1)], np.int64), rng.random((c, 24), dtype=np.float32),
                     rng.uniform(1, 10, c), np.ones(c))


def test_tpugraphs_tile_round_trip_and_training(tmp_path: Path) -> None:
    t = tile()
    write_tile(tmp_path / "a.npz", t)
    back = read_tile(tmp_path / "a.npz")
    for k in ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime", "config_runtime_normalizers"):
        np.testing.assert_array_equal(getattr(back, k), getattr(t, k))
    write_tile(tmp_path / "b.npz", tile(7, 4))
    ds = dataset_from_tiles([tmp_path / "a.npz", tmp_path / "b.npz"])
    assert len(ds) == 7 and len(ds.graphs) == 7
    m = GNNModel(epochs=3)
    m.fit(ds)
    assert m.predict(ds).shape == (7,)


@pytest.mark.parametrize("change,needle", [
    (dict(node_feat=np.zeros((5, 139), np.float32)), "node_feat"),
    (dict(node_feat=np.zeros((5, 140), np.float64)), "node_feat"),
    (dict(edge_index=np.array([[0, 9]])), "outside"),
    (dict(config_feat=np.zeros((3, 23), np.float32)), "config_feat"),
    (dict(config_runtime=np.ones(2)), "config_runtime"),
    (dict(node_opcode=np.array([1.5] * 5)), "node_opcode"),
])
def test_tpugraphs_validation_names_the_array(change: dict, needle: str, tmp_path: Path) -> None:
    t = tile()
    for k, v in change.items():
        setattr(t, k, v)
    with pytest.raises(TpuGraphsError, match=needle):
        write_tile(tmp_path / "x.npz", t)
    np.savez(tmp_path / "y.npz", node_feat=np.zeros((2, 140), np.float32))
    with pytest.raises(TpuGraphsError, match="missing arrays"):
        read_tile(tmp_path / "y.npz")


def test_opcode_vocabulary_is_stable() -> None:
    assert OPCODES[0] == "loop_serial" and len(set(OPCODES)) == len(OPCODES)
