"""Read and write TpuGraphs tile:xla `.npz` files, so graph models train on the real dataset
where a user has it, and on data this project generates.

Schema (one kernel graph, c tile configs):
  node_feat (n, 140) float32, node_opcode (n,) integer, edge_index (m, 2) integer in [0, n),
  config_feat (c, 24) float32, config_runtime (c,) number, config_runtime_normalizers (c,) number.

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

    def samples(self, ProgramGraph=None):  # type: ignore[no-untyped-def]
        """One ProgramGraph per config (the graph shared, config_feat per config) and its runtime."""
        from autotune.cost_model.graph import ProgramGraph as PG
        out = []
        for i in range(len(self.config_runtime)):
            g = PG(self.node_opcode.astype(np.int64), self.node_feat, self.edge_index.astype(np.int64),
                   self.config_feat[i])
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


def dataset_from_tiles(paths: list[str | os.PathLike[str]]):  # type: ignore[no-untyped-def]
    """A graph Dataset from TpuGraphs tile files (one task per file)."""
    from autotune.cost_model.base import Dataset
    ds = Dataset(X=np.zeros((0, CONFIG_FEAT), np.float32))
    for p in paths:
        samples = read_tile(p).samples()
        ds.add(np.stack([g.config_feat for g, _ in samples]), [r for _, r in samples], os.fspath(p),
               [g for g, _ in samples])
    return ds
