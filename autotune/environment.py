"""The one place autotune reads environment variables and sets Numba's.

Numba reads NUMBA_* variables once, at import; `configure_numba()` must run before `import numba`.
autotune's package __init__ calls it, and measurement workers call it first thing.

Variables read here:
  AUTOTUNE_CACHE_DIR  where generated kernels and Numba's compile cache live
                      (default: ~/.cache/autotune)
  AUTOTUNE_THREADS    default thread count for parallel kernels (default: all cores)
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

FASTMATH = ("contract", "nnan", "ninf", "nsz", "arcp", "afn")  # no reassoc: see MEASURED.md


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    threads: int


def settings() -> Settings:
    cache = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "autotune")
    threads_s = os.environ.get("AUTOTUNE_THREADS", "")
    threads = int(threads_s) if threads_s.isdigit() and int(threads_s) > 0 else (os.cpu_count() or 1)
    return Settings(Path(cache), threads)


_configured: dict[str, str] = {}


def host_cpu_features() -> str:
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_features().flatten()


def numba_env() -> dict[str, str]:
    """The Numba variables that make generated kernels fast here (SLP on, 512-bit vectors, -O2)."""
    env = {"NUMBA_SLP_VECTORIZE": "1", "NUMBA_OPT": "2"}
    try:
        feats = host_cpu_features()
        if "+avx512f" in feats:
            env["NUMBA_CPU_FEATURES"] = feats + ",-prefer-256-bit"
    except Exception:  # llvmlite missing or odd host: keep Numba's defaults
        pass
    return env


def configure_numba() -> dict[str, str]:
    """Set Numba's variables (once, before Numba is imported); return what is in force."""
    if _configured:
        return dict(_configured)
    wanted = numba_env()
    if "numba" in sys.modules:
        missing = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
        if missing:
            warnings.warn("numba was imported before autotune, so generated kernels run without "
                          f"{sorted(missing)}; import autotune first for full speed", RuntimeWarning, stacklevel=3)
    else:
        for k, v in wanted.items():
            os.environ.setdefault(k, v)
    _configured.update({k: os.environ.get(k, "") for k in wanted})
    return dict(_configured)
