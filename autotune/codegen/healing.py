"""`numba.njit` for autotune's own library functions, with a disk cache that heals itself.

Numba keeps the cache of a `cache=True` function beside its source (`__pycache__`), keyed by the
file, and an entry records the name of the module that wrote it. An entry written while the module
ran under another name (`python -m doctest autotune/codegen/invoke.py` imports it as `invoke`) then
fails to load under the package name ("No module named 'invoke'"), as does a corrupt one, and
Numba raises instead of compiling. Here such an entry is dropped (the function's cache index is
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


class _HealingCache(FunctionCache):
    """Numba's per-function disk cache, except that an entry which fails to load is dropped (the
    whole index, once) and reported missing, so the dispatcher compiles and saves a new one."""

    def __init__(self, py_func: Callable[..., Any]) -> None:
        super().__init__(py_func)
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


def healing_njit(*sigs: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(*sigs, **options)`, but with cache=True a cache entry that fails to load is
    dropped and the function compiled afresh (see the module docstring). Signatures given are
    compiled at decoration, and no others later, as with numba.njit."""
    cache = options.pop("cache", False)

    def decorate(fn: Callable[..., Any]) -> Any:
        disp = numba.njit(**options)(fn)
        if not isinstance(disp, Dispatcher):  # NUMBA_DISABLE_JIT=1: the Python function itself
            return disp
        if cache:
            disp._cache = _HealingCache(fn)  # what Dispatcher.enable_caching sets, healing
        if sigs:
            for sig in sigs:
                disp.compile(sig)
            disp.disable_compile()
        return disp
    return decorate
