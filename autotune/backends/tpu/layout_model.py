"""A layout cost model for TpuGraphs layout graphs (PyTorch, the `gnn` extra), trained with Graph
Segment Training so that graphs of any size train in bounded memory.

The model is the shape of the dataset's layout baseline (tpu_graphs/baselines/layout/models.py):
node features (log-scaled, standardised; the layout columns one-hot) with an opcode embedding, the
configurable nodes' config features (output / input / kernel layouts, one-hot) added on their own
nodes, GraphSAGE-style layers, and a graph-level readout per config (the mean over all nodes and the
mean over the configurable nodes) into an MLP head: one score per config, higher = slower. Every
node state is per config ((nodes, configs, H)), so each config's layouts travel along the edges. A
layer computes one message per edge from both of its ends (a linear map of the consumer's state
plus one of the producer's, then LeakyReLU: a message can say whether the two ends' layouts agree,
which a mean of the neighbours' states alone cannot), sums the messages into the consumer and into
the producer, and adds a pre-normalised residual update (LayerNorm on the layer's input, not on the
update, so a count such as "two operands disagree" is not normalised away). It trains with a
pairwise hinge loss over the sampled configs of one graph (as GST's TpuGraphs trainer does) and is
scored by Kendall's tau per graph between scores and runtimes, averaged over graphs (the dataset's
layout metric).

Graph Segment Training (Cao et al., NeurIPS 2023; the public code kaidic/GST): every graph is cut
into contiguous segments of at most `segment_size` nodes (the nodes are in topological order, so
contiguous ranges keep most edges). GST's code drops the edges between segments (`halo=0`). The
default `halo=1` runs each segment with the outside nodes within one hop as read-only context: they
go through the network with the segment (their inputs and config features, every edge among them
and the segment's nodes), so a cut edge still brings its other end's layout into the segment's
node, but they are not counted in the segment's readout (each node is counted by the segment that
owns it). A halo of as many hops as the network has layers gives the segment's own nodes exactly
their full-graph states. A training step runs forward and backward through `sample_segments`
segments of one graph only; the other segments' embeddings come from a table of historical (stale)
embeddings, one per (graph, segment, config), refreshed whenever a segment is trained. A graph has
many configs (the real set thousands) and a step samples a few, so most (segment, config) entries
would never have been computed. `fill` says what a step does about the other segments: `"all"` (the
default) recomputes them for the step's configs without gradient, one segment at a time, and stores
them; `"missing"` computes only entries the table lacks and uses the stored (stale) ones otherwise;
`"none"` leaves missing ones out. On the SYNTHETIC sets (measure/experiments/RESULTS.md, issue 43)
stale entries cost most of the accuracy: with 256 configs per graph and 16 per step an entry is
refreshed about once in 40 epochs, and the model has moved on by then. Memory stays bounded either
way (no autograd graph outside the sampled segments). An epoch (`epoch_unit="segments"`, the
default) is one pass over the training data: each graph's segments are all trained once, in
consecutive steps on one sample of its configs, the first step filling the others and the later
ones using the table (entries at most a few steps old); `epoch_unit="graphs"` is GST's code's epoch,
one step per graph with randomly sampled segments (a node then gets a gradient about once in
segments/sample_segments epochs).
Stale Embedding Dropout drops each other segment with probability `sed`, one draw per segment for
all the step's configs (a segment kept for some configs and not others would move their scores
apart by which nodes the mean covers rather than by their layouts); the graph embedding is the mean
over the nodes of the kept segments (fresh + kept stale). The autograd graph of a step therefore
holds at most sample_segments x (segment_size + halo) nodes x sample_configs configs, whatever the
graph's size (the halo: the segment's outside neighbours, a few per cut edge); inference and the
filling of missing entries run one segment at a time without gradient.
After training, Prediction-Head Finetuning freezes the backbone, computes every segment's embedding
fresh, and trains the head alone on the exact graph embeddings.
`segment_size=None` is plain full-graph training (one segment per graph).

The input arrays of the graphs are held in memory (as the dataset's loaders do); only the training
activations are bounded by the segment size.

Example::

    >>> import tempfile                                                         # doctest: +SKIP
    >>> from autotune.backends.tpu.layout_data import generate_layout_dataset    # doctest: +SKIP
    >>> d = tempfile.mkdtemp(); _ = generate_layout_dataset(d, 8, 2, 2)           # doctest: +SKIP
    >>> res = train_layout(d, epochs=5, segment_size=128, progress=False)        # doctest: +SKIP
    >>> evaluate_layout(d, res.model, progress=False)["mean_tau"] > 0            # doctest: +SKIP
    True
"""
from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from autotune.backends.tpu.tpugraphs import LAYOUT_CONFIG_FEAT, NODE_FEATURE_COLUMNS, LayoutGraph, read_layout
from autotune.errors import install_hint
from autotune.cost_model.base import ModelError

SPLITS = ("train", "valid", "test")
N_OPS = 256                                   # node_opcode is uint8 in the dataset
M2M = NODE_FEATURE_COLUMNS["layout_minor_to_major"]   # node_feat 134-139: the node's layout
LAYOUT_VALUES = 7                             # a minor_to_major entry: -1 (padding) or 0-5
FORMAT = "autotune-layout-model"
VERSION = 2                                   # 2: edge messages from both ends, pre-norm residuals


class LayoutError(ModelError):
    """A layout training or evaluation problem: a missing split, an empty directory, a bad option."""


def _torch():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError as e:
        raise LayoutError(f"the layout model needs PyTorch: {install_hint('gnn')} (torch==2.13.0)") from e
    return torch


# ---- the metric -----------------------------------------------------------------------------------
def kendall_tau(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall's tau-b of two score vectors (scipy.stats.kendalltau's default, ties handled); nan if
    either is constant.

    Example::

        >>> kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]), kendall_tau([1, 2, 3], [3, 2, 1])
        (1.0, -1.0)
    """
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    i, j = np.triu_indices(len(a), 1)
    da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    n1, n2 = float((da != 0).sum()), float((db != 0).sum())
    if n1 == 0 or n2 == 0:
        return float("nan")
    return float((da * db).sum() / np.sqrt(n1 * n2))


# ---- graphs prepared for the network ----------------------------------------------------------------
def _one_hot_layout(a: np.ndarray) -> np.ndarray:
    """(..., k) minor_to_major entries in -1..5 -> (..., 7k) one-hot (an entry outside is all zero)."""
    v = np.rint(a).astype(np.int64) + 1
    ok = (v >= 0) & (v < LAYOUT_VALUES)
    out = np.zeros(a.shape + (LAYOUT_VALUES,), np.float32)
    np.put_along_axis(out, np.where(ok, v, 0)[..., None], ok[..., None].astype(np.float32), axis=-1)
    return out.reshape(a.shape[:-1] + (a.shape[-1] * LAYOUT_VALUES,))


def _node_inputs(node_feat: np.ndarray) -> np.ndarray:
    """node_feat (n, 140) -> (n, 134 + 42): sign(x) log1p|x| of the non-layout columns, the layout
    columns one-hot."""
    x = node_feat[:, :M2M].astype(np.float32)
    return np.concatenate([np.sign(x) * np.log1p(np.abs(x)), _one_hot_layout(node_feat[:, M2M:M2M + 6])], 1)


NODE_IN = M2M + 6 * LAYOUT_VALUES
CFG_IN = LAYOUT_CONFIG_FEAT * LAYOUT_VALUES


@dataclass
class PreparedGraph:
    """One layout graph ready for the network, cut into segments of at most `segment_size` nodes.

    Segment s owns the nodes bounds[s]..bounds[s+1]-1; with a halo it also runs (read-only context,
    not counted in its readout) the nodes outside it within `halo` hops, so that the edges it shares
    with other segments still carry messages into its own nodes."""
    name: str
    x: np.ndarray                 # (n, NODE_IN) float32, not yet standardised
    op: np.ndarray                # (n,) int64
    cfg_ids: np.ndarray           # (nc,) int64, sorted
    cfg_raw: np.ndarray           # (c, nc, 18) int8 (minor_to_major entries, -1 padded)
    runtime: np.ndarray           # (c,) float64; all 0 when unlabelled
    bounds: np.ndarray            # segment boundaries 0 = b0 < b1 < ... = n
    seg_edges: list[np.ndarray]   # per segment: (m_s, 2) [consumer, producer], ids local to seg_nodes
    seg_cfg: list[tuple[int, int]]  # per segment: the range of cfg_ids it owns
    seg_nodes: list[np.ndarray] = field(default_factory=list)  # per segment: its nodes (owned first, then halo)
    seg_cfg_cols: list[np.ndarray] = field(default_factory=list)  # per segment: its cfg_ids columns (owned first)
    seg_cfg_pos: list[np.ndarray] = field(default_factory=list)   # ... and their positions in seg_nodes
    halo: int = 0

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_configs(self) -> int:
        return int(self.runtime.shape[0])

    @property
    def n_segments(self) -> int:
        return len(self.bounds) - 1

    @property
    def labelled(self) -> bool:
        return bool(self.runtime.size and self.runtime.all())

    def run_nodes(self, s: int) -> int:
        """How many nodes segment s runs through the network (its own and its halo)."""
        return int(len(self.seg_nodes[s]))


def prepare_graph(g: LayoutGraph, segment_size: int | None, name: str = "", halo: int = 0) -> PreparedGraph:
    """Cut a LayoutGraph into contiguous segments of at most `segment_size` nodes (None: one segment).
    halo=0 keeps each segment's internal edges only (an edge between two segments is dropped, as in
    GST's code); halo=k adds to each segment, as read-only context, the outside nodes within k hops of
    it and every edge among its nodes and theirs (so a cut edge still brings its other end's layout
    to the segment's node; those nodes are not counted in the segment's readout).

    Example::

        >>> import numpy as np
        >>> from autotune.backends.tpu.layout_data import generate_layout_graph
        >>> p = prepare_graph(generate_layout_graph(250, 3, np.random.default_rng(0)), 100)
        >>> p.n_segments, p.bounds.tolist()
        (3, [0, 83, 167, 250])
        >>> h = prepare_graph(generate_layout_graph(250, 3, np.random.default_rng(0)), 100, halo=1)
        >>> sum(map(len, h.seg_edges)) > sum(map(len, p.seg_edges)), h.run_nodes(0) > 83
        (True, True)
    """
    n = int(g.node_feat.shape[0])
    parts = 1 if not segment_size or segment_size >= n else -(-n // int(segment_size))
    halo = 0 if parts == 1 else int(halo)
    bounds = np.linspace(0, n, parts + 1).round().astype(np.int64)   # equal parts, each <= segment_size
    order = np.argsort(g.node_config_ids, kind="stable")
    ids = g.node_config_ids[order].astype(np.int64)
    cfg = g.node_config_feat[:, order]
    e_all = np.asarray(g.edge_index, np.int64).reshape(-1, 2)
    seg_of = np.searchsorted(bounds, np.arange(n), side="right") - 1
    cc = np.searchsorted(ids, bounds)
    col_of = np.full(n, -1, np.int64)
    col_of[ids] = np.arange(len(ids))
    seg_edges, seg_nodes, cfg_cols, cfg_pos = [], [], [], []
    for s in range(parts):
        a, b = int(bounds[s]), int(bounds[s + 1])
        inside = np.zeros(n, bool)
        inside[a:b] = True
        if halo and len(e_all):
            for _ in range(halo):
                touch = inside[e_all[:, 0]] | inside[e_all[:, 1]]
                inside[e_all[touch].ravel()] = True
        extra = np.flatnonzero(inside)
        extra = extra[(extra < a) | (extra >= b)]
        nodes = np.concatenate([np.arange(a, b, dtype=np.int64), extra])
        local = np.full(n, -1, np.int64)
        local[nodes] = np.arange(len(nodes))
        e = e_all[inside[e_all[:, 0]] & inside[e_all[:, 1]]] if len(e_all) else e_all
        seg_edges.append(local[e])
        cols = col_of[nodes]
        has = cols >= 0
        seg_nodes.append(nodes)
        cfg_cols.append(cols[has])
        cfg_pos.append(np.flatnonzero(has))
    return PreparedGraph(name, _node_inputs(g.node_feat), g.node_opcode.astype(np.int64).clip(0, N_OPS - 1), ids,
                         np.rint(cfg).clip(-1, 127).astype(np.int8), np.asarray(g.config_runtime, np.float64),
                         bounds, seg_edges, [(int(cc[s]), int(cc[s + 1])) for s in range(parts)],
                         seg_nodes, cfg_cols, cfg_pos, halo)


def load_split(directory: str | os.PathLike[str], split: str, segment_size: int | None,
               halo: int = 0) -> list[PreparedGraph]:
    """Every layout .npz file of DIR/split, read (read_layout) and prepared, sorted by name.

    Example::

        >>> try:
        ...     load_split("/nonexistent", "train", 100)
        ... except LayoutError as e:
        ...     print(str(e).split(':')[0])
        /nonexistent/train
    """
    d = Path(directory) / split
    if not d.is_dir():
        raise LayoutError(f"{d}: no such directory (a layout set has train/, valid/ and test/ of .npz files)")
    return [prepare_graph(read_layout(p), segment_size, p.stem, halo) for p in sorted(d.glob("*.npz"))]


# ---- the network --------------------------------------------------------------------------------------
def _build_net(torch, hidden: int, layers: int, op_dim: int = 32):  # type: ignore[no-untyped-def]
    nn = torch.nn

    class LayoutNet(nn.Module):
        """Backbone: per-segment node embeddings (s, c, H) and their sums; head: graph embedding -> score."""

        def __init__(self) -> None:
            super().__init__()
            self.hidden = hidden
            self.emb = nn.Embedding(N_OPS, op_dim)
            self.inp = nn.Sequential(nn.Linear(NODE_IN + op_dim, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden))
            self.cfg = nn.Sequential(nn.Linear(CFG_IN, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden))
            self.self_w = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
            self.prod_w = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
            self.cons_w = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
            self.ec = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
            self.ep = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
            self.outw = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
            self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
            self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.LeakyReLU(), nn.Linear(hidden, 1))

        def backbone_parameters(self):  # type: ignore[no-untyped-def]
            return [p for name, p in self.named_parameters() if not name.startswith("head.")]

        def segment(self, x, op, edges, cfg_pos, cfg_x, owned=None, cfg_owned=None):  # type: ignore[no-untyped-def]
            """x (s, F) standardised node inputs, op (s,), edges (m, 2) [consumer, producer] local,
            cfg_pos (k,) local ids of the configurable nodes, cfg_x (c, k, CFG_IN); the first `owned`
            nodes and `cfg_owned` configurable nodes are the segment's own (the rest: its halo, run as
            context only; None: all). Returns the segment's sums (c, 2H): over its own nodes and over its
            own configurable nodes."""
            s, c = x.shape[0], cfg_x.shape[0]
            base = self.inp(torch.cat([x, self.emb(op)], 1))                    # (s, H)
            h = base.unsqueeze(1).expand(s, c, self.hidden)
            if len(cfg_pos):
                add = torch.zeros(s, c, self.hidden).index_add(0, cfg_pos, self.cfg(cfg_x).transpose(0, 1))
                h = h + add
            cons, prod = edges[:, 0], edges[:, 1]
            act = torch.nn.functional.leaky_relu
            for i in range(len(self.self_w)):
                z = self.norms[i](h)                                             # pre-norm
                msg = act(self.ec[i](z)[cons] + self.ep[i](z)[prod])             # (m, c, H): both ends, per config
                from_prod = torch.zeros_like(h).index_add(0, cons, msg)          # into each consumer
                from_cons = torch.zeros_like(h).index_add(0, prod, msg)          # into each producer
                h = h + self.outw[i](act(self.self_w[i](z) + self.prod_w[i](from_prod) + self.cons_w[i](from_cons)))
            own = h if owned is None else h[:owned]
            own_cfg = cfg_pos if cfg_owned is None else cfg_pos[:cfg_owned]
            all_sum = own.sum(0)
            cfg_sum = h[own_cfg].sum(0) if len(own_cfg) else torch.zeros(c, self.hidden)
            return torch.cat([all_sum, cfg_sum], 1)

        def score(self, sums, nodes, cfg_nodes):  # type: ignore[no-untyped-def]
            """sums (c, 2H) over the covered nodes; nodes, cfg_nodes (c,) how many -> (c,) scores."""
            h = self.hidden
            g = torch.cat([sums[:, :h] / nodes.clamp(min=1)[:, None], sums[:, h:] / cfg_nodes.clamp(min=1)[:, None]], 1)
            return self.head(g).squeeze(-1)

    return LayoutNet()


# ---- the model --------------------------------------------------------------------------------------
@dataclass
class LayoutModel:
    """A trained layout model: the network, the node-input standardisation and the options it was
    trained with (segment_size is kept: inference cuts graphs the same way).

    Example::

        >>> LayoutModel.create(hidden=8, layers=1).params["hidden"]                # doctest: +SKIP
        8
    """
    net: Any
    params: dict[str, Any]
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def create(cls, hidden: int = 32, layers: int = 3, segment_size: int | None = None, seed: int = 0,
               mean: np.ndarray | None = None, std: np.ndarray | None = None, halo: int = 0) -> "LayoutModel":
        torch = _torch()
        torch.manual_seed(seed)
        return cls(_build_net(torch, hidden, layers),
                   {"hidden": hidden, "layers": layers, "segment_size": segment_size, "halo": halo},
                   np.zeros(NODE_IN, np.float32) if mean is None else mean,
                   np.ones(NODE_IN, np.float32) if std is None else std)

    @property
    def segment_size(self) -> int | None:
        return self.params.get("segment_size")

    @property
    def halo(self) -> int:
        """Hops of read-only context around each segment (0 in files written before halos existed)."""
        return int(self.params.get("halo") or 0)

    # tensors of one segment
    def _segment_inputs(self, g: PreparedGraph, s: int, configs: np.ndarray):  # type: ignore[no-untyped-def]
        torch = _torch()
        a, b = int(g.bounds[s]), int(g.bounds[s + 1])
        c0, c1 = g.seg_cfg[s]
        nodes, cols = g.seg_nodes[s], g.seg_cfg_cols[s]
        x = torch.from_numpy((g.x[nodes] - self.mean) / self.std)
        cfg = _one_hot_layout(g.cfg_raw[configs][:, cols].astype(np.float32))
        return (x, torch.from_numpy(g.op[nodes]), torch.from_numpy(g.seg_edges[s]),
                torch.from_numpy(g.seg_cfg_pos[s]), torch.from_numpy(cfg), b - a, c1 - c0)

    def segment_sums(self, g: PreparedGraph, s: int, configs: np.ndarray):  # type: ignore[no-untyped-def]
        """Segment s of g through the backbone for the given configs: (c, 2H) sums."""
        return self.net.segment(*self._segment_inputs(g, s, configs))

    def graph_sums(self, g: PreparedGraph, configs: np.ndarray):  # type: ignore[no-untyped-def]
        """Every segment of g (no gradient, one segment at a time): (c, 2H) sums over the graph."""
        torch = _torch()
        with torch.no_grad():
            return sum(self.segment_sums(g, s, configs) for s in range(g.n_segments))

    def predict(self, g: PreparedGraph | LayoutGraph, chunk: int = 64) -> np.ndarray:
        """A score per config of one graph (higher = slower), computed segment by segment and in
        chunks of `chunk` configs, so memory stays bounded by the segment size.

        Example::

            >>> scores = model.predict(read_layout("g.npz"))        # doctest: +SKIP
        """
        torch = _torch()
        if isinstance(g, LayoutGraph):
            g = prepare_graph(g, self.segment_size, halo=self.halo)
        self.net.eval()
        out = []
        with torch.no_grad():
            for i in range(0, g.n_configs, chunk):
                cf = np.arange(i, min(i + chunk, g.n_configs))
                sums = self.graph_sums(g, cf)
                out.append(self.net.score(sums, torch.full((len(cf),), float(g.n)),
                                          torch.full((len(cf),), float(len(g.cfg_ids)))).numpy())
        return np.concatenate(out).astype(np.float64) if out else np.zeros(0)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model (torch.save of tensors, numbers and strings only: torch.load(weights_only=True) reads it)."""
        torch = _torch()
        torch.save({"format": FORMAT, "version": VERSION, "params": json.dumps(self.params),
                    "mean": torch.from_numpy(np.asarray(self.mean, np.float32)),
                    "std": torch.from_numpy(np.asarray(self.std, np.float32)),
                    "state": self.net.state_dict()}, os.fspath(path))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "LayoutModel":
        """Read a model written by save().

        Example::

            >>> LayoutModel.load("layout.pt").segment_size                 # doctest: +SKIP
            1000
        """
        torch = _torch()
        try:
            d = torch.load(os.fspath(path), weights_only=True)
        except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as e:
            raise LayoutError(f"{os.fspath(path)}: not a layout model ({str(e).splitlines()[0]})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise LayoutError(f"{os.fspath(path)}: not a layout model (written by train_layout)")
        if d.get("version") != VERSION:
            raise LayoutError(f"{os.fspath(path)}: a layout model of version {d.get('version')}, this is version "
                              f"{VERSION} (edge messages from both ends): train it again")
        params = json.loads(d["params"])
        m = cls.create(params["hidden"], params["layers"], params.get("segment_size"),
                       mean=d["mean"].numpy(), std=d["std"].numpy(), halo=int(params.get("halo") or 0))
        m.net.load_state_dict(d["state"])
        return m


def _standardisation(graphs: Sequence[PreparedGraph]) -> tuple[np.ndarray, np.ndarray]:
    n = sum(g.n for g in graphs)
    s = sum(g.x.sum(0, dtype=np.float64) for g in graphs)
    mean = s / max(n, 1)
    var = sum(((g.x - mean) ** 2).sum(0, dtype=np.float64) for g in graphs) / max(n, 1)
    return mean.astype(np.float32), (np.sqrt(var) + 1e-3).astype(np.float32)


def pairwise_hinge(torch, pred, runtime, margin: float = 0.1):  # type: ignore[no-untyped-def]
    """GST's TpuGraphs loss: for every pair with runtime_i > runtime_j, relu(margin - (pred_i - pred_j)),
    averaged over those pairs."""
    better = (runtime[:, None] > runtime[None, :]).float()
    if float(better.sum()) == 0:
        return pred.sum() * 0.0
    return (torch.relu(margin - (pred[:, None] - pred[None, :])) * better).sum() / better.sum()


# ---- Graph Segment Training ------------------------------------------------------------------------------
class History:
    """GST's table of historical segment embeddings: per graph a (segments, configs, 2H) tensor of the
    last computed sums and a mask of which are filled. A stale embedding never computed counts as
    dropped."""

    def __init__(self, torch, graphs: Sequence[PreparedGraph], width: int) -> None:  # type: ignore[no-untyped-def]
        self.emb = [torch.zeros(g.n_segments, g.n_configs, width) for g in graphs]
        self.filled = [torch.zeros(g.n_segments, g.n_configs, dtype=torch.bool) for g in graphs]

    def pull(self, gi: int, segs: np.ndarray, configs: np.ndarray):  # type: ignore[no-untyped-def]
        return self.emb[gi][segs][:, configs], self.filled[gi][segs][:, configs]

    def push(self, gi: int, seg: int, configs: np.ndarray, sums) -> None:  # type: ignore[no-untyped-def]
        self.emb[gi][seg, configs] = sums.detach()
        self.filled[gi][seg, configs] = True


@dataclass
class LayoutTrainResult:
    """What train_layout returns: the model (the best epoch by validation tau, after head finetuning),
    the per-epoch history and the largest number of nodes a training step ran with gradient."""
    model: LayoutModel
    history: list[dict[str, float]] = field(default_factory=list)
    best_val_tau: float = float("nan")
    max_grad_nodes: int = 0
    train_graphs: int = 0
    max_graph_nodes: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"best_val_tau": self.best_val_tau, "epochs": len(self.history), "history": self.history,
                "max_grad_nodes": self.max_grad_nodes, "max_graph_nodes": self.max_graph_nodes,
                "train_graphs": self.train_graphs, "seconds": self.seconds, "params": self.model.params}


def mean_tau(model: LayoutModel, graphs: Sequence[PreparedGraph]) -> float:
    """The mean over the labelled graphs of Kendall's tau between the model's scores and the runtimes."""
    taus = [kendall_tau(model.predict(g), g.runtime) for g in graphs if g.labelled]
    taus = [t for t in taus if t == t]
    return float(np.mean(taus)) if taus else float("nan")


class _Bar:
    """A rich progress bar with loss and validation tau, or nothing."""

    def __init__(self, enabled: bool, total: int, label: str,
                 fields: str = "loss {task.fields[loss]}  val τ {task.fields[tau]}") -> None:
        self.enabled = enabled
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.prog = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn(fields))
            self.prog.__enter__()
            self.tid = self.prog.add_task(label, total=total, loss="-", tau="-")

    def update(self, advance: int = 0, loss: float | None = None, tau: float | None = None) -> None:
        if self.enabled:
            kw: dict[str, Any] = {}
            if loss is not None:
                kw["loss"] = f"{loss:.4f}"
            if tau is not None:
                kw["tau"] = f"{tau:.3f}"
            self.prog.update(self.tid, advance=advance, **kw)

    def close(self) -> None:
        if self.enabled:
            self.prog.__exit__(None, None, None)


def train_layout(directory: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
                 epochs: int = 20, segment_size: int | None = 1000, sample_segments: int = 1,
                 sample_configs: int = 16, sed: float = 0.0, finetune_epochs: int = 5, hidden: int = 32,
                 layers: int = 3, lr: float = 2e-3, seed: int = 0, progress: bool = True,
                 threads: int | None = None, fill: str = "all", halo: int = 1,
                 epoch_unit: str = "segments", accumulate: bool = False) -> LayoutTrainResult:
    """Train the layout model on DIR/train (validated on DIR/valid if present) with Graph Segment
    Training: segments of at most `segment_size` nodes (None: whole graphs), each with the outside
    nodes within `halo` hops as read-only context (0: cut edges dropped, as GST's code does),
    `sample_segments` of them with gradient per step, the others from the historical-embedding
    table, each stale one dropped with probability `sed` (missing ones computed without gradient
    unless fill="none"); `sample_configs` configs per step; then `finetune_epochs` of
    prediction-head finetuning. The model of the epoch with the best validation tau is kept (the
    last if there is no valid split), saved to `out` if given.

    What an epoch is (`epoch_unit`): "segments" (the default) is one pass over the training data:
    every segment of every graph is trained once, in ceil(segments / sample_segments) consecutive
    steps per graph (its segments in a random order, sample_segments per step) on the graph's
    `sample_configs` sampled configs; the first step fills the other segments' entries (`fill`) and
    the later ones take them from the table, where each step pushed what it trained (at most a few
    steps stale). Every node gets a gradient once per epoch, as in full-graph training, from the same
    configs, in more (smaller) optimizer steps. "graphs" is GST's code's epoch (kaidic/GST,
    custom_tpu_train.py): one step per graph with `sample_segments` random segments, so a graph of k
    segments has each node trained once in about k/sample_segments epochs. With whole graphs
    (segment_size None or larger than the graph) both are one step per graph. `accumulate` (with
    "segments"): the pass's segments add their gradients into one optimizer step per graph, as
    full-graph training takes (memory still one segment's; the others' table entries are then
    all from the current weights, so the step's gradient is the whole segmented graph's).

    Example::

        >>> res = train_layout("layouts", epochs=10, segment_size=500, progress=False)   # doctest: +SKIP
        >>> res.best_val_tau                                                              # doctest: +SKIP
        0.71
    """
    torch = _torch()
    if epochs < 0 or finetune_epochs < 0 or sample_segments < 1 or sample_configs < 2 or not 0 <= sed < 1:
        raise LayoutError("need epochs >= 0, finetune_epochs >= 0, sample_segments >= 1, sample_configs >= 2 "
                          f"and 0 <= sed < 1, got {epochs}, {finetune_epochs}, {sample_segments}, {sample_configs}, {sed}")
    if fill not in ("missing", "all", "none"):
        raise LayoutError(f"fill must be 'missing', 'all' or 'none', got {fill!r}")
    if epoch_unit not in ("segments", "graphs"):
        raise LayoutError(f"epoch_unit must be 'segments' or 'graphs', got {epoch_unit!r}")
    if halo < 0:
        raise LayoutError(f"halo must be at least 0 hops, got {halo}")
    if accumulate and epoch_unit != "segments":
        raise LayoutError("accumulate needs epoch_unit='segments' (a pass over each graph's segments to add up)")
    if segment_size is not None and segment_size < 1:
        raise LayoutError(f"segment_size must be at least 1 (or None for whole graphs), got {segment_size}")
    t0 = time.perf_counter()
    train = [g for g in load_split(directory, "train", segment_size, halo) if g.labelled and g.n_configs >= 2]
    if not train:
        raise LayoutError(f"{Path(directory) / 'train'}: no labelled layout files with at least 2 configs")
    valid_dir = Path(directory) / "valid"
    valid = [g for g in load_split(directory, "valid", segment_size, halo) if g.labelled] if valid_dir.is_dir() else []
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        mean, std = _standardisation(train)
        model = LayoutModel.create(hidden, layers, segment_size, seed, mean, std, halo)
        net = model.net
        rng = np.random.default_rng(seed)
        gen = torch.Generator().manual_seed(seed)
        table = History(torch, train, 2 * hidden)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        res = LayoutTrainResult(model, train_graphs=len(train), max_graph_nodes=max(g.n for g in train))
        best_state, best_tau = None, -float("inf")
        steps = [1 if epoch_unit == "graphs" else -(-g.n_segments // sample_segments) for g in train]
        bar = _Bar(progress, epochs * sum(steps) + finetune_epochs * len(train), "train-layout")
        losses: list[float] = []  # this epoch's

        def record(loss: float, grad_nodes: int) -> None:
            losses.append(loss)
            res.max_grad_nodes = max(res.max_grad_nodes, grad_nodes)
            bar.update(1, loss=float(np.mean(losses)))
        try:
            for epoch in range(epochs):
                net.train()
                losses.clear()
                te = time.perf_counter()
                for gi in rng.permutation(len(train)):
                    g = train[gi]
                    if steps[gi] == 1:       # GST's code's step (and a whole graph's): random segments
                        record(*_gst_step(torch, model, g, int(gi), table, opt, rng, gen,
                                          sample_segments, sample_configs, sed, fill))
                        continue
                    # one pass over the graph's segments, on one sample of its configs
                    configs = _sorted_sample(rng, g.n_configs, sample_configs)
                    order = rng.permutation(g.n_segments)
                    current: set[int] = set()       # segments whose entries for these configs this pass computed
                    for k in range(0, g.n_segments, sample_segments):
                        segs = np.sort(order[k:k + sample_segments])
                        last = k + sample_segments >= g.n_segments
                        record(*_gst_step(torch, model, g, int(gi), table, opt, rng, gen,
                                          sample_segments, sample_configs, sed, fill,
                                          configs=configs, segs=segs, current=current,
                                          zero=not accumulate or k == 0, update=not accumulate or last))
                seconds = time.perf_counter() - te
                tau = mean_tau(model, valid) if valid else float("nan")
                bar.update(0, tau=tau)
                res.history.append({"epoch": epoch, "loss": float(np.mean(losses)), "val_tau": tau, "phase": "gst",
                                    "seconds": seconds})
                if valid and tau > best_tau:
                    best_tau, best_state = tau, {k: v.clone() for k, v in net.state_dict().items()}
            if best_state is not None:
                net.load_state_dict(best_state)
            if finetune_epochs:
                ft = _finetune_head(torch, model, train, valid, finetune_epochs, sample_configs, lr, rng, bar, res)
                if valid and ft >= best_tau:
                    best_tau = ft
                elif valid and best_state is not None:
                    net.load_state_dict(best_state)
        finally:
            bar.close()
    finally:
        torch.set_num_threads(old_threads)
    if valid and best_tau == -float("inf"):       # no epoch ran: the untrained model's tau
        best_tau = mean_tau(model, valid)
    res.best_val_tau = best_tau if valid else float("nan")
    res.seconds = time.perf_counter() - t0
    if out is not None:
        model.save(out)
    return res


def _sorted_sample(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """min(k, n) distinct ints of range(n), drawn at random, in increasing order."""
    return np.sort(rng.choice(n, size=min(k, n), replace=False))


def _gst_step(torch, model: LayoutModel, g: PreparedGraph, gi: int, table: History, opt, rng: np.random.Generator,  # type: ignore[no-untyped-def]
              gen, sample_segments: int, sample_configs: int, sed: float, fill: str = "all",
              configs: np.ndarray | None = None, segs: np.ndarray | None = None,
              current: set[int] | None = None, zero: bool = True, update: bool = True) -> tuple[float, int]:
    """One GST step on graph g: forward/backward through the sampled segments only (`segs`, or
    sample_segments drawn at random, on `configs` or sample_configs drawn); the rest from the table
    (Stale Embedding Dropout); push the fresh embeddings. `current`: segments whose table entries
    for these configs were computed in the caller's pass over the graph (fill="all" does not
    recompute them; the step adds the ones it computes). zero / update: whether the step clears the
    gradients first / takes the optimizer step (False: the backbone's gradients accumulate for a
    later step; the head's are left as they were, since the updating step adds them once).
    Returns the loss and the nodes run with gradient (a segment's own and its halo)."""
    net = model.net
    if configs is None:
        configs = _sorted_sample(rng, g.n_configs, sample_configs)
    if segs is None:
        segs = _sorted_sample(rng, g.n_segments, sample_segments)
    nodes_per = np.diff(g.bounds).astype(np.float32)
    cfg_per = np.array([b - a for a, b in g.seg_cfg], np.float32)
    c = len(configs)
    fresh = [model.segment_sums(g, int(s), configs) for s in segs]
    sums = torch.stack(fresh).sum(0)
    nodes = torch.full((c,), float(nodes_per[segs].sum()))
    cfg_nodes = torch.full((c,), float(cfg_per[segs].sum()))
    others = np.setdiff1d(np.arange(g.n_segments), segs)
    if len(others):
        stale, filled = table.pull(gi, others, configs)                        # (o, c, 2H), (o, c)
        if fill != "none":       # compute the missing (or all) others without gradient, one segment at a time
            with torch.no_grad():
                for j, s in enumerate(others):
                    if current is not None and int(s) in current:
                        continue
                    todo = configs if fill == "all" else configs[~filled[j].numpy()]
                    if len(todo):
                        table.push(gi, int(s), todo, model.segment_sums(g, int(s), todo))
                    if current is not None:
                        current.add(int(s))
            stale, filled = table.pull(gi, others, configs)
        # Stale Embedding Dropout, one draw per segment shared by the step's configs (a segment kept for
        # some configs and not others would move their scores apart by which nodes the mean covers, not
        # by their layouts); a segment is usable only if the table holds it for every one of the configs
        keep = filled.all(1) & (torch.rand(len(others), generator=gen) >= sed)
        k = keep.float()[:, None].expand(len(others), c)
        sums = sums + (stale * k[..., None]).sum(0)
        nodes = nodes + (k * torch.from_numpy(nodes_per[others])[:, None]).sum(0)
        cfg_nodes = cfg_nodes + (k * torch.from_numpy(cfg_per[others])[:, None]).sum(0)
    pred = net.score(sums, nodes, cfg_nodes)
    rt = torch.from_numpy(g.runtime[configs]).float()
    loss = pairwise_hinge(torch, pred, rt)
    if zero:
        opt.zero_grad()
    # accumulating (update=False): every step of a pass has the same loss, whose gradient reaches the
    # head at each of them; the head keeps only the step that updates (the backbone's add up over the
    # segments, each through its own segment)
    head = [] if update else [(q, None if q.grad is None else q.grad.clone()) for q in net.head.parameters()]
    loss.backward()
    for q, gr in head:
        q.grad = gr
    if update:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
    for s, f in zip(segs, fresh):
        table.push(gi, int(s), configs, f)
        if current is not None:
            current.add(int(s))
    return float(loss.detach()), sum(g.run_nodes(int(s)) for s in segs)


def _finetune_head(torch, model: LayoutModel, train: Sequence[PreparedGraph], valid: Sequence[PreparedGraph],  # type: ignore[no-untyped-def]
                   epochs: int, sample_configs: int, lr: float, rng: np.random.Generator, bar: _Bar,
                   res: LayoutTrainResult) -> float:
    """Prediction-head finetuning (GST's EFD): the backbone frozen, every segment's embedding computed
    fresh (all configs, segment by segment, no gradient), the head trained alone on them."""
    net = model.net
    net.eval()
    exact = []
    for g in train:
        sums = torch.cat([model.graph_sums(g, np.arange(i, min(i + 64, g.n_configs)))
                          for i in range(0, g.n_configs, 64)])
        exact.append(sums)
    opt = torch.optim.Adam(net.head.parameters(), lr=lr)
    tau = float("nan")
    for epoch in range(epochs):
        losses = []
        for gi in rng.permutation(len(train)):
            g = train[gi]
            configs = _sorted_sample(rng, g.n_configs, sample_configs)
            c = len(configs)
            pred = net.score(exact[gi][configs], torch.full((c,), float(g.n)), torch.full((c,), float(len(g.cfg_ids))))
            loss = pairwise_hinge(torch, pred, torch.from_numpy(g.runtime[configs]).float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            bar.update(1, loss=float(np.mean(losses)))
        tau = mean_tau(model, valid) if valid else float("nan")
        bar.update(0, tau=tau)
        res.history.append({"epoch": epoch, "loss": float(np.mean(losses)), "val_tau": tau, "phase": "finetune"})
    return tau


def evaluate_layout(directory: str | os.PathLike[str], model: LayoutModel | str | os.PathLike[str], *,
                    split: str = "test", csv: str | os.PathLike[str] | None = None, progress: bool = True,
                    seed: int = 0) -> dict[str, Any]:
    """Score every graph of DIR/split: Kendall's tau per labelled graph between the model's scores and
    the runtimes, their mean, and the mean tau of random scores for comparison. `csv` writes the
    dataset's submission form (ID,TopConfigs: the configs fastest first, ';'-joined).

    Example::

        >>> evaluate_layout("layouts", "layout.pt", progress=False)["mean_tau"]    # doctest: +SKIP
        0.68
    """
    if not isinstance(model, LayoutModel):
        model = LayoutModel.load(model)
    graphs = load_split(directory, split, model.segment_size, model.halo)
    if not graphs:
        raise LayoutError(f"{Path(directory) / split}: no layout .npz files")
    rng = np.random.default_rng(seed)
    rows, lines = [], ["ID,TopConfigs"]
    bar = _Bar(progress, len(graphs), f"evaluate-layout {split}", "mean τ {task.fields[tau]}")
    try:
        for g in graphs:
            scores = model.predict(g)
            row: dict[str, Any] = {"graph": g.name, "nodes": g.n, "configs": g.n_configs, "segments": g.n_segments}
            if g.labelled:
                row["tau"] = kendall_tau(scores, g.runtime)
                row["random_tau"] = kendall_tau(rng.random(g.n_configs), g.runtime)
                row["best_config_slowdown"] = float(g.runtime[int(np.argmin(scores))] / g.runtime.min())
            rows.append(row)
            lines.append(f"layout:{split}:{g.name}," + ";".join(str(int(i)) for i in np.argsort(scores, kind="stable")))
            taus = [r["tau"] for r in rows if r.get("tau") == r.get("tau") and "tau" in r]
            bar.update(1, tau=float(np.mean(taus)) if taus else None)
    finally:
        bar.close()
    if csv is not None:
        Path(csv).write_text("\n".join(lines) + "\n")
    taus = [r["tau"] for r in rows if "tau" in r and r["tau"] == r["tau"]]
    rand = [r["random_tau"] for r in rows if "random_tau" in r and r["random_tau"] == r["random_tau"]]
    return {"split": split, "graphs": rows, "labelled": len(taus), "mean_tau": float(np.mean(taus)) if taus else float("nan"),
            "random_mean_tau": float(np.mean(rand)) if rand else float("nan"), "segment_size": model.segment_size}


__all__ = ["LayoutModel", "LayoutError", "LayoutTrainResult", "PreparedGraph", "prepare_graph", "load_split",
           "kendall_tau", "train_layout", "evaluate_layout", "mean_tau", "pairwise_hinge"]
