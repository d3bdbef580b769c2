"""`numba.njit` with a disk cache that is verified before Numba reads it, and that heals itself:
for autotune's own library functions and for generated kernels (`@healing_njit(...)`).

Verified: Numba's cache files are pickles, so each is written with a MAC under a key private to
its cache directory (`autotune-cache.key`) and checked before it is unpickled; a file that fails
is treated as missing, an unsafe key is refused, and a file the disk cannot take leaves the
function uncached, each with a one-line CacheWarning (autotune.codegen.verified_cache).

Healing. An entry that passes the check but fails to load anyway (written while the module ran
under another name: `python -m doctest autotune/codegen/invoke.py` imports it as `invoke`, and
the entry then fails with "No module named 'invoke'") is dropped (the function's index is
flushed) and the function compiled afresh, once per function and process; a second failure to
load, and any compile error, is raised as it is. Generated kernels heal the same way
(`autotune.codegen.compile.load_module`).

Example (cache=True needs a function in a file; this one's signature compiles at decoration)::

    >>> @healing_njit("int64(int64)")
    ... def twice(x):
    ...     return 2 * x
    >>> twice(21)
    42
    >>> from autotune.codegen.team import _now
    >>> type(_now._cache).__name__
    '_HealingCache'
"""
from __future__ import annotations

from typing import Any, Callable

from autotune.environment import configure_numba

configure_numba()
import numba  # noqa: E402
from numba.core.caching import FunctionCache  # noqa: E402
from numba.core.dispatcher import Dispatcher  # noqa: E402

from autotune.codegen.verified_cache import NoKey, VerifiedCacheFile, warn_not_cached  # noqa: E402


class _HealingCache(FunctionCache):
    """Numba's per-function disk cache, verified (`VerifiedCacheFile`), except that an entry which
    fails to load is dropped (the whole index, once) and reported missing, so the dispatcher
    compiles and saves a new one; and a save the disk refuses leaves the function uncached."""

    def __init__(self, py_func: Callable[..., Any]) -> None:
        super().__init__(py_func)
        self._cache_file = VerifiedCacheFile(self._cache_path, self._impl.filename_base,
                                             self._impl.locator.get_source_stamp())
        self._healed = False

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception:
            if self._healed:
                raise
            self._healed = True
            self.flush()
            return None

    def flush(self) -> None:
        try:
            super().flush()
        except NoKey:
            pass
        except OSError as e:
            warn_not_cached(self._cache_path, e)

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            super().save_overload(sig, data)
        except NoKey:
            pass
        except OSError as e:
            warn_not_cached(self._cache_path, e)


def healing_njit(*sigs: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(*sigs, **options)`, but with cache=True the disk cache is verified and heals
    (see the module docstring). Signatures given are compiled at decoration, and no others later,
    as with numba.njit. With NUMBA_DISABLE_JIT=1 the function itself, as numba.njit gives."""
    cache = options.pop("cache", False)

    def decorate(fn: Callable[..., Any]) -> Any:
        disp = numba.njit(**options)(fn)
        if not isinstance(disp, Dispatcher):  # NUMBA_DISABLE_JIT=1: the Python function itself
            return disp
        if cache:
            disp._cache = _HealingCache(fn)  # what Dispatcher.enable_caching sets: verified, healing
        if sigs:
            for sig in sigs:
                disp.compile(sig)
            disp.disable_compile()
        return disp
    return decorate
