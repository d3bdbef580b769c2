"""Loop nest -> Python source -> numba.njit, cached on disk by source hash."""
from autotune.codegen.compile import Kernel, build
from autotune.codegen.source import generate_source

__all__ = ["Kernel", "build", "generate_source"]
