"""The TpuGraphs files as the public specification defines them (google-research-datasets/tpu_graphs
README, "Dataset File Description"): tile and layout collections written by hand and read back."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.backends.tpu.tpugraphs import (HLO_OPCODES, LayoutGraph, TpuGraphsError, read_layout, read_tile,
                                           write_layout)


def test_a_tile_file_built_to_the_spec_reads_back(tmp_path: Path) -> None:
    n, c = 3, 2
    nf = np.zeros((n, 140), np.float32)
    nf[2, 0] = 1                                        # is_root
    nf[:, 13] = 1                                       # f32
    nf[:, 21:23] = [32, 128]; nf[:, 27] = 160; nf[:, 28] = 4096
    arrays = dict(node_feat=nf, node_opcode=np.array([63, 63, 2], np.int32),
                  edge_index=np.array([[2, 0], [2, 1]], np.int32),  # node 2 (add) consumes 0 and 1
                  config_feat=np.zeros((c, 24), np.float32), config_runtime=np.array([900, 1000], np.int64),
                  config_runtime_normalizers=np.array([1000, 1000], np.int64))
    arrays["config_feat"][:, 8:10] = [[4, 1], [2, 1]]
    np.savez(tmp_path / "k.npz", **arrays)
    t = read_tile(tmp_path / "k.npz")
    for k, v in arrays.items():
        np.testing.assert_array_equal(getattr(t, k), v)
    g, rt = t.samples()[0]
    assert g.edge_index.tolist() == [[0, 2], [1, 2]] and rt == pytest.approx(0.9)  # data flow, producer first


def test_a_layout_file_built_to_the_spec_round_trips(tmp_path: Path) -> None:
    n, nc, c = 4, 2, 3
    arrays = dict(node_feat=np.zeros((n, 140), np.float32),
                  node_opcode=np.array([HLO_OPCODES["parameter"], HLO_OPCODES["convolution"], HLO_OPCODES["add"],
                                        HLO_OPCODES["reshape"]], np.int32),
                  edge_index=np.array([[1, 0], [2, 1], [3, 2]], np.int32),
                  node_config_ids=np.array([1, 3], np.int32),
                  node_config_feat=np.full((c, nc, 18), -1, np.float32),
                  config_runtime=np.array([5, 7, 6], np.int32),
                  node_splits=np.array([0, 2, 4], np.int64))  # as the producer writes it: boundaries, 0 ... n
    arrays["node_config_feat"][:, 0, :2] = [[1, 0], [0, 1], [1, 0]]
    np.savez(tmp_path / "g.npz", **arrays)
    g = read_layout(tmp_path / "g.npz")
    for k, v in arrays.items():
        np.testing.assert_array_equal(getattr(g, k), v)
    write_layout(tmp_path / "h.npz", g)
    h = read_layout(tmp_path / "h.npz")
    np.testing.assert_array_equal(h.node_config_feat, g.node_config_feat)
    np.testing.assert_array_equal(h.node_splits, g.node_splits)
    del arrays["node_splits"]
    np.savez(tmp_path / "nosplit.npz", **arrays)
    assert read_layout(tmp_path / "nosplit.npz").node_splits is None
    write_layout(tmp_path / "i.npz", read_layout(tmp_path / "nosplit.npz"))
    assert read_layout(tmp_path / "i.npz").node_splits.tolist() == [0, 4]   # always written: the loader needs it


@pytest.mark.parametrize("change,needle", [
    (dict(node_config_ids=np.array([1, 9])), "node_config_ids"),
    (dict(node_config_feat=np.zeros((3, 2, 17), np.float32)), "node_config_feat"),
    (dict(config_runtime=np.array([1, 2])), "config_runtime"),
    (dict(node_splits=np.array([2, 1])), "node_splits"),
    (dict(node_splits=np.array([0, 5])), "node_splits"),
])
def test_layout_validation_names_the_array(change: dict, needle: str, tmp_path: Path) -> None:
    g = LayoutGraph(np.zeros((4, 140), np.float32), np.zeros(4, np.int32), np.array([[1, 0]]), np.array([1, 3]),
                    np.zeros((3, 2, 18), np.float32), np.array([5, 7, 6]), None)
    for k, v in change.items():
        setattr(g, k, v)
    with pytest.raises(TpuGraphsError, match=needle):
        write_layout(tmp_path / "x.npz", g)
