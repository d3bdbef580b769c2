"""The one place autotune reads environment variables and sets Numba's.

Numba reads NUMBA_* variables once, at import; `configure_numba()` must run before `import numba`.
autotune's package __init__ calls it, and measurement workers call it first thing. Measurement
workers read no variable of their own: the driver sends them their settings (role, cores, lock,
template modules, cache directory, threads, target) in their first protocol message (measure/worker.py).

Variables autotune reads:
  AUTOTUNE_CACHE_DIR        where generated kernels, Numba's compile cache and the timing lock live
                            (default: ~/.cache/autotune)
  AUTOTUNE_CACHE_MAX_MB      the cache's size cap in MB, applied (least recently used kernels pruned)
                            when a tuning session starts; 0: no cap (default: 500; `autotune cache`)
  AUTOTUNE_THREADS          default thread count for parallel kernels (default: all cores)
  AUTOTUNE_TARGET           the target kernels are generated, judged and timed for: a name that
                            `autotune targets` lists (host, avx512, avx2, sse4.2, neon; default: host).
                            Spaces, presets and the roofline derive from its description, and Numba
                            generates code for its ISA (NUMBA_CPU_FEATURES: the host's, those above
                            the target's turned off); one this host cannot execute only describes
  AUTOTUNE_TRUSTED_KERNELS  hand-written kernels a replay may compile from a log: comma-separated
                            `module:function` names and SHA-256 digests of their sources (numba_tune)
  PYTHONPATH                kept, behind this checkout's root, for measurement workers and Ray workers
  RAY_USAGE_STATS_ENABLED   autotune sets it to 0 before starting Ray unless you set it

Variables autotune sets for Numba (before Numba is imported, unless already set; see numba_env()):
  NUMBA_SLP_VECTORIZE=1, NUMBA_OPT=2, and NUMBA_CPU_FEATURES: for an AVX-512 target
  <host>,-prefer-256-bit; for a narrower target than the host's, the host's features without those
  above it (AUTOTUNE_TARGET)

Numba's own variables are honoured as Numba documents them; autotune's code takes two into account:
  NUMBA_CACHE_DIR           where Numba caches autotune's library functions (codegen/healing.py;
                            the test of that module sets it to a temporary directory)
  NUMBA_DISABLE_JIT=1       the library's njit functions stay plain Python functions

Each directory Numba's cache files are written in (under AUTOTUNE_CACHE_DIR or NUMBA_CACHE_DIR, or a
__pycache__) has its own key, `autotune-cache.key`, private (mode 0600, this user's), that verifies
them (codegen/verified_cache.py); an unsafe one is refused with a CacheWarning, and what is cached
there compiles afresh.

Ray workers get the driver's AUTOTUNE_* and NUMBA_* variables (ray_runtime_env()) except
NUMBA_CPU_FEATURES: each node derives its own from its CPU (a cluster may mix ISAs).

Read by the test suite only:
  AUTOTUNE_TEMPLATE_EXAMPLES  examples per template and dtype in tests/templates (default: 3)
  AUTOTUNE_FUZZ_EXAMPLES      schedule fuzzing examples in tests/autotune/schedule (default: 0)
  AUTOTUNE_REGEN_GOLDEN=1     accept changed generated source in the golden tests
  HYPOTHESIS_PROFILE          hypothesis settings profile (default: "autotune")
  AUTOTUNE_KILL_LOOP_KILLS    kill -9s in tests/measure/test_kill_loop.py (default: 3)
  AUTOTUNE_KILL_LOOP_SEED     the seed of their timing (default: 0)
  AUTOTUNE_TEST_JOURNAL       the kill loop's journal of completed measurements (set by the test)
  AUTOTUNE_TEST_HELD_MARKS    where tests/measure/held_templates.py marks each measurement started (set by the test)
  AUTOTUNE_TEST_HELD_RELEASE  the file whose existence releases its held measurement (set by the test)

Example::

    >>> from autotune.environment import settings
    >>> settings().threads >= 1
    True
"""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FASTMATH = ("contract", "nnan", "ninf", "nsz", "arcp", "afn")  # no reassoc: see MEASURED.md

ROOT = Path(__file__).resolve().parent.parent  # the directory holding autotune/, templates/, measure/


@dataclass(frozen=True)
class Settings:
    """cache_dir: AUTOTUNE_CACHE_DIR; threads: AUTOTUNE_THREADS; target: AUTOTUNE_TARGET (a name
    autotune.target.TARGETS lists, checked where it is used)."""
    cache_dir: Path
    threads: int
    target: str = "host"


_given: list[Settings] = []  # settings a measurement worker received from its driver


def settings() -> Settings:
    """The cache directory and default thread count: the driver's in a worker, else the environment's."""
    if _given:
        return _given[0]
    cache = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "autotune")
    threads_s = os.environ.get("AUTOTUNE_THREADS", "")
    threads = int(threads_s) if threads_s.isdigit() and int(threads_s) > 0 else (os.cpu_count() or 1)
    return Settings(Path(cache), threads, os.environ.get("AUTOTUNE_TARGET", "").strip() or "host")


def trusted_kernels() -> list[str]:
    """AUTOTUNE_TRUSTED_KERNELS: the `module:function` names and SHA-256 digests of hand-written
    kernel sources a replay may compile (autotune.numba_tune.trusted_sources)."""
    return [t.strip() for t in os.environ.get("AUTOTUNE_TRUSTED_KERNELS", "").split(",") if t.strip()]


DEFAULT_CACHE_MAX_MB = 500.0


def cache_max_mb() -> float:
    """AUTOTUNE_CACHE_MAX_MB: the size in MB the kernel cache is pruned to, least recently used
    kernels first, when a tuning session starts (autotune.cache; 0: no cap). Default 500; a value
    that is no number >= 0 takes the default, with a warning."""
    text = os.environ.get("AUTOTUNE_CACHE_MAX_MB", "").strip()
    if not text:
        return DEFAULT_CACHE_MAX_MB
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value != float("inf")):
        warnings.warn(f"AUTOTUNE_CACHE_MAX_MB={text!r} is not a size in MB >= 0; using {DEFAULT_CACHE_MAX_MB:g}",
                      RuntimeWarning, stacklevel=2)
        return DEFAULT_CACHE_MAX_MB
    return value


def use_settings(s: Settings) -> None:
    """Make settings() return `s` in this process (a measurement worker: its driver's settings)."""
    _given[:] = [s]


CHECKOUT_PACKAGES = ("templates", "measure")  # folders beside autotune/ that are subpackages of it


class _CheckoutFinder:
    """Finds autotune.templates and autotune.measure in a checkout's templates/ and measure/ folders
    (an installed autotune holds them inside itself, and this finder is not installed)."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        top, _, name = fullname.partition(".")
        if top != "autotune" or name not in CHECKOUT_PACKAGES:
            return None  # first, before anything is imported here: every import in the process asks
        folder = ROOT / name
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def serve_checkout() -> None:
    """In a checkout (templates/ and measure/ beside autotune/, not inside it), make them importable
    as autotune.templates and autotune.measure. Idempotent."""
    import sys
    here = Path(__file__).resolve().parent
    if (here / "templates").exists() or not all((ROOT / n / "__init__.py").is_file() for n in CHECKOUT_PACKAGES):
        return
    if not any(isinstance(f, _CheckoutFinder) or f is _CheckoutFinder for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder)  # type: ignore[arg-type]


def child_pythonpath() -> str:
    """PYTHONPATH for a child process (measurement or Ray worker): this checkout's root first, so
    the child imports the same autotune as this process, then the current PYTHONPATH."""
    current = os.environ.get("PYTHONPATH")
    return str(ROOT) + (os.pathsep + current if current else "")


def worker_env(target: str | None = None) -> dict[str, str]:
    """The environment of a measurement worker process: this one's, Numba's variables for `target`
    (default: this process's), child_pythonpath()."""
    own = {k: v for k, v in os.environ.items() if k not in _set_here}  # the child derives its own
    return {**own, **numba_env(target), "PYTHONPATH": child_pythonpath()}


def ray_runtime_env() -> dict[str, Any]:
    """Ray's runtime_env for autotune's Ray workers: the AUTOTUNE_* and NUMBA_* variables and
    child_pythonpath(). Turns Ray's usage stats off in this process unless the user set them."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("AUTOTUNE_", "NUMBA_")) and k != "NUMBA_CPU_FEATURES"}  # each node has its own
    return {"env_vars": {**env, "PYTHONPATH": child_pythonpath()}}


_configured: dict[str, str] = {}
_set_here: set[str] = set()  # the variables configure_numba() set (not the user)


def numba_env(target: str | None = None) -> dict[str, str]:
    """The Numba variables that make generated kernels fast for `target` (default: settings().target)
    here: SLP on, -O2, and the target's vector ISA (512-bit vectors on AVX-512; a narrower ISA than
    the host's: the host's features with those above it turned off). A target this host cannot
    execute, or an unknown one, keeps the host's features (autotune.target refuses to compile for it)."""
    from autotune.isa import ISAS, executes, host_features, host_isa, numba_features, target_isa
    env = {"NUMBA_SLP_VECTORIZE": "1", "NUMBA_OPT": "2"}
    isa = target_isa(target or settings().target)
    feats = host_features()
    if not feats or isa not in ISAS or not executes(host_isa(), isa):
        return env
    if isa != host_isa():
        feats = numba_features(isa, feats)
    if isa == "avx512f":
        feats += ",-prefer-256-bit"
    if feats != host_features():
        env["NUMBA_CPU_FEATURES"] = feats
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
            if k not in os.environ:
                os.environ[k] = v
                _set_here.add(k)
    _configured.update({k: os.environ.get(k, "") for k in wanted})
    return dict(_configured)
