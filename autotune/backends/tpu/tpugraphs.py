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
  kernel layouts, -1 padded), config_runtime (c,), and node_splits (the computations' boundaries:
  0, ..., n; the official loader needs it, so it is always written; a file without it still reads).
  Runtimes are all positive, or all 0 in an unlabelled (test) file.
Files are written in the producer's dtypes (DTYPES: opcodes uint8, edges and ids int64), node features
and graphs as the dataset's encoder makes them (node_feat_row, hlo_graph).

Example::

    >>> import numpy as np, tempfile, os
    >>> from autotune.backends.tpu.tpugraphs import TileGraph, write_tile, read_tile
    >>> t = TileGraph(np.zeros((3, 140), np.float32), np.array([1, 2, 3]), np.array([[0, 1], [1, 2]]),
    ...               np.zeros((2, 24), np.float32), np.array([5.0, 7.0]), np.array([5.0, 5.0]))
    >>> p = os.path.join(tempfile.mkdtemp(), "k.npz"); write_tile(p, t); read_tile(p).config_runtime.tolist()
    [5, 7]
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
                        "base_dilation": 77, "window_reversal": 85, "conv_dims": 93, "feature_group_count": 107,
                        "batch_group_count": 108, "slice_start": 109, "slice_stride": 113, "slice_limit": 117,
                        "dynamic_slice_sizes": 121, "padding_low": 125, "padding_high": 129, "is_stable": 133,
                        "layout_minor_to_major": 134}
LAYOUT_CONFIG_FEAT = 18


class TpuGraphsError(AutotuneError, ValueError):
    """A file that does not follow the TpuGraphs tile schema; the message says which array and why."""


def _check_runtimes(rt: np.ndarray, where: str) -> None:
    """Runtimes are all positive (a labelled file) or all 0 (an unlabelled one, as the dataset's test
    files are); negative runtimes, or zeros among measured ones, are refused."""
    if rt.size and ((rt < 0).any() or (rt.any() and not rt.all())):
        raise TpuGraphsError(f"{where}: config_runtime must be all positive (measured) or all 0 (unlabelled), "
                             f"got {int((rt <= 0).sum())} of {rt.size} not positive")


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
        _check_runtimes(rt, where)
        if c and ((nz < 0).any() or (rt.any() and not nz.all())):
            raise bad("config_runtime_normalizers", "must be positive (or all 0 in an unlabelled file)")
        return self

    @property
    def labelled(self) -> bool:
        """False for a file whose runtimes are all 0 (the dataset's unlabelled test files)."""
        return bool(self.config_runtime.size and self.config_runtime.all())

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


# dtypes of the arrays as the dataset's producer makes them (EncodeHloTuningData / graph_features.cc:
# opcodes uint8, edge indices and node ids int64; runtimes int64 ns)
DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64, "config_feat": np.float32,
          "config_runtime": np.int64, "config_runtime_normalizers": np.int64, "node_config_ids": np.int64,
          "node_config_feat": np.float32, "node_splits": np.int64}


def _as_written(name: str, a: np.ndarray, where: str) -> np.ndarray:
    a = np.asarray(a)
    if name == "node_opcode" and a.size and a.max() > 255:
        raise TpuGraphsError(f"{where}: node_opcode {int(a.max())} does not fit the dataset's uint8 opcode ids")
    if (name in ("config_runtime", "config_runtime_normalizers") and not np.issubdtype(a.dtype, np.integer)
            and (a != np.rint(a)).any()):
        return a   # fractional runtimes (not nanoseconds as the dataset's): kept as they are, not rounded
    return a.astype(DTYPES[name])


def write_tile(path: str | os.PathLike[str], t: TileGraph) -> None:
    """The file as the dataset writes it: the six arrays, in the producer's dtypes."""
    t.validate(os.fspath(path))
    np.savez_compressed(path, **{k: _as_written(k, getattr(t, k), os.fspath(path)) for k in KEYS})


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
        if rt.shape != (cf.shape[0],) or not np.issubdtype(rt.dtype, np.number):
            raise TpuGraphsError(f"{where}: config_runtime must be numbers of shape ({cf.shape[0]},), "
                                 f"got {rt.dtype} {rt.shape}")
        _check_runtimes(rt, where)
        sp = self.node_splits
        if sp is not None and (sp.ndim != 1 or not np.issubdtype(sp.dtype, np.integer) or
                               (sp.size and (sp.min() < 0 or sp.max() > n or (np.diff(sp) <= 0).any()))):
            raise TpuGraphsError(f"{where}: node_splits must be increasing node ids in [0, {n}] (the producer "
                                 f"writes computation boundaries: 0, ..., {n})")
        return self

    def splits(self) -> np.ndarray:
        """node_splits as the producer writes them (hlo_encoder.cc computation_splits_): the boundaries of
        the graph's computations, starting with 0 and ending with n (nodes splits[i] to splits[i+1] - 1
        are one computation); [0, n] where the graph has none."""
        n = self.node_feat.shape[0]
        sp = [] if self.node_splits is None else [int(x) for x in self.node_splits]
        return np.asarray(sorted({0, n, *sp}), np.int64)


LAYOUT_KEYS = ("node_feat", "node_opcode", "edge_index", "node_config_ids", "node_config_feat", "config_runtime")


def write_layout(path: str | os.PathLike[str], g: LayoutGraph) -> None:
    """The file as the dataset writes it: node_splits always present (0, ..., n; the official loader
    reads it unconditionally), arrays in the producer's dtypes."""
    g.validate(os.fspath(path))
    arrays = {k: _as_written(k, getattr(g, k), os.fspath(path)) for k in LAYOUT_KEYS}
    arrays["node_splits"] = g.splits()
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


def _seq(values, lead: int, aggregate: bool = True) -> list[float]:  # type: ignore[no-untyped-def]
    """featurizers.h FixedNumericSequenceFeatures<lead> (the first `lead` values, 0-padded, then sum
    and product; the product of an empty list is 1) or, aggregate=False, ...NoAggregate."""
    v = [int(x) for x in values]
    out = [float(x) for x in (v + [0] * lead)[:lead]]
    return out + ([float(sum(v)), float(np.prod(v, dtype=np.int64)) if v else 1.0] if aggregate else [])


_WINDOW_DEFAULTS = (("size", 1), ("stride", 1), ("padding_low", 0), ("padding_high", 0),
                    ("window_dilation", 1), ("base_dilation", 1))


def node_feat_row(ins, is_root: bool) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The dataset's 140 node features of one HLO instruction (autotune.backends.tpu.hlo.Instruction),
    in the order featurizers.h FeaturizeHloInstruction pushes them for the tile and layout tasks
    (FEATURE_OP_NON_ZERO | FEATURE_WINDOW): is_root (the root of its own computation),
    element_size_in_bits (0), the shape (element type one-hot, dims, tuple size), parameter_number,
    dimensions, window (size, stride, padding, dilations, reversal), convolution dimension numbers,
    feature and batch group counts, slice, dynamic slice sizes, padding config, is_stable, and the
    layout's minor_to_major. Fields an instruction does not have count as the proto's defaults
    (empty lists, zeros), so an empty list's product is 1."""
    f: list[float] = [float(is_root), 0.0]
    dtype = "tuple" if ins.is_tuple else ins.shape.dtype
    f += [float(dtype == t) for t in ELEMENT_TYPES]
    f += _seq(() if ins.is_tuple else ins.shape.dims, 6)
    f.append(float(len(ins.outputs)) if ins.is_tuple else 0.0)
    f.append(float(ins.parameter_number))
    f += _seq(ins.dimensions, 6, aggregate=False)
    w = ins.window or ()
    for key, default in _WINDOW_DEFAULTS:
        f += _seq([d.get(key, default) for d in w], 6)
    rev = [bool(d.get("window_reversal", False)) for d in w]
    f += [float(x) for x in (rev + [False] * 6)[:6]] + [float(sum(rev)), float(len(rev) - sum(rev))]
    cd = ins.conv_dims or {}
    f += [float(cd.get("in_batch", 0)), float(cd.get("in_feat", 0))] + _seq(cd.get("in_spatial", ()), 4, False)
    f += [float(cd.get("k_in", 0)), float(cd.get("k_out", 0))] + _seq(cd.get("k_spatial", ()), 4, False)
    f += [float(cd.get("out_batch", 0)), float(cd.get("out_feat", 0))]
    conv = ins.opcode == "convolution"   # the only instruction whose proto sets the group counts
    f += [float(ins.feature_group_count) if conv else 0.0, float(ins.batch_group_count) if conv else 0.0]
    for key in ("start", "stride", "limit"):
        f += _seq([d.get(key, 0) for d in ins.slice_dims], 2)
    f += _seq(ins.dynamic_slice_sizes, 2)
    for key in ("edge_padding_low", "edge_padding_high"):
        f += _seq([d.get(key, 0) for d in ins.padding_config], 2)
    f.append(float(ins.is_stable))
    f += _seq(() if ins.is_tuple else ins.shape.minor_to_major, 6, aggregate=False)
    assert len(f) == NODE_FEAT, len(f)
    return np.asarray(f, np.float32)


def hlo_graph(kernel) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:  # type: ignore[no-untyped-def]
    """(node_feat, node_opcode, edge_index [consumer, producer], instructions) of an HLO module as
    hlo_encoder.cc EncodeHloModule builds it: every instruction of every computation (reducers and
    other called computations included), in the module's order (callees before callers, operands
    before users: topological); an instruction consumes each of its distinct operands and the root of
    each computation it calls; edges sorted by (consumer, producer) as the encoder's sparse tensor is."""
    nodes = [(c, i) for c in kernel.computations for i in c.instructions]
    index: dict[int, int] = {}
    for n, (c, i) in enumerate(nodes):
        if i.id in index:
            raise TpuGraphsError(f"kernel {kernel.name}: instruction id {i.id} is used twice; the dataset's "
                                 f"encoder needs ids unique in the module")
        index[i.id] = n
    roots = {c.id: c.root_id for c in kernel.computations}
    edges = sorted({(index[i.id], index[o]) for _, i in nodes for o in i.operands} |
                   {(index[i.id], index[roots[cid]]) for _, i in nodes for cid in i.called})
    feat = np.stack([node_feat_row(i, i.id == c.root_id) for c, i in nodes])
    ops = np.asarray([HLO_OPCODES.get(i.opcode, 0) for _, i in nodes], np.uint8)
    return feat, ops, np.asarray(edges, np.int64).reshape(-1, 2), [i for _, i in nodes]


def tile_graph_from_real(rk) -> TileGraph:  # type: ignore[no-untyped-def]
    """A real kernel and its timed configs (autotune.backends.tpu.hlo.RealKernel) as a tile file:
    the graph as the dataset's encoder builds it (hlo_graph), one row per distinct config that ran
    (repeated runs merged: their median), and as normaliser the runtime of XLA's default config as
    the dataset's OpTuningDataIterator takes it: the first default run without error and over 1 ns
    (the producer refuses a kernel without one, and so does this)."""
    feat, ops, edges, _ = hlo_graph(rk.kernel)
    cfgs, ns = rk.configs()
    rt = np.rint(ns).astype(np.int64)
    default = next((r.ns for r in rk.runs if r.default and not r.error and r.ns > 1), None)
    if default is None:
        raise TpuGraphsError(f"kernel {rk.kernel.name}: no timed default config, which a TpuGraphs tile file "
                             f"normalises by")
    return TileGraph(feat, ops, edges, np.stack([c.config_feat() for c in cfgs]), rt,
                     np.full(len(rt), int(round(default)), np.int64))


# the project's TPU kernel-graph op kinds (autotune.backends.tpu.templates OpNode.kind) as HLO opcodes; "output" is no
# HLO instruction (its input is the computation's root)
OP_KIND_HLO = {"parameter": "parameter", "dot": "dot", "convolution": "convolution", "add": "add",
               "mul": "multiply", "relu": "maximum", "exp": "exponential", "tanh": "tanh", "reduce": "reduce"}


def ops_hlo_kernel(ops, name: str = "kernel"):  # type: ignore[no-untyped-def]
    """A kernel's op graph (objects with .kind, .shape, .inputs: autotune.backends.tpu.templates.OpNode) as a one-computation
    HLO kernel (autotune.backends.tpu.hlo.HloKernel): parameters bf16, the matmul and what follows it f32
    (accumulation in f32), row-major layouts; "output" dropped (its input is the root)."""
    from autotune.backends.tpu.hlo import ArrayShape, Computation, HloKernel, Instruction
    keep = [j for j, op in enumerate(ops) if op.kind != "output"]
    root_of = {j: j for j in keep}
    for j, op in enumerate(ops):
        if op.kind == "output":
            root_of[j] = root_of[op.inputs[0]]
    ins, f32, params = [], False, 0
    for j in keep:
        op = ops[j]
        f32 = f32 or op.kind in ("dot", "convolution")
        dims = tuple(int(x) for x in op.shape)
        shape = ArrayShape("f32" if f32 else "bf16", dims, tuple(range(len(dims) - 1, -1, -1)))
        extra: dict = {}
        if op.kind == "parameter":
            extra["parameter_number"], params = params, params + 1
        if op.kind == "reduce":
            extra["dimensions"] = (len(dims) - 1,)   # the templates' reduce is a row reduction
        ins.append(Instruction(j + 1, f"{op.kind}.{j}", OP_KIND_HLO.get(op.kind, op.kind), (shape,),
                               tuple(root_of[i] + 1 for i in op.inputs), **extra))
    root = root_of[len(ops) - 1] + 1 if ops else 0
    return HloKernel(name, 0, (Computation(name, 0, root, tuple(ins)),))


def tile_graph_from_ops(ops, config_feat: np.ndarray, runtime_ns, default: int,  # type: ignore[no-untyped-def]
                        name: str = "kernel") -> TileGraph:
    """A tile file in the dataset's form from a kernel's op graph (ops_hlo_kernel): the dataset's opcode
    ids and 140 node features (hlo_graph), config_feat as given (the dataset's 24: TileConfig.config_feat),
    runtimes in integer ns, each normalised by the runtime of config `default` (the dataset normalises
    by XLA's default config's runtime; an emulated kernel has no XLA default, so the caller names the
    config that stands for it)."""
    feat, opc, edges, _ = hlo_graph(ops_hlo_kernel(ops, name))
    rt = np.rint(np.asarray(runtime_ns, np.float64)).astype(np.int64)
    if not 0 <= default < len(rt):
        raise TpuGraphsError(f"{name}: default config {default} is none of the {len(rt)} configs")
    return TileGraph(feat, opc, edges, np.asarray(config_feat, np.float32), rt,
                     np.full(len(rt), int(rt[default]), np.int64))


def dataset_from_tiles(paths: list[str | os.PathLike[str]]):  # type: ignore[no-untyped-def]
    """A graph Dataset from TpuGraphs tile files (one task per file)."""
    from autotune.cost_model.base import Dataset
    ds = Dataset(X=np.zeros((0, CONFIG_FEAT), np.float32))
    for p in paths:
        t = read_tile(p)
        if not t.labelled:
            raise TpuGraphsError(f"{os.fspath(p)}: runtimes all 0 (an unlabelled file): nothing to train or score on")
        samples = t.samples()
        ds.add(np.stack([g.config_feat for g, _ in samples]), [r for _, r in samples], os.fspath(p),
               [g for g, _ in samples])
    return ds
