"""A GraphSAGE cost model in PyTorch (the `gnn` extra), after "A Learned Performance Model for
Tensor Processing Units": opcode embeddings concatenated with node features, GraphSAGE layers
(mean or sum neighbour aggregation, layer norm, residual), a non-learned graph reduction
(mean and sum), the per-config features joined, and an MLP head. Losses: MSE on log runtime
(relative to the task's best) or a pairwise rank loss (logistic or hinge) over configs of the
same task. Deterministic under a seed; saved as JSON (weights as numbers, no pickle).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from autotune.cost_model.base import Dataset, FeatureSchema, ModelError, read_model_file, schema_of, write_model_file
from autotune.errors import install_hint

LOSSES = ("mse", "rank_logistic", "rank_hinge")


def _torch():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError as e:
        raise ModelError(f"the gnn cost model needs PyTorch: {install_hint('gnn')} (torch==2.13.0)") from e
    return torch


def _build_net(torch, n_ops: int, node_dim: int, cfg_dim: int, hidden: int, layers: int, aggr: str):  # type: ignore[no-untyped-def]
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(n_ops, 16)
            self.inp = nn.Linear(16 + node_dim, hidden)
            self.self_w = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
            self.nei_w = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
            self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
            self.cfg = nn.Linear(cfg_dim, hidden)
            self.head = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def forward(self, op, x, src, dst, batch, n_graphs, cfg):  # type: ignore[no-untyped-def]
            h = torch.relu(self.inp(torch.cat([self.emb(op), x], dim=1)))
            deg = torch.zeros(len(h), 1).index_add_(0, dst, torch.ones(len(dst), 1)).clamp_(min=1)
            for sw, nw, norm in zip(self.self_w, self.nei_w, self.norms):
                agg = torch.zeros_like(h).index_add_(0, dst, h[src])
                if aggr == "mean":
                    agg = agg / deg
                h = h + norm(torch.relu(sw(h) + nw(agg)))
            counts = torch.zeros(n_graphs, 1).index_add_(0, batch, torch.ones(len(batch), 1)).clamp_(min=1)
            g_sum = torch.zeros(n_graphs, h.shape[1]).index_add_(0, batch, h)
            # mean and sum reductions (the sum scaled, not normalised: its size is information)
            z = torch.cat([g_sum / counts, g_sum * 0.05, torch.relu(self.cfg(cfg))], dim=1)
            return self.head(z).squeeze(-1)

    return Net()


class GNNModel:
    """Example::

        >>> from autotune.cost_model.gnn_model import GNNModel
        >>> GNNModel(loss="mse").kind
        'gnn'
    """
    kind = "gnn"
    needs_graphs = True
    features: FeatureSchema | None = None  # what it was trained on (autotune.backends names it)

    def __init__(self, loss: str = "rank_logistic", hidden: int = 64, layers: int = 3, epochs: int = 30,
                 lr: float = 2e-3, batch_graphs: int = 32, aggr: str = "mean", seed: int = 0) -> None:
        if loss not in LOSSES:
            raise ModelError(f"loss must be one of {LOSSES}, got {loss!r}")
        if aggr not in ("mean", "sum"):
            raise ModelError(f"aggr must be 'mean' or 'sum', got {aggr!r}")
        self.loss, self.hidden, self.layers, self.epochs = loss, hidden, layers, epochs
        self.lr, self.batch_graphs, self.aggr, self.seed = lr, batch_graphs, aggr, seed
        self.net = None
        self.dims: dict[str, int] = {}
        self.norm: dict[str, list[float]] = {}
        self.losses: list[float] = []  # mean training loss per epoch (of the last fit)

    def _params(self) -> dict[str, Any]:
        return {"loss": self.loss, "hidden": self.hidden, "layers": self.layers, "epochs": self.epochs, "lr": self.lr,
                "batch_graphs": self.batch_graphs, "aggr": self.aggr, "seed": self.seed}

    # ---- batching --------------------------------------------------------------------------
    def _batch(self, torch, graphs: Sequence[Any]):  # type: ignore[no-untyped-def]
        ops, xs, srcs, dsts, batch, cfgs = [], [], [], [], [], []
        off = 0
        nm, ns = np.asarray(self.norm["node_mean"]), np.asarray(self.norm["node_std"])
        cm, cs = np.asarray(self.norm["cfg_mean"]), np.asarray(self.norm["cfg_std"])
        for gi, g in enumerate(graphs):
            n = g.num_nodes
            ops.append(np.minimum(g.node_opcode, self.dims["n_ops"] - 1))
            xs.append((g.node_feat - nm) / ns)
            e = g.edge_index
            srcs += [e[:, 0] + off, e[:, 1] + off]  # messages flow both ways
            dsts += [e[:, 1] + off, e[:, 0] + off]
            batch.append(np.full(n, gi))
            cfgs.append((g.config_feat - cm) / cs)
            off += n
        T = torch.as_tensor
        return (T(np.concatenate(ops), dtype=torch.long), T(np.concatenate(xs), dtype=torch.float32),
                T(np.concatenate(srcs), dtype=torch.long), T(np.concatenate(dsts), dtype=torch.long),
                T(np.concatenate(batch), dtype=torch.long), len(graphs), T(np.stack(cfgs), dtype=torch.float32))

    def _setup(self, data: Dataset) -> None:
        gs = data.graphs or []
        nodes = np.concatenate([g.node_feat for g in gs])
        cfgs = np.stack([g.config_feat for g in gs])
        self.dims = {"n_ops": int(max(int(g.node_opcode.max()) for g in gs) + 1) + 8,
                     "node_dim": int(nodes.shape[1]), "cfg_dim": int(cfgs.shape[1])}
        self.norm = {"node_mean": nodes.mean(0).tolist(), "node_std": (nodes.std(0) + 1e-6).tolist(),
                     "cfg_mean": cfgs.mean(0).tolist(), "cfg_std": (cfgs.std(0) + 1e-6).tolist()}

    # ---- the interface -----------------------------------------------------------------------
    def fit(self, data: Dataset) -> None:
        self.features = data.schema or self.features
        torch = _torch()
        if not data.graphs or len(data.graphs) != len(data):
            raise ModelError("the gnn model trains on program graphs: build the Dataset with graphs=True")
        if len(data) < 2:
            raise ModelError("need at least 2 measurements to train a model")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # deterministic and cheap: the graphs are small
        try:
            torch.manual_seed(self.seed)
            if self.net is None:
                self._setup(data)
                self.net = _build_net(torch, self.dims["n_ops"], self.dims["node_dim"], self.dims["cfg_dim"],
                                      self.hidden, self.layers, self.aggr)
            self._train(torch, data)
        finally:
            torch.set_num_threads(threads)

    def update(self, data: Dataset) -> None:
        """Continue training from the current weights (a warm start when pretrained)."""
        self.fit(data)

    def _train(self, torch, data: Dataset) -> None:  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(self.seed)
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        y = np.asarray(data.y, np.float64)
        target = np.log(np.maximum(y, 1e-3))
        groups = np.array(data.groups, dtype=object)
        weight = data.row_weights()
        by_group = [np.flatnonzero(groups == g) for g in sorted(set(data.groups))]
        self.losses = []
        for _ in range(self.epochs):
            batches = []
            for idx in by_group:  # batches stay within a task so rank pairs exist
                idx = rng.permutation(idx)
                batches += [idx[i:i + self.batch_graphs] for i in range(0, len(idx), self.batch_graphs)]
            rng.shuffle(batches)
            total = 0.0
            for b in batches:
                if len(b) < 2 and self.loss != "mse":
                    continue
                pred = self.net(*self._batch(torch, [data.graphs[i] for i in b]))  # type: ignore[index]
                t = torch.as_tensor(target[b], dtype=torch.float32)
                if self.loss == "mse":
                    loss = torch.mean((pred - t) ** 2)
                else:
                    diff = pred[:, None] - pred[None, :]
                    better = (t[:, None] > t[None, :] + 1e-6).float()
                    if better.sum() == 0:
                        continue
                    if self.loss == "rank_logistic":
                        loss = (torch.nn.functional.softplus(-diff) * better).sum() / better.sum()
                    else:
                        loss = (torch.relu(1.0 - diff) * better).sum() / better.sum()
                loss = loss * float(weight[b[0]])  # a batch is one task's: its task's weight
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach())
            self.losses.append(total / max(len(batches), 1))

    def predict(self, data: Dataset | np.ndarray) -> np.ndarray:
        torch = _torch()
        if self.net is None:
            raise ModelError("the gnn model has not been trained (fit it or load a pretrained one)")
        if not isinstance(data, Dataset) or not data.graphs:
            raise ModelError("the gnn model scores program graphs: pass a Dataset built with graphs")
        out = []
        with torch.no_grad():
            for i in range(0, len(data.graphs), 256):
                out.append(self.net(*self._batch(torch, data.graphs[i:i + 256])).numpy())
        return np.concatenate(out).astype(np.float64)

    def save(self, path: str | Path) -> None:
        if self.net is None:
            raise ModelError("nothing to save: the model has not been trained")
        state = {k: v.detach().numpy().tolist() for k, v in self.net.state_dict().items()}
        write_model_file(path, self.kind, self._params(),
                         json.dumps({"dims": self.dims, "norm": self.norm, "state": state}), features=self.features)

    @classmethod
    def load(cls, path: str | Path) -> "GNNModel":
        torch = _torch()
        d = read_model_file(path)
        m = cls(**d["params"])
        body = json.loads(d["model"])
        m.dims, m.norm = body["dims"], body["norm"]
        m.net = _build_net(torch, m.dims["n_ops"], m.dims["node_dim"], m.dims["cfg_dim"], m.hidden, m.layers, m.aggr)
        m.net.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in body["state"].items()})
        m.features = schema_of(d)
        return m
