"""A CPU throughput estimate from loop-nest features, with nothing to train: the compute roofline
of the hot statement's micro-kernel, discounted for what keeps it off the peak.

    flops / cycle = threads busy (load balance of the parallel loop over the team)
                  x FMA ports x SIMD lanes x 2
                  x SIMD fill      (the vectorised innermost extent over whole vectors)
                  x min(latency hiding  (independent accumulator vectors / (FMA latency x ports)),
                        load ports      (FMAs per load of the unrolled micro-kernel))
                  x register spills (live vectors over the target's registers, when more)

It ranks the configs of a task (higher = faster) before anything is measured, so a guided
search from scratch can start from its top picks instead of blind samples; the search judges
it on its first measurements (autotune.search.guided.ModelScorer.judge_prior) like any prior.
Memory traffic is not modelled: the templates block for the caches, and on the benchmark tasks'
random configs a memory term only made the ranking worse.

Example::

    >>> import numpy as np
    >>> from autotune.backends.cpu.features import feature_length
    >>> X = np.zeros((2, feature_length()), np.float32)
    >>> X[:, 116] = 16                            # the innermost loop: one vector of 16 lanes
    >>> X[:, 114] = np.log2([1 + 16, 1 + 128])    # accumulators: 1 vector, 8 vectors
    >>> s = RooflineModel(threads=2).predict(X); bool(s[1] > s[0])   # 8 chains hide the FMA latency
    True
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.backends.cpu.features import FEATURE_VERSION, feature_length
from autotune.cost_model.base import Dataset, FeatureSchema, ModelError, as_matrix, read_model_file, write_model_file
from autotune.target import Target, current

if TYPE_CHECKING:
    from autotune.task import Task

# columns of the feature vector (autotune.backends.cpu.features, schema 3)
TRIP, FLOPS, ACC, UNROLLED, VECTOR, PARALLEL = 0, 1, 114, 115, 116, 117


class RooflineModel:
    """The machine: `lanes` SIMD lanes, `fma_ports` FMA units of `fma_latency` cycles, `load_ports`
    loads per cycle and `registers` vector registers per core; what is not given is the target's
    in force (`autotune.target.current()`, float32 lanes)."""
    kind = "roofline"
    needs_graphs = False
    features = FeatureSchema("cpu", FEATURE_VERSION, feature_length())

    def __init__(self, threads: int = 1, lanes: int | None = None, fma_ports: int | None = None,
                 fma_latency: int | None = None, load_ports: int = 2, registers: int | None = None) -> None:
        if threads < 1:
            raise ModelError(f"threads must be at least 1, got {threads!r}")
        here = current()
        self.threads = threads
        self.lanes = lanes if lanes is not None else here.lanes("float32")
        self.fma_ports = fma_ports if fma_ports is not None else here.fma_units
        self.fma_latency = fma_latency if fma_latency is not None else here.fma_latency
        self.load_ports = load_ports
        self.registers = registers if registers is not None else here.registers

    @classmethod
    def for_target(cls, target: Target, dtype: str = "float32", threads: int = 1) -> "RooflineModel":
        """The model of `target` (its SIMD width, FMA units and vector registers) for a dtype and threads.

        >>> from autotune.target import Target
        >>> m = RooflineModel.for_target(Target.named("avx2"), "float64", threads=2)
        >>> m.lanes, m.registers
        (4, 16)
        """
        return cls(threads=threads, lanes=target.lanes(dtype), fma_ports=target.fma_units,
                   fma_latency=target.fma_latency, registers=target.registers)

    @classmethod
    def for_task(cls, task: "Task") -> "RooflineModel":
        """The model of the target in force for the task's dtype and threads."""
        return cls.for_target(current(), task.dtype, task.threads)

    def fit(self, data: Dataset) -> None:
        pass  # nothing learned: the estimate is the machine's

    update = fit

    def flops_per_cycle(self, X: "Dataset | np.ndarray") -> np.ndarray:
        """The estimated throughput of each row's hot statement."""
        X = np.asarray(as_matrix(X), np.float64)
        vec = X[:, VECTOR]
        unrolled = np.maximum(np.exp2(X[:, UNROLLED]) - 1.0, 1.0)
        acc = np.exp2(X[:, ACC]) - 1.0
        par = np.maximum(np.exp2(X[:, PARALLEL]) - 1.0, 1.0)
        nvec = np.ceil(vec / self.lanes)
        fill = np.where(vec > 0, vec / np.maximum(nvec * self.lanes, 1.0), 0.25)  # no vector loop: mostly scalar
        chains = np.where(acc > 0, acc / self.lanes, unrolled)
        latency = np.minimum(1.0, chains / (self.fma_latency * self.fma_ports))
        per_step = np.maximum(nvec, 1.0)
        fmas, loads = unrolled * per_step, unrolled + per_step  # a broadcast per unrolled row, a load per vector
        load = np.minimum(1.0, fmas / loads * self.load_ports / self.fma_ports)
        live = chains + nvec + 1
        spill = np.where(live > self.registers, self.registers / live, 1.0)
        busy = par / np.ceil(par / self.threads)
        return busy * self.fma_ports * self.lanes * 2 * fill * np.minimum(latency, load) * spill

    def predict(self, X: "Dataset | np.ndarray") -> np.ndarray:
        """-log2 of the estimated cycles: the hot statement's flops over its throughput (higher = faster)."""
        X = np.asarray(as_matrix(X), np.float64)
        total = (np.exp2(X[:, TRIP]) - 1.0) * np.maximum(X[:, FLOPS], 1.0)
        return -np.log2(np.maximum(total, 1.0) / self.flops_per_cycle(X))

    def save(self, path: str | Path) -> None:
        write_model_file(path, self.kind, {"threads": self.threads, "lanes": self.lanes, "fma_ports": self.fma_ports,
                                           "fma_latency": self.fma_latency, "load_ports": self.load_ports,
                                           "registers": self.registers}, "", features=self.features)

    @classmethod
    def load(cls, path: str | Path) -> "RooflineModel":
        return cls(**read_model_file(path)["params"])
