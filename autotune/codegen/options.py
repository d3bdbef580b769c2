"""What a schedule asks of the code generator besides the loop nest itself.

    >>> from autotune.codegen.options import CodegenOptions
    >>> CodegenOptions(reassoc=True).noalias
    False
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodegenOptions:
    """Options a schedule passes to the code generator.

    reassoc: let LLVM reassociate floating-point reductions (vectorised row sums); leave off for
    kernels with scalar accumulators (it turns the k loop of a GEMM into gathers).
    noalias: compile with the array arguments declared non-overlapping (NoAliasKernelPipeline): no
    runtime alias checks and scalar fallbacks in every vectorized loop. Faster to compile for
    kernels of many vectorized loops (the Winograd convolution), slower for some others.
    """
    reassoc: bool = False
    noalias: bool = False
