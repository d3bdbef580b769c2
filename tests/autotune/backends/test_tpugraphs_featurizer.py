"""The TpuGraphs files against the dataset's own code (google-research-datasets/tpu_graphs):

- a port of its featurizer (process_data/xla/featurizers.h, FeaturizeHloInstruction with the tile
  and layout tasks' feature bits) and of its graph construction (hlo_encoder.cc EncodeHloModule),
  written from the C++ and independent of autotune's code: it reads kernels.json's raw instruction
  dicts, not autotune's parsed kernels. All 140 columns, the opcodes and the edges of the 14 real
  kernels must match node by node.
- a port of the numpy part of its two loaders (baselines/tiles/data.py and baselines/layout/data.py
  NpzDatasetPartition.add_npz_file / finalize / get_item): files autotune writes load through them,
  and files laid out as the producer writes them read back through autotune.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.backends.tpu.tpugraphs import (LayoutGraph, TileGraph, TpuGraphsError, hlo_graph, read_layout,
                                           read_tile, write_layout, write_tile)

REAL = Path(__file__).resolve().parents[4] / "shared" / "tpu_real" / "kernels.json"
needs_real = pytest.mark.skipif(not REAL.exists(), reason="no ../shared/tpu_real/kernels.json")

# ---- port of featurizers.h (FeaturizeHloInstruction; include_features = FEATURE_OP_NON_ZERO | FEATURE_WINDOW)
# hlo_opcode.h LEARNED_HLO_OPCODE_LIST, the opcodes the fixture uses
OPCODE_ID = {"add": 2, "bitcast": 11, "broadcast": 13, "compare": 20, "constant": 24, "convert": 25,
             "convolution": 26, "copy": 27, "divide": 32, "exponential": 37, "fusion": 41, "iota": 48, "and": 52,
             "maximum": 57, "multiply": 59, "negate": 60, "parameter": 63, "reduce": 70, "reshape": 75, "rng": 77,
             "select": 83, "shift-left": 87, "subtract": 95, "tuple": 100}
# kPrimitiveTypeFeatures, in order
PRIMITIVE_TYPES = ["invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
                   "bf16", "c64", "c128", "tuple", "opaque", "token"]


def fixed_numeric_sequence(out: list, source: list, leading: int, zero_product_on_empty_source: bool = False) -> None:
    forwarded, total, product, empty = 0, 0, 1, True
    for v in source:
        empty = False
        total += v
        product *= v
        if forwarded < leading:
            out.append(float(v))
            forwarded += 1
    out += [0.0] * (leading - forwarded)
    out.append(float(total))
    out.append(0.0 if empty and zero_product_on_empty_source else float(product))


def fixed_numeric_sequence_no_aggregate(out: list, source: list, leading: int) -> None:
    src = list(source)[:leading]
    out += [float(v) for v in src] + [0.0] * (leading - len(src))


def variable_length_bools(out: list, source: list, leading: int) -> None:
    src = [bool(b) for b in source]
    out += [1.0 if b else 0.0 for b in src[:leading]] + [0.0] * (leading - min(len(src), leading))
    out += [float(sum(src)), float(len(src) - sum(src))]


def featurize_instruction(inst: dict, comp: dict) -> list[float]:
    """One node's features. Proto fields kernels.json leaves out are the proto's defaults (0, empty);
    batch_group_count, which kernels.json does not carry, is what XLA sets on a convolution (1)."""
    out: list[float] = [1.0 if inst["id"] == comp["root_id"] else 0.0, 0.0]   # is_root, element_size_in_bits
    # FeaturizeShape: element type one-hot, dimensions<6>, tuple_shapes_size
    is_tuple = inst["dtype"] == "tuple"
    out += [1.0 if t == inst["dtype"] else 0.0 for t in PRIMITIVE_TYPES]
    fixed_numeric_sequence(out, [] if is_tuple else inst["shape"], 6)
    out.append(float(len(inst["shape"])) if is_tuple else 0.0)
    out.append(float(inst.get("parameter_number", 0)))
    fixed_numeric_sequence_no_aggregate(out, inst.get("dimensions", []), 6)
    # FeaturizeWindow
    dims = inst.get("window") or []
    for key in ("size", "stride", "padding_low", "padding_high", "window_dilation", "base_dilation"):
        fixed_numeric_sequence(out, [d[key] for d in dims], 6)
    variable_length_bools(out, [d.get("window_reversal", False) for d in dims], 6)
    # FeaturizeConvolutionDimensionNumbers
    cd = inst.get("conv_dims") or {}
    out += [float(cd.get("in_batch", 0)), float(cd.get("in_feat", 0))]
    fixed_numeric_sequence_no_aggregate(out, cd.get("in_spatial", []), 4)
    out += [float(cd.get("k_in", 0)), float(cd.get("k_out", 0))]
    fixed_numeric_sequence_no_aggregate(out, cd.get("k_spatial", []), 4)
    out += [float(cd.get("out_batch", 0)), float(cd.get("out_feat", 0))]
    # FEATURE_OP_NON_ZERO
    out.append(float(inst.get("feature_group_count", 0)))
    out.append(float(inst.get("batch_group_count", 1 if inst["opcode"] == "convolution" else 0)))
    for key in ("start", "stride", "limit"):
        fixed_numeric_sequence(out, [s[key] for s in inst.get("slice_dims", [])], 2)
    fixed_numeric_sequence(out, inst.get("dynamic_slice_sizes", []), 2)
    for key in ("edge_padding_low", "edge_padding_high"):
        fixed_numeric_sequence(out, [p[key] for p in inst.get("padding_config", [])], 2)
    out.append(1.0 if inst.get("is_stable") else 0.0)
    # FeaturizeLayoutProto: minor_to_major<6> (a tuple's shape has no layout)
    fixed_numeric_sequence_no_aggregate(out, [] if is_tuple else inst["layout"]["minor_to_major"], 6)
    return out


def encode_module(k: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """hlo_encoder.cc EncodeHloModule over the whole module (directed): (opcodes, features, operand edges)."""
    roots = {c["id"]: c["root_id"] for c in k["computations"]}                  # CollectComputationEntries
    vocab = [i["id"] for c in k["computations"] for i in c["instructions"]]       # CollectStats' identifiers
    pos = {iid: n for n, iid in enumerate(vocab)}
    ops, feats, edges = [], [], []
    for comp in k["computations"]:
        for inst in comp["instructions"]:
            ops.append(OPCODE_ID[inst["opcode"]])
            feats.append(featurize_instruction(inst, comp))
            for operand in sorted(set(inst["operands"])):                        # DeduplicateField
                edges.append((pos[inst["id"]], pos[operand]))
            for sub in inst["called"]:
                edges.append((pos[inst["id"]], pos[roots[sub]]))
    edges.sort()                                                                  # ReorderSparseTensor
    assert len(set(edges)) == len(edges)                                          # SparseTensorIndicesAreUnique
    return np.asarray(ops), np.asarray(feats, np.float32), np.asarray(edges, np.int64).reshape(-1, 2)


@pytest.fixture(scope="module")
def real():  # type: ignore[no-untyped-def]
    from autotune.backends.tpu.hlo import load_real
    raw = json.loads(REAL.read_text())
    return raw, {rk.kernel.name: rk for rk in load_real(REAL)}


@needs_real
def test_node_features_match_the_dataset_featurizer_on_every_column_of_the_14_kernels(real) -> None:  # type: ignore[no-untyped-def]
    raw, parsed = real
    assert len(raw) == 14
    differing = {}
    for k in raw:
        ops, feat, edges = encode_module(k)
        mine, my_ops, my_edges, _ = hlo_graph(parsed[k["kernel"]].kernel)
        assert feat.shape[1] == mine.shape[1] == 140
        assert mine.shape == feat.shape, (k["kernel"], mine.shape, feat.shape)
        cols = sorted(set(np.nonzero(mine != feat)[1].tolist()))
        if cols:
            differing[k["kernel"]] = cols
        np.testing.assert_array_equal(my_ops, ops, err_msg=k["kernel"])
        np.testing.assert_array_equal(my_edges, edges, err_msg=k["kernel"])
    assert differing == {}


@needs_real
def test_the_graph_keeps_every_computation_and_only_the_dataset_edges(real) -> None:  # type: ignore[no-untyped-def]
    raw, parsed = real
    n = m = 0
    for k in raw:
        feat, _, edges, _ = hlo_graph(parsed[k["kernel"]].kernel)
        n, m = n + len(feat), m + len(edges)
        assert (edges[:, 0] > edges[:, 1]).all()        # callees and operands come first: topological
    assert (n, m) == (263, sum(len(encode_module(k)[2]) for k in raw))
    # fusion.232 calls its fused computation, whose reduce calls the reducer region_0.169: both are nodes
    k = next(k for k in raw if k["kernel"] == "fusion.232")
    feat, ops, edges, ins = hlo_graph(parsed["fusion.232"].kernel)
    names = [i.name for i in ins]
    reduce = next(j for j, i in enumerate(ins) if i.opcode == "reduce")
    region_root = names.index(next(i["name"] for i in k["computations"][0]["instructions"]
                                   if i["id"] == k["computations"][0]["root_id"]))
    assert [reduce, region_root] in edges.tolist()
    params = [j for j, i in enumerate(ins) if i.opcode == "parameter"]
    assert not any(e[0] in params for e in edges.tolist())   # a parameter consumes nothing
    assert feat[region_root, 0] == 1                           # each computation's root is a root


# ---- port of the numpy part of the official loaders -------------------------------------------------------

class TilePartition:
    """baselines/tiles/data.py NpzDatasetPartition: add_npz_file, finalize, get_item (numpy, no TensorFlow)."""

    def __init__(self) -> None:
        self._data_dict: dict[str, list] = collections.defaultdict(list)
        self._num_edges, self._num_configs, self._num_nodes = [0], [0], [0]

    def add_npz_file(self, tile_id: str, npz_file, min_configs: int = 2) -> None:  # type: ignore[no-untyped-def]
        npz_data = dict(npz_file.items())
        num_configs = npz_data["config_feat"].shape[0]
        if num_configs < min_configs:
            return
        for key, ndarray in npz_data.items():
            self._data_dict[key].append(ndarray)
        self._data_dict["tile_id"].append(np.array(tile_id))
        num_nodes = npz_data["node_feat"].shape[0]
        num_edges = npz_data["edge_index"].shape[0]
        assert num_nodes == npz_data["node_opcode"].shape[0]
        assert num_configs == npz_data["config_runtime"].shape[0]
        assert num_configs == npz_data["config_runtime_normalizers"].shape[0]
        self._num_nodes.append(num_nodes)
        self._num_edges.append(num_edges)
        self._num_configs.append(num_configs)

    def finalize(self) -> None:
        for key in ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime",
                    "config_runtime_normalizers"):
            setattr(self, key, np.concatenate(self._data_dict[key], axis=0))
        self.edge_ranges = np.cumsum(self._num_edges)
        self.node_ranges = np.cumsum(self._num_nodes)
        self.config_ranges = np.cumsum(self._num_configs)

    def get_item(self, index: int) -> dict:
        n0, n1 = self.node_ranges[index], self.node_ranges[index + 1]
        e0, e1 = self.edge_ranges[index], self.edge_ranges[index + 1]
        c0, c1 = self.config_ranges[index], self.config_ranges[index + 1]
        item = dict(node_features=self.node_feat[n0:n1], node_ops=self.node_opcode[n0:n1],
                    edges=self.edge_index[e0:e1], config_features=self.config_feat[c0:c1],
                    config_runtimes=self.config_runtime[c0:c1],
                    config_runtime_normalizers=self.config_runtime_normalizers[c0:c1])
        # to_graph_tensor: 'feed' edges op -> op from edges[:, 0] to edges[:, 1]; runtimes / normalizers
        assert (item["edges"] >= 0).all() and (item["edges"] < n1 - n0).all()
        with np.errstate(invalid="ignore"):     # an unlabelled file: 0 / 0
            item["normalized"] = item["config_runtimes"] / item["config_runtime_normalizers"]
        return item


class LayoutPartition:
    """baselines/layout/data.py NpzDatasetPartition: add_npz_file, finalize, get_item (numpy, no TensorFlow)."""

    def __init__(self) -> None:
        self._data_dict: dict[str, list] = collections.defaultdict(list)
        self._num_edges, self._num_configs, self._num_nodes = [0], [0], [0]
        self._num_config_nodes, self._num_node_splits = [0], [0]

    def add_npz_file(self, graph_id: str, npz_file, min_configs: int = 2) -> None:  # type: ignore[no-untyped-def]
        npz_data = dict(npz_file.items())
        num_configs = npz_data["node_config_feat"].shape[0]
        num_config_nodes = npz_data["node_config_feat"].shape[1]
        assert npz_data["node_config_feat"].shape[2] == 18
        npz_data["node_splits"] = npz_data["node_splits"].reshape([-1])     # a KeyError without node_splits
        npz_data["argsort_config_runtime"] = np.argsort(npz_data["config_runtime"])
        if num_configs < min_configs:
            return
        npz_data["node_config_feat"] = npz_data["node_config_feat"].reshape((num_configs * num_config_nodes, -1))
        for key, ndarray in npz_data.items():
            self._data_dict[key].append(ndarray)
        self._data_dict["graph_id"].append(np.array(graph_id))
        num_nodes = npz_data["node_feat"].shape[0]
        assert num_config_nodes == npz_data["node_config_ids"].shape[0]
        assert num_nodes == npz_data["node_opcode"].shape[0]
        assert num_configs == npz_data["config_runtime"].shape[0]
        self._num_nodes.append(num_nodes)
        self._num_config_nodes.append(num_config_nodes)
        self._num_node_splits.append(npz_data["node_splits"].shape[0])
        self._num_edges.append(npz_data["edge_index"].shape[0])
        self._num_configs.append(num_configs)

    def finalize(self) -> None:
        for key in ("node_feat", "node_opcode", "edge_index", "node_config_feat", "config_runtime",
                    "argsort_config_runtime", "node_config_ids", "node_splits"):
            setattr(self, key, np.concatenate(self._data_dict.pop(key), axis=0))
        self.edge_ranges = np.cumsum(self._num_edges)
        self.node_ranges = np.cumsum(self._num_nodes)
        self.config_node_ranges = np.cumsum(self._num_config_nodes)
        self.config_ranges = np.cumsum(self._num_configs)
        self.node_split_ranges = np.cumsum(self._num_node_splits)
        num_configs = np.diff(self.config_ranges)
        num_config_nodes = np.diff(self.config_node_ranges)
        self.flat_config_ranges = np.cumsum(np.concatenate([[0], num_configs * num_config_nodes]))

    def get_item(self, index: int) -> dict:
        r = lambda a: (a[index], a[index + 1])  # noqa: E731
        (n0, n1), (e0, e1), (c0, c1) = r(self.node_ranges), r(self.edge_ranges), r(self.config_ranges)
        (k0, k1), (f0, f1), (s0, s1) = r(self.config_node_ranges), r(self.flat_config_ranges), r(self.node_split_ranges)
        flat = self.node_config_feat[f0:f1]
        item = dict(node_features=self.node_feat[n0:n1], node_ops=self.node_opcode[n0:n1],
                    edges=self.edge_index[e0:e1].astype(np.int32),
                    node_config_features=flat.reshape([c1 - c0, k1 - k0, flat.shape[-1]]),
                    node_config_ids=self.node_config_ids[k0:k1].astype(np.int32),
                    node_splits=self.node_splits[s0:s1], config_runtimes=self.config_runtime[c0:c1],
                    argsort_config_runtimes=self.argsort_config_runtime[c0:c1])
        assert (item["node_config_ids"] < n1 - n0).all() and (item["edges"] < n1 - n0).all()
        return item


def _layout(n: int = 5, runtimes=(5, 7, 6), splits=None) -> LayoutGraph:  # type: ignore[no-untyped-def]
    cfg = np.full((len(runtimes), 2, 18), -1, np.float32)
    cfg[:, 0, :2] = [[1, 0], [0, 1], [1, 0]][:len(runtimes)]
    return LayoutGraph(np.arange(n * 140, dtype=np.float32).reshape(n, 140), np.array([63, 26, 2, 75, 63][:n]),
                       np.array([[1, 0], [2, 1], [3, 2]]), np.array([1, 3]), cfg, np.array(runtimes), splits)


def test_a_layout_file_written_without_splits_loads_in_the_official_loader(tmp_path: Path) -> None:
    write_layout(tmp_path / "g.npz", _layout())
    part = LayoutPartition()
    with np.load(tmp_path / "g.npz") as z:
        part.add_npz_file("g", z)
    part.finalize()
    item = part.get_item(0)
    assert item["node_splits"].tolist() == [0, 5]          # as the producer writes it: 0, ..., n
    assert item["node_config_features"].shape == (3, 2, 18)
    assert item["argsort_config_runtimes"].tolist() == [0, 2, 1]
    np.testing.assert_array_equal(item["node_features"], _layout().node_feat)


def test_a_layout_file_as_the_producer_writes_it_round_trips(tmp_path: Path) -> None:
    """graph_features.cc: node_opcode uint8, edge_index / node_config_ids / node_splits int64, node_splits
    the computation boundaries ending with n."""
    g = _layout()
    arrays = dict(node_feat=g.node_feat, node_opcode=g.node_opcode.astype(np.uint8), edge_index=g.edge_index,
                  node_config_ids=g.node_config_ids.astype(np.int64), node_config_feat=g.node_config_feat,
                  config_runtime=g.config_runtime.astype(np.int64), node_splits=np.array([0, 2, 5], np.int64))
    np.savez_compressed(tmp_path / "p.npz", **arrays)
    back = read_layout(tmp_path / "p.npz")
    assert back.node_splits.tolist() == [0, 2, 5]
    write_layout(tmp_path / "q.npz", back)
    with np.load(tmp_path / "p.npz") as a, np.load(tmp_path / "q.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    parts = []
    for name in ("p", "q"):
        part = LayoutPartition()
        with np.load(tmp_path / f"{name}.npz") as z:
            part.add_npz_file(name, z)
        part.finalize()
        parts.append(part.get_item(0))
    for key in parts[0]:
        np.testing.assert_array_equal(parts[0][key], parts[1][key], err_msg=key)
    with pytest.raises(TpuGraphsError, match="node_splits"):
        write_layout(tmp_path / "r.npz", _layout(splits=np.array([0, 6])))


def _tile(runtimes, normalizers) -> TileGraph:  # type: ignore[no-untyped-def]
    c = len(runtimes)
    cf = np.zeros((c, 24), np.float32)
    cf[:, 8] = np.arange(1, c + 1)
    return TileGraph(np.ones((3, 140), np.float32), np.array([63, 63, 2]), np.array([[2, 0], [2, 1]]), cf,
                     np.array(runtimes), np.array(normalizers))


def test_tile_files_round_trip_through_the_official_loader_unlabelled_ones_too(tmp_path: Path) -> None:
    write_tile(tmp_path / "a.npz", _tile([900, 1000, 1200], [1000, 1000, 1000]))
    write_tile(tmp_path / "test.npz", _tile([0, 0], [0, 0]))              # the dataset's unlabelled test files
    assert not read_tile(tmp_path / "test.npz").labelled and read_tile(tmp_path / "a.npz").labelled
    part = TilePartition()
    for name in ("a", "test"):
        with np.load(tmp_path / f"{name}.npz") as z:
            assert {k: z[k].dtype.name for k in z.files} == {
                "node_feat": "float32", "node_opcode": "uint8", "edge_index": "int64", "config_feat": "float32",
                "config_runtime": "int64", "config_runtime_normalizers": "int64"}
            part.add_npz_file(name, z)
    part.finalize()
    a, test = part.get_item(0), part.get_item(1)
    assert a["normalized"].tolist() == [0.9, 1.0, 1.2]
    assert test["config_runtimes"].tolist() == [0, 0] and test["edges"].tolist() == [[2, 0], [2, 1]]
    from autotune.backends.tpu.tpugraphs import dataset_from_tiles
    with pytest.raises(TpuGraphsError, match="unlabelled"):      # read, but nothing to train on
        dataset_from_tiles([tmp_path / "test.npz"])
    with pytest.raises(TpuGraphsError, match="config_runtime"):
        write_tile(tmp_path / "mixed.npz", _tile([0, 5], [5, 5]))
    with pytest.raises(TpuGraphsError, match="config_runtime"):
        write_tile(tmp_path / "neg.npz", _tile([-1, -1], [5, 5]))


@needs_real
def test_real_kernels_export_in_the_dataset_form_and_load_in_the_official_loader(real, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from autotune.backends.tpu.tpugraphs import tile_graph_from_real
    raw, parsed = real
    part = TilePartition()
    for k in raw:
        rk = parsed[k["kernel"]]
        write_tile(tmp_path / f"{k['kernel']}.npz", tile_graph_from_real(rk))
        with np.load(tmp_path / f"{k['kernel']}.npz") as z:
            part.add_npz_file(k["kernel"], z, min_configs=1)
    part.finalize()
    for j, k in enumerate(raw):
        item = part.get_item(j)
        ops, feat, edges = encode_module(k)
        np.testing.assert_array_equal(item["node_features"], feat)
        np.testing.assert_array_equal(item["node_ops"], ops)
        np.testing.assert_array_equal(item["edges"], edges)
        default = [r for r in k["runs"] if r["default"] and not r["error"]]
        assert (item["config_runtime_normalizers"] == round(default[0]["ns"])).all()   # the default config's runtime


def test_an_emulated_kernel_exports_in_the_dataset_form(tmp_path: Path) -> None:
    """tile_graph_from_ops (for evaluate-tiles --export): the dataset's opcode ids and 140 features, not the
    project's op-graph vocabulary, runtimes normalised by the named default config's, not the best one's."""
    from autotune.backends.tpu.tpugraphs import HLO_OPCODES, tile_graph_from_ops
    from autotune.task import Task
    from autotune.backends.tpu.templates import kernel_ops
    ops = kernel_ops(Task.create("tpu_matmul_reduce", {"M": 256, "N": 512, "K": 512, "ew": 2}, threads=1))
    g = tile_graph_from_ops(ops, np.zeros((3, 24), np.float32), [3200.4, 2000.0, 4000.0], default=0)
    assert g.node_opcode.tolist() == [HLO_OPCODES[o] for o in ("parameter", "parameter", "dot", "add", "multiply",
                                                               "reduce")]
    assert g.edge_index.tolist() == [[2, 0], [2, 1], [3, 2], [4, 3], [5, 4]]
    assert g.node_feat[:, 0].tolist() == [0, 0, 0, 0, 0, 1]                     # the reduce is the root
    assert g.node_feat[:2, 15].tolist() == [1, 1] and g.node_feat[2:, 13].all()  # bf16 inputs, f32 from the dot
    assert g.node_feat[1, 28] == 512 * 512 and g.node_feat[1, 30] == 1          # volume, parameter_number
    assert g.node_feat[:, 44].tolist() == [1] * 6                               # an empty window's product
    assert g.config_runtime.tolist() == [3200, 2000, 4000] and (g.config_runtime_normalizers == 3200).all()
    write_tile(tmp_path / "e.npz", g)
    part = TilePartition()
    with np.load(tmp_path / "e.npz") as z:
        part.add_npz_file("e", z)
    part.finalize()
    assert part.get_item(0)["normalized"].tolist() == [1.0, 2000 / 3200, 4000 / 3200]
