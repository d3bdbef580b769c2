"""The target a measurement was taken on: CPU model, ISA, threads, library versions."""
from __future__ import annotations

import functools
import platform
from typing import Any


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def isa() -> str:
    try:
        from autotune.environment import host_cpu_features
        feats = host_cpu_features()
    except Exception:
        return platform.machine()
    for name in ("avx512f", "avx2", "avx", "sse4.2", "neon"):
        if f"+{name}" in feats:
            return name
    return platform.machine()


def versions() -> dict[str, str]:
    import llvmlite
    import numba
    import numpy
    from autotune.version import __version__
    return {"autotune": __version__, "numba": numba.__version__, "llvmlite": llvmlite.__version__,
            "numpy": numpy.__version__, "python": platform.python_version()}


def current_target(threads: int) -> dict[str, Any]:
    """A JSON description of this machine for `threads` threads."""
    return {"cpu": cpu_model(), "isa": isa(), "threads": threads, "versions": versions()}


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two targets are the same kind of machine (CPU model and ISA)."""
    return a.get("cpu") == b.get("cpu") and a.get("isa") == b.get("isa")


def same_isa(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two targets have the same ISA (a kernel tuned on one suits the other)."""
    return a.get("isa") == b.get("isa")
