"""Read and write the TpuGraphs `.npz` files as the dataset defines them (README of
google-research-datasets/tpu_graphs, "Dataset File Description"), so graph models train on the
real dataset where a user has it, and on data this project generates.

Tile collection (one kernel graph, c tile configs):
  node_feat (n, 140) float32 (the dataset's columns: NODE_FEATURE_COLUMNS), node_opcode (n,)
  integer (the dataset's opcode ids: HLO_OPCODES), edge_index (m, 2) integer, each row
  [consumer, producer] (u consumes the output of v), nodes in topological order, config_feat (c, 24)
  float32 (the raw tile bounds: kernel, output, input, each 6 values, sum, product),
  config_runtime (c,) and config_runtime_normalizers (c,) int64 nanoseconds.
Layout collection (one program graph, nc configurable nodes, c configs): node_feat, node_opcode,
  edge_index as above, node_config_ids (nc,), node_config_feat (c, nc, 18) float32 (output, input,
  kernel layouts, -1 padded), config_runtime (c,), and optionally node_splits (the first node of
  each computation).

Example::

    >>> import numpy as np, tempfile, os
    >>> from autotune.cost_model.tpugraphs import TileGraph, write_tile, read_tile
    >>> t = TileGraph(np.zeros((3, 140), np.float32), np.array([1, 2, 3]), np.array([[0, 1], [1, 2]]),
    ...               np.zeros((2, 24), np.float32), np.array([5.0, 7.0]), np.array([5.0, 5.0]))
    >>> p = os.path.join(tempfile.mkdtemp(), "k.npz"); write_tile(p, t); read_tile(p).config_runtime.tolist()
    [5.0, 7.0]
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from autotune.errors import AutotuneError

NODE_FEAT = 140
CONFIG_FEAT = 24
KEYS = ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime", "config_runtime_normalizers")


# the dataset's opcode ids (tpu_graphs/process_data/xla/hlo_opcode.h); 0 is an unknown opcode
HLO_OPCODES: dict[str, int] = {name: i for i, name in enumerate((
    "", "abs", "add", "add-dependency", "after-all", "all-reduce", "all-to-all", "atan2", "batch-norm-grad",
    "batch-norm-inference", "batch-norm-training", "bitcast", "bitcast-convert", "broadcast", "call", "ceil",
    "cholesky", "clamp", "collective-permute", "count-leading-zeros", "compare", "complex", "concatenate",
    "conditional", "constant", "convert", "convolution", "copy", "copy-done", "copy-start", "cosine", "custom-call",
    "divide", "domain", "dot", "dynamic-slice", "dynamic-update-slice", "exponential", "exponential-minus-one",
    "fft", "floor", "fusion", "gather", "get-dimension-size", "set-dimension-size", "get-tuple-element", "imag",
    "infeed", "iota", "is-finite", "log", "log-plus-one", "and", "not", "or", "xor", "map", "maximum", "minimum",
    "multiply", "negate", "outfeed", "pad", "parameter", "partition-id", "popcnt", "power", "real", "recv",
    "recv-done", "reduce", "reduce-precision", "reduce-window", "remainder", "replica-id", "reshape", "reverse",
    "rng", "rng-get-and-update-state", "rng-bit-generator", "round-nearest-afz", "rsqrt", "scatter", "select",
    "select-and-scatter", "send", "send-done", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "sign", "sine", "slice", "sort", "sqrt", "subtract", "tanh", "trace", "transpose", "triangular-solve", "tuple",
    "tuple-select", "while", "cbrt", "all-gather", "collective-permute-start", "collective-permute-done",
    "logistic", "dynamic-reshape", "all-reduce-start", "all-reduce-done", "reduce-scatter", "all-gather-start",
    "all-gather-done", "opt-barrier", "async-start", "async-update", "async-done", "round-nearest-even",
    "stochastic-convert", "tan")) if name}
ELEMENT_TYPES = ("invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
                 "bf16", "c64", "c128", "tuple", "opaque", "token")  # node_feat columns 2-20
NODE_FEATURE_COLUMNS = {"is_root": 0, "element_type": 2, "shape_dimensions": 21, "tuple_shapes_size": 29,
                        "parameter_number": 30, "dimensions": 31, "window_size": 37, "window_stride": 45,
                        "window_padding_low": 53, "window_padding_high": 61, "window_dilation": 69,
                        "base_dilation": 77, "conv_dims": 93, "feature_group_count": 107, "batch_group_count": 108,
                        "layout_minor_to_major": 134}
LAYOUT_CONFIG_FEAT = 18


class TpuGraphsError(AutotuneError, ValueError):
    """A file that does not follow the TpuGraphs tile schema; the message says which array and why."""


@dataclass
class TileGraph:
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    config_feat: np.ndarray
    config_runtime: np.ndarray
    config_runtime_normalizers: np.ndarray

    def validate(self, where: str = "tile graph") -> "TileGraph":
        def bad(name: str, why: str) -> TpuGraphsError:
            return TpuGraphsError(f"{where}: {name} {why}")
        nf, op, ei = self.node_feat, self.node_opcode, self.edge_index
        cf, rt, nz = self.config_feat, self.config_runtime, self.config_runtime_normalizers
        if nf.ndim != 2 or nf.shape[1] != NODE_FEAT or nf.dtype != np.float32:
            raise bad("node_feat", f"must be float32 of shape (n, {NODE_FEAT}), got {nf.dtype} {nf.shape}")
        n = nf.shape[0]
        if op.shape != (n,) or not np.issubdtype(op.dtype, np.integer) or (n and op.min() < 0):
            raise bad("node_opcode", f"must be non-negative integers of shape ({n},), got {op.dtype} {op.shape}")
        if ei.ndim != 2 or ei.shape[1] != 2 or not np.issubdtype(ei.dtype, np.integer):
            raise bad("edge_index", f"must be integers of shape (m, 2), got {ei.dtype} {ei.shape}")
        if ei.size and (ei.min() < 0 or ei.max() >= n):
            raise bad("edge_index", f"refers to node {int(ei.max()) if ei.max() >= n else int(ei.min())} "
                                    f"outside [0, {n})")
        if cf.ndim != 2 or cf.shape[1] != CONFIG_FEAT or cf.dtype != np.float32:
            raise bad("config_feat", f"must be float32 of shape (c, {CONFIG_FEAT}), got {cf.dtype} {cf.shape}")
        c = cf.shape[0]
        for name, a in (("config_runtime", rt), ("config_runtime_normalizers", nz)):
            if a.shape != (c,) or not np.issubdtype(a.dtype, np.number):
                raise bad(name, f"must be numbers of shape ({c},), got {a.dtype} {a.shape}")
        if c and (rt <= 0).any():
            raise bad("config_runtime", "must be positive")
        return self

    def samples(self):  # type: ignore[no-untyped-def]
        """One ProgramGraph per config (the graph shared, config_feat per config) and its runtime.
        ProgramGraph edges run [producer, consumer]: the file's rows reversed."""
        from autotune.cost_model.graph import ProgramGraph as PG
        out = []
        flow = self.edge_index[:, ::-1].astype(np.int64)
        for i in range(len(self.config_runtime)):
            g = PG(self.node_opcode.astype(np.int64), self.node_feat, flow, self.config_feat[i])
            out.append((g, float(self.config_runtime[i]) / float(self.config_runtime_normalizers[i] or 1.0)))
        return out


def write_tile(path: str | os.PathLike[str], t: TileGraph) -> None:
    t.validate(os.fspath(path))
    np.savez_compressed(path, **{k: getattr(t, k) for k in KEYS})


def read_tile(path: str | os.PathLike[str]) -> TileGraph:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in KEYS if k not in z.files]
            if missing:
                raise TpuGraphsError(f"{os.fspath(path)}: missing arrays {missing} (a TpuGraphs tile file has {KEYS})")
            t = TileGraph(*(z[k] for k in KEYS))
    except (OSError, ValueError) as e:
        if isinstance(e, TpuGraphsError):
            raise
        raise TpuGraphsError(f"{os.fspath(path)}: not a readable .npz file ({e})") from None
    return t.validate(os.fspath(path))


@dataclass
class LayoutGraph:
    """A layout-collection program graph: per-node layout configs of its configurable nodes."""
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_config_ids: np.ndarray
    node_config_feat: np.ndarray
    config_runtime: np.ndarray
    node_splits: np.ndarray | None = None

    def validate(self, where: str = "layout graph") -> "LayoutGraph":
        TileGraph(self.node_feat, self.node_opcode, self.edge_index, np.zeros((0, CONFIG_FEAT), np.float32),
                  np.zeros(0), np.zeros(0)).validate(where)
        n = self.node_feat.shape[0]
        ids, cf, rt = self.node_config_ids, self.node_config_feat, self.config_runtime
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or (ids.size and (ids.min() < 0 or ids.max() >= n)):
            raise TpuGraphsError(f"{where}: node_config_ids must be integers in [0, {n}) of shape (nc,), "
                                 f"got {ids.dtype} {ids.shape}")
        if cf.ndim != 3 or cf.shape[1:] != (len(ids), LAYOUT_CONFIG_FEAT) or cf.dtype != np.float32:
            raise TpuGraphsError(f"{where}: node_config_feat must be float32 of shape (c, {len(ids)}, "
                                 f"{LAYOUT_CONFIG_FEAT}), got {cf.dtype} {cf.shape}")
        if rt.shape != (cf.shape[0],) or not np.issubdtype(rt.dtype, np.number) or (rt.size and (rt <= 0).any()):
            raise TpuGraphsError(f"{where}: config_runtime must be positive numbers of shape ({cf.shape[0]},), "
                                 f"got {rt.dtype} {rt.shape}")
        sp = self.node_splits
        if sp is not None and (sp.ndim != 1 or (sp.size and (sp.min() < 0 or sp.max() >= n or (np.diff(sp) <= 0).any()))):
            raise TpuGraphsError(f"{where}: node_splits must be increasing node ids in [0, {n})")
        return self


LAYOUT_KEYS = ("node_feat", "node_opcode", "edge_index", "node_config_ids", "node_config_feat", "config_runtime")


def write_layout(path: str | os.PathLike[str], g: LayoutGraph) -> None:
    g.validate(os.fspath(path))
    arrays = {k: getattr(g, k) for k in LAYOUT_KEYS}
    if g.node_splits is not None:
        arrays["node_splits"] = g.node_splits
    np.savez_compressed(path, **arrays)


def read_layout(path: str | os.PathLike[str]) -> LayoutGraph:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in LAYOUT_KEYS if k not in z.files]
            if missing:
                raise TpuGraphsError(f"{os.fspath(path)}: missing arrays {missing} (a TpuGraphs layout file has "
                                     f"{LAYOUT_KEYS} and optionally node_splits)")
            g = LayoutGraph(*(z[k] for k in LAYOUT_KEYS), z["node_splits"].reshape(-1) if "node_splits" in z.files else None)
    except (OSError, ValueError) as e:
        if isinstance(e, TpuGraphsError):
            raise
        raise TpuGraphsError(f"{os.fspath(path)}: not a readable .npz file ({e})") from None
    return g.validate(os.fspath(path))


def _six(values, pad: float = 0.0, sums: bool = True) -> list[float]:  # type: ignore[no-untyped-def]
    v = [float(x) for x in values]
    out = (v + [pad] * 6)[:6]
    return out + ([float(sum(v)), float(np.prod(v)) if v else 0.0] if sums else [])


def node_feat_row(ins, is_root: bool) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The dataset's 140 node features of one HLO instruction (autotune.backends.tpu.hlo.Instruction)."""
    f = np.zeros(NODE_FEAT, np.float32)
    c = NODE_FEATURE_COLUMNS
    f[c["is_root"]] = float(is_root)
    dtype = "tuple" if ins.is_tuple else ins.shape.dtype
    f[c["element_type"] + (ELEMENT_TYPES.index(dtype) if dtype in ELEMENT_TYPES else 0)] = 1.0
    if ins.is_tuple:
        f[c["tuple_shapes_size"]] = len(ins.outputs)
    else:
        f[21:29] = _six(ins.shape.dims)
        f[134:140] = _six(ins.shape.minor_to_major, sums=False)
    f[c["parameter_number"]] = ins.parameter_number
    f[31:37] = _six(ins.dimensions, sums=False)
    w = ins.window
    if w:
        for key, col in (("size", 37), ("stride", 45), ("padding_low", 53), ("padding_high", 61),
                         ("window_dilation", 69), ("base_dilation", 77)):
            f[col:col + 8] = _six([d.get(key, 1 if "dilation" in key or key in ("size", "stride") else 0) for d in w])
    cd = ins.conv_dims
    if cd:
        f[93], f[94] = cd.get("in_batch", 0), cd.get("in_feat", 0)
        f[95:99] = (list(cd.get("in_spatial", ())) + [0] * 4)[:4]
        f[99], f[100] = cd.get("k_in", 0), cd.get("k_out", 0)
        f[101:105] = (list(cd.get("k_spatial", ())) + [0] * 4)[:4]
        f[105], f[106] = cd.get("out_batch", 0), cd.get("out_feat", 0)
        f[c["feature_group_count"]] = ins.feature_group_count
        f[c["batch_group_count"]] = 1
    return f


def hlo_graph(kernel) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:  # type: ignore[no-untyped-def]
    """(node_feat, node_opcode, edge_index [consumer, producer], instructions) of an HLO kernel: its
    entry computation and every fused computation (reducers left out), topologically ordered; a
    fusion consumes its callee's root, a callee's parameter k consumes the fusion's operand k."""
    comps = {kernel.entry_id: kernel.entry}
    for comp, _ in kernel.walk():
        comps.setdefault(comp.id, comp)
    nodes = {(cid, i.id): i for cid, c in comps.items() for i in c.instructions}
    deps: dict[tuple[int, int], list[tuple[int, int]]] = {key: [] for key in nodes}
    for cid, c in comps.items():
        for i in c.instructions:
            deps[(cid, i.id)] += [(cid, o) for o in i.operands]
            if i.opcode == "fusion":
                for callee in i.called:
                    if callee in comps:
                        deps[(cid, i.id)].append((callee, comps[callee].root_id))
                        for p in comps[callee].parameters():
                            if p.parameter_number < len(i.operands):
                                deps[(callee, p.id)].append((cid, i.operands[p.parameter_number]))
    order: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()

    def visit(key: tuple[int, int]) -> None:
        stack = [(key, False)]
        while stack:
            k, done = stack.pop()
            if done:
                order.append(k)
                continue
            if k in seen:
                continue
            seen.add(k)
            stack.append((k, True))
            stack += [(d, False) for d in reversed(deps[k]) if d not in seen]
    for key in nodes:
        visit(key)
    index = {k: n for n, k in enumerate(order)}
    root = (kernel.entry_id, kernel.entry.root_id)
    feat = np.stack([node_feat_row(nodes[k], k == root) for k in order])
    ops = np.asarray([HLO_OPCODES.get(nodes[k].opcode, 0) for k in order], np.int32)
    edges = np.asarray([[index[k], index[d]] for k in order for d in deps[k]], np.int32).reshape(-1, 2)
    return feat, ops, edges, [nodes[k] for k in order]


def tile_graph_from_real(rk) -> TileGraph:  # type: ignore[no-untyped-def]
    """A real kernel and its timed configs (autotune.backends.tpu.hlo.RealKernel) as a tile file:
    one row per distinct config, the runtime normalised by XLA's default config's."""
    feat, ops, edges, _ = hlo_graph(rk.kernel)
    cfgs, ns = rk.configs()
    rt = np.rint(ns).astype(np.int64)
    norm = rt[cfgs.index(rk.default)] if rk.default in cfgs else rt.min()
    return TileGraph(feat, ops, edges, np.stack([c.config_feat() for c in cfgs]), rt,
                     np.full(len(rt), int(norm), np.int64))


def dataset_from_tiles(paths: list[str | os.PathLike[str]]):  # type: ignore[no-untyped-def]
    """A graph Dataset from TpuGraphs tile files (one task per file)."""
    from autotune.cost_model.base import Dataset
    ds = Dataset(X=np.zeros((0, CONFIG_FEAT), np.float32))
    for p in paths:
        samples = read_tile(p).samples()
        ds.add(np.stack([g.config_feat for g, _ in samples]), [r for _, r in samples], os.fspath(p),
               [g for g, _ in samples])
    return ds
