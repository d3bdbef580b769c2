"""Tensor expressions (`expr`, imported as `te`) and the loop-nest IR (`stmt`)."""
from autotune.ir import expr as te

__all__ = ["te"]
