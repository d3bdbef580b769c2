"""Helpers shared by the tests: dtype-aware comparison with NumPy."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def tolerance(dtype: str, reduction: int = 1) -> dict[str, float]:
    """rtol/atol for comparing a kernel with NumPy: grows with the reduction length."""
    scale = max(1.0, float(reduction)) ** 0.5
    if dtype == "float32":
        return {"rtol": 1e-4 * scale, "atol": 1e-4 * scale}
    return {"rtol": 1e-10 * scale, "atol": 1e-10 * scale}


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, reduction: int = 1) -> None:
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, **tolerance(dtype, reduction))


def blis_like(out):  # type: ignore[no-untyped-def]
    """A BLIS-like schedule of a matmul C = A @ B: packed A and B panels, a 4x8 accumulator on
    the stack, the packs computed at the kc and ir loops, parallel jc."""
    from autotune.schedule import Schedule
    s = Schedule(out)
    s.pack("B", 1, 8, "Bp")
    s.pack("A", 0, 4, "Ap")
    s.split("C", "j", 16, "jc", "jn")
    s.split("C", "jn", 8, "jr", "ji")
    s.split("C", "k", 8, "kc", "kk")
    s.split("C", "i", 4, "ir", "ii")
    s.reorder("C", "jc", "kc", "ir", "jr", "kk", "ii", "ji")
    s.cache_write("C", "jr")
    s.unroll("C", "ii")
    s.vectorize("C", "ji")
    s.compute_at("Bp", "C", "kc")
    s.compute_at("Ap", "C", "ir")
    s.parallel("C", "jc")
    return s


_FEATURES: dict[str, dict] = {}


def features_cache(task) -> dict:  # type: ignore[no-untyped-def]
    """The config -> features dict of a task, shared by the tests of a session: lowering a config
    is most of what a model-guided search costs, and a config's features never change (a
    ModelScorer can take it as its `cache`, as measure.experiments.surrogate.compare shares one across seeds)."""
    return _FEATURES.setdefault(task.key(), {})


def cached_features(task, cfg):  # type: ignore[no-untyped-def]
    """config_features(task, cfg), computed once per session (an invalid schedule still raises)."""
    import numpy as np

    from autotune.backends import config_features
    cache = features_cache(task)
    f = cache.get(cfg)
    if f is None or np.isnan(f).any():  # a scorer keeps NaNs for a config it could not lower
        f = cache[cfg] = config_features(task, cfg)
    return f


def process_state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, T, Z, ...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def process_alive(pid: int) -> bool:
    """Whether process pid runs: a zombie is dead, waiting for a reaper that may never come."""
    return process_state(pid) not in (None, "Z", "X")


class GuardedBuffers:
    """While active, every buffer autotune.codegen.compile allocates (outputs, intermediates,
    scratch) sits between two 4 KiB guard bands of a known byte; `check()` fails on a band a kernel
    wrote into (a write past a buffer's ends, which would otherwise corrupt the heap unseen)."""

    GUARD, BYTE = 4096, 0xA5

    def __init__(self) -> None:
        self.made: list[tuple[np.ndarray, int, int]] = []

    def _empty(self, shape, dtype):  # type: ignore[no-untyped-def]
        dt = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        raw = np.full(nbytes + 2 * self.GUARD + 64, self.BYTE, np.uint8)
        off = self.GUARD + (-(raw.ctypes.data + self.GUARD) % 64)  # cache-line aligned, as aligned_empty
        self.made.append((raw, off, nbytes))
        return raw[off:off + nbytes].view(dt).reshape(shape)

    def __enter__(self) -> "GuardedBuffers":
        import autotune.codegen.compile as compile_module
        self._module, self._saved = compile_module, compile_module.aligned_empty
        compile_module.aligned_empty = self._empty
        return self

    def __exit__(self, *exc: object) -> None:
        self._module.aligned_empty = self._saved

    def check(self) -> None:
        for raw, off, nbytes in self.made:
            below = np.nonzero(raw[:off] != self.BYTE)[0]
            above = np.nonzero(raw[off + nbytes:] != self.BYTE)[0]
            assert below.size == 0 and above.size == 0, (
                f"a kernel wrote past a {nbytes}-byte buffer: {off - below[0] if below.size else 0} bytes before "
                f"its start, {above[-1] + 1 if above.size else 0} bytes after its end")
