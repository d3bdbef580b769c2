"""Program graphs, the input of graph cost models: nodes with an opcode (OPCODES) and NODE_FEATS
numbers each, edges, and the config's feature vector joined (like TpuGraphs' config_feat). Each
backend builds them from its own kernels (autotune.backends: the CPU's loop nests, the TPU's ops).

Example::

    >>> import numpy as np
    >>> g = ProgramGraph(np.zeros(2, np.int64), np.zeros((2, NODE_FEATS), np.float32), np.array([[0, 1]]), np.zeros(3))
    >>> g.num_nodes
    2
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPCODES = ("loop_serial", "loop_unroll", "loop_vectorize", "loop_parallel", "store", "load", "if",
           "add", "sub", "mul", "div", "floordiv", "mod", "min", "max", "and", "or", "cmp", "select", "cast",
           "exp", "log", "sqrt", "tanh", "abs", "sigmoid", "neg", "const", "var",
           "buffer_global", "buffer_stack", "buffer_heap", "other",
           # ops of TPU kernel graphs
           "parameter", "dot", "convolution", "reduce", "relu", "output")
OPCODE = {name: i for i, name in enumerate(OPCODES)}
NODE_FEATS = 8


@dataclass
class ProgramGraph:
    """node_opcode (n,), node_feat (n, F), edge_index (m, 2) [source, target], config_feat (C,)."""
    node_opcode: np.ndarray
    node_feat: np.ndarray
    edge_index: np.ndarray
    config_feat: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.node_opcode)
