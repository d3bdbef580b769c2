"""SYNTHETIC layout-collection graphs with a planted ground truth, written as TpuGraphs layout `.npz`
files (`write_layout`), so the layout model (autotune.backends.tpu.layout_model) has something to
learn where the real dataset is absent. Nothing here is measured on a TPU: every file is named
`synthetic-*.npz` and every directory gets a `SYNTHETIC.json` saying how it was made.

The planted cost of one config (one layout per configurable node):

    runtime = sum over nodes v      size(v) * A[opcode(v), layout(v)]
            + sum over edges (u, v) EDGE * size(producer) * [layout(u) != layout(v)]

size(v) is log2 of the product of the node's shape (node_feat column 28) over 8 (a mild growth with the
tensor's size, so a small model learns it in seconds), A a fixed table (the same for
every graph of every seed: it is what a model learns), layout(v) the node's minor_to_major: a configurable
node's from its config (node_config_feat, output layout), any other node's from node_feat columns
134-139. The edge term is what makes message passing necessary: a node's cost depends on its
neighbours' layouts. Graphs are in topological order, most edges local (as XLA's are), a few long.

Example::

    >>> import tempfile, numpy as np
    >>> from autotune.backends.tpu.layout_data import generate_layout_graph
    >>> g = generate_layout_graph(300, 8, np.random.default_rng(0))
    >>> g.node_feat.shape, g.node_config_feat.shape[0], bool((g.config_runtime > 0).all())
    ((300, 140), 8, True)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from autotune.backends.tpu.tpugraphs import HLO_OPCODES, LAYOUT_CONFIG_FEAT, NODE_FEAT, NODE_FEATURE_COLUMNS, LayoutGraph, write_layout

# the ops whose layout a config sets, and the rest
CONFIGURABLE = ("convolution", "dot", "reshape", "transpose", "copy")
FIXED = ("add", "multiply", "maximum", "exponential", "broadcast", "reduce", "select", "convert", "subtract", "tanh")
LAYOUTS: dict[int, list[tuple[int, ...]]] = {   # the candidate minor_to_major of each rank (the first: XLA's default)
    2: [(1, 0), (0, 1)],
    3: [(2, 1, 0), (1, 2, 0), (0, 1, 2), (2, 0, 1)],
    4: [(3, 2, 1, 0), (2, 3, 1, 0), (0, 1, 2, 3), (3, 0, 1, 2)],
}
EDGE = 0.6          # the relayout cost of a disagreeing edge, per unit of the producer's size
WINDOW = 6          # a node's operands come from the WINDOW nodes before it (mostly)
LONG_EDGES = 0.03   # ... or, this often, from anywhere before it
PLANTED_SEED = 4321  # the planted cost table A: fixed, whatever the generator's seed
DIMS = (8, 16, 32, 64, 128, 256)


def _planted_table() -> np.ndarray:
    """A[opcode, layout index]: 0.5 to 1.5, a different layout best for different opcodes."""
    return np.random.default_rng(PLANTED_SEED).uniform(0.5, 1.5, size=(256, 4))


def generate_layout_graph(n_nodes: int, n_configs: int, rng: np.random.Generator,
                          configurable: float = 0.3, computation: int = 400) -> LayoutGraph:
    """One synthetic layout graph of `n_nodes` nodes and `n_configs` configs (config 0 all default
    layouts, the others random), its runtimes the planted cost (module docstring) in integer units.

    Example::

        >>> import numpy as np
        >>> g = generate_layout_graph(500, 4, np.random.default_rng(1))
        >>> g.config_runtime.dtype.kind, len(g.node_config_ids) > 0
        ('i', True)
    """
    if n_nodes < 3 or n_configs < 2:
        raise ValueError(f"need at least 3 nodes and 2 configs, got {n_nodes} nodes, {n_configs} configs")
    n = int(n_nodes)
    splits = np.unique(np.r_[0, np.arange(0, n, computation), n])
    comp = np.searchsorted(splits, np.arange(n), side="right") - 1
    comp_rank = rng.integers(2, 5, size=len(splits))          # one rank per computation
    rank = comp_rank[comp]
    is_param = rng.random(n) < 0.04
    is_param[:2] = True
    is_cfg = (rng.random(n) < configurable) & ~is_param
    ops = np.where(is_param, HLO_OPCODES["parameter"],
                   np.where(is_cfg, np.array([HLO_OPCODES[o] for o in CONFIGURABLE])[rng.integers(0, len(CONFIGURABLE), n)],
                            np.array([HLO_OPCODES[o] for o in FIXED])[rng.integers(0, len(FIXED), n)]))
    # operands: 1 or 2 producers before the node, mostly within WINDOW
    cons, prod = [], []
    for k in (0, 1):
        who = np.flatnonzero(~is_param & ((k == 0) | (rng.random(n) < 0.5)))
        who = who[who > 0]
        back = rng.integers(1, WINDOW + 1, size=len(who))
        src = np.maximum(who - back, 0)
        far = rng.random(len(who)) < LONG_EDGES
        src[far] = (rng.random(int(far.sum())) * who[far]).astype(np.int64)
        cons.append(who)
        prod.append(src)
    edges = np.unique(np.stack([np.concatenate(cons), np.concatenate(prod)], 1), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    # shapes and the fixed layouts
    dims = np.array(DIMS)[rng.integers(0, len(DIMS), size=(n, 4))]
    dims[np.arange(4)[None, :] >= rank[:, None]] = 0
    size = np.where(dims > 0, dims, 1).prod(1).astype(np.float64)
    lay_fixed = np.where(is_cfg, 0, rng.integers(0, 4, size=n))
    lay_fixed[rank == 2] = np.minimum(lay_fixed[rank == 2], 1)
    feat = np.zeros((n, NODE_FEAT), np.float32)
    feat[n - 1, NODE_FEATURE_COLUMNS["is_root"]] = 1
    feat[:, NODE_FEATURE_COLUMNS["element_type"] + 11] = 1            # f32
    c = NODE_FEATURE_COLUMNS["shape_dimensions"]
    feat[:, c:c + 4] = dims
    feat[:, c + 6] = dims.sum(1)
    feat[:, c + 7] = size
    m2m = NODE_FEATURE_COLUMNS["layout_minor_to_major"]
    for r, cands in LAYOUTS.items():
        for li, perm in enumerate(cands):
            sel = (rank == r) & (lay_fixed == li)
            feat[np.ix_(sel, np.arange(m2m, m2m + r))] = perm
    feat[is_param, NODE_FEATURE_COLUMNS["parameter_number"]] = np.arange(int(is_param.sum()))
    # configs: a layout index per configurable node
    ids = np.flatnonzero(is_cfg)
    nlay = np.where(rank[ids] == 2, 2, 4)
    choice = (rng.random((n_configs, len(ids))) * nlay).astype(np.int64)
    choice[0] = 0
    cfg = np.full((n_configs, len(ids), LAYOUT_CONFIG_FEAT), -1, np.float32)
    for r, cands in LAYOUTS.items():
        cols = rank[ids] == r
        for li, perm in enumerate(cands):
            sel = (choice == li) & cols[None, :]
            for part in (0, 6):                       # output and input layout
                for d, v in enumerate(perm):
                    cfg[:, :, part + d][sel] = v
            conv = sel & (ops[ids] == HLO_OPCODES["convolution"])[None, :]
            for d, v in enumerate(perm):              # a convolution's kernel layout too
                cfg[:, :, 12 + d][conv] = v
    # the planted cost
    layout = np.broadcast_to(lay_fixed, (n_configs, n)).copy()
    layout[:, ids] = choice
    lid = layout + 10 * rank[None, :]                  # a layout is (rank, index)
    a = _planted_table()
    w = np.log2(size) / 8.0
    node_cost = (w[None, :] * a[ops[None, :], layout]).sum(1)
    u, v = edges[:, 0], edges[:, 1]
    edge_cost = EDGE * ((lid[:, u] != lid[:, v]) * w[v][None, :]).sum(1)
    runtime = np.maximum(np.rint(1000.0 * (node_cost + edge_cost)), 1).astype(np.int64)
    return LayoutGraph(feat, ops.astype(np.uint8), edges.astype(np.int64), ids.astype(np.int64), cfg, runtime,
                       splits.astype(np.int64))


def generate_layout_dataset(directory: str | os.PathLike[str], train: int = 24, valid: int = 6, test: int = 6,
                            nodes: tuple[int, int] = (300, 600), configs: int = 32, seed: int = 0,
                            configurable: float = 0.3) -> dict[str, list[str]]:
    """Write a SYNTHETIC layout set: DIR/{train,valid,test}/synthetic-NNNN.npz (the dataset's layout
    file format) and DIR/SYNTHETIC.json describing how it was made. Node counts are drawn
    log-uniformly from `nodes` (inclusive, 3 to any size: 100,000 nodes takes seconds). Returns the
    files written per split.

    Example::

        >>> import tempfile
        >>> out = generate_layout_dataset(tempfile.mkdtemp(), 2, 1, 1, nodes=(50, 80), configs=4)
        >>> sorted(out), len(out["train"])
        (['test', 'train', 'valid'], 2)
    """
    lo, hi = int(nodes[0]), int(nodes[1])
    if not 3 <= lo <= hi:
        raise ValueError(f"nodes must be MIN <= MAX, at least 3, got {nodes}")
    root = Path(directory)
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {}
    for split, count in (("train", train), ("valid", valid), ("test", test)):
        (root / split).mkdir(parents=True, exist_ok=True)
        out[split] = []
        for i in range(count):
            n = int(round(np.exp(rng.uniform(np.log(lo), np.log(hi + 0.5))))) if hi > lo else lo
            g = generate_layout_graph(max(lo, min(hi, n)), configs, rng, configurable)
            path = root / split / f"synthetic-{i:04d}.npz"
            write_layout(path, g)
            out[split].append(str(path))
    (root / "SYNTHETIC.json").write_text(json.dumps({
        "synthetic": True,
        "note": "generated by autotune.backends.tpu.layout_data with a planted cost; not measured on a TPU",
        "seed": seed, "nodes": [lo, hi], "configs": configs, "configurable": configurable,
        "splits": {k: len(v) for k, v in out.items()}, "edge_cost": EDGE, "planted_seed": PLANTED_SEED,
    }, indent=2) + "\n")
    return out


__all__ = ["generate_layout_graph", "generate_layout_dataset", "LAYOUTS", "CONFIGURABLE"]
