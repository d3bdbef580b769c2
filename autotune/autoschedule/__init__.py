"""A template-free search space: rules derive a sketch and its knobs from a compute definition.

The rules look at the definition's stages (what each reads, along which axis each read is
contiguous, who consumes what; `analysis`) and pick one of four sketches, like Ansor's sketch
rules (`scheduler`), each a module describing its schedule:

- **gemm** (`gemm`): a matrix product, alone or feeding an elementwise epilogue: BLIS blocking.
- **window** (`window`): a direct convolution, alone or feeding an elementwise epilogue.
- **rows** (`rows`): programs whose reductions run along the contiguous axis (softmax, layernorm).
- **tiled** (`tiled`): anything else: multi-level tiling of the output stage.

Knob values are pruned by the target's vector width and register count (`vector_target`).

Example::

    >>> from autotune.ir import te
    >>> from autotune.autoschedule import AutoScheduler
    >>> A = te.placeholder((64, 64), name="A"); B = te.placeholder((64, 64), name="B")
    >>> k = te.reduce_axis(64, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> auto = AutoScheduler(C, threads=1)
    >>> auto.sketch, sorted(auto.space.by_name)[:3]
    ('gemm', ['jc_blocks', 'kc', 'mc_panels'])
"""
from __future__ import annotations

from .analysis import Gemm, Window, contiguous_axes, is_identity_read, match_gemm, match_window, reduces_along_rows
from .scheduler import AutoScheduler, auto_schedule
from .tiled import MAX_INNER
from .vectors import lanes, vector_target

__all__ = ["AutoScheduler", "Gemm", "MAX_INNER", "Window", "auto_schedule", "contiguous_axes", "is_identity_read",
           "lanes", "match_gemm", "match_window", "reduces_along_rows", "vector_target"]
