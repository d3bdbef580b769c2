"""Compile generated source with Numba, cached on disk by a hash of the source.

The source is written to `<cache>/kernels/k_<hash>.py` and imported; Numba's own cache
(`cache=True`) keeps the machine code beside it, so another process that builds the same
schedule loads the kernel instead of recompiling it.

Example::

    >>> import numpy as np
    >>> from autotune.ir import expr as te
    >>> from autotune.schedule import Schedule
    >>> from autotune.codegen import build
    >>> A = te.placeholder((8,), name="A")
    >>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    >>> k = build(Schedule(B))
    >>> k(np.zeros(8, np.float32)).tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from autotune.codegen.buffers import aligned_empty
from autotune.environment import configure_numba, settings
from autotune.errors import CompileError, ShapeError
from autotune.ir.stmt import Function, LoopNest
from autotune.schedule.lower import lower
from autotune.schedule.schedule import Schedule

configure_numba()
import numba  # noqa: E402  (after configure_numba on purpose)

from autotune.codegen.source import generate_source, scratch, source_hash  # noqa: E402
from autotune.codegen.team import entry_for, team_for  # noqa: E402


def _cache_key_extra() -> str:
    env = configure_numba()
    return f"numba={numba.__version__};" + ";".join(f"{k}={v}" for k, v in sorted(env.items()))


def kernel_dir(cache_dir: Path | None = None) -> Path:
    d = (cache_dir or settings().cache_dir) / "kernels"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_module(source: str, cache_dir: Path | None = None) -> tuple[Any, Path, float]:
    """Import the module for `source` (writing it once); return (module, path, seconds spent)."""
    h = source_hash(source, _cache_key_extra())
    path = kernel_dir(cache_dir) / f"k_{h}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"autotune_kernel_{h}"
    if name in sys.modules:
        return sys.modules[name], path, 0.0
    t0 = time.perf_counter()
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # before executing: Numba's cache looks the module up by name
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # numba typing/lowering errors arrive here
        del sys.modules[name]
        raise CompileError(f"Numba could not compile the kernel in {path}: {type(e).__name__}: "
                           f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
    return mod, path, time.perf_counter() - t0


@dataclass
class Kernel:
    """A compiled kernel: call it on NumPy arrays to get the output.

    `bind(*inputs)` returns a zero-argument callable that reruns the kernel into preallocated
    buffers (what the timer measures).
    """
    nest: LoopNest
    source: str
    path: Path
    main: Callable[..., None]
    prologue: Callable[..., None] | None
    compile_seconds: float
    threads: int = 1

    @property
    def input_shapes(self) -> list[tuple[tuple[int, ...], str]]:
        return [(t.shape, t.dtype) for t in self.nest.inputs]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.nest.output.shape

    def _check(self, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        ins = self.nest.inputs
        if len(arrays) != len(ins):
            names = ", ".join(t.name for t in ins)
            raise ShapeError(f"kernel takes {len(ins)} arrays ({names}), got {len(arrays)}")
        out = []
        for a, t in zip(arrays, ins):
            a = np.asarray(a)
            if a.shape != t.shape:
                raise ShapeError(f"input {t.name!r} must have shape {t.shape}, got {a.shape}")
            if a.dtype != np.dtype(t.dtype):
                raise ShapeError(f"input {t.name!r} must have dtype {t.dtype}, got {a.dtype}")
            out.append(np.ascontiguousarray(a))
        return out

    def bind(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> Callable[[], np.ndarray]:
        ins = self._check(arrays)
        o = self.nest.output
        if out is None:
            result = aligned_empty(o.shape, o.dtype)
        elif out.shape != o.shape or out.dtype != np.dtype(o.dtype) or not out.flags.c_contiguous:
            raise ShapeError(f"out must be a C-contiguous {o.dtype} array of shape {o.shape}, "
                             f"got {out.dtype} {out.shape}{'' if out.flags.c_contiguous else ' (not contiguous)'}")
        else:
            result = out
        inter = [aligned_empty(t.shape, t.dtype) for t in self.nest.intermediates]
        args = tuple(ins) + (result,) + tuple(inter)
        main, prologue = self.main, self.prologue

        def with_scratch(fn: Function) -> tuple[np.ndarray, ...]:
            return args + tuple(aligned_empty(t.shape, t.dtype) for t in scratch(fn))
        pro_args = with_scratch(self.nest.prologue) if self.nest.prologue is not None else ()
        ext = self.nest.main.parallel_extent
        if ext is None:
            main_args = with_scratch(self.nest.main)

            def run() -> np.ndarray:
                main(*main_args)
                return result
            return run
        nthreads = max(1, min(self.threads, ext))
        grain = max(1, ext // (8 * nthreads))  # about 8 chunks a thread, handed out as threads free up
        per_thread = [with_scratch(self.nest.main) for _ in range(nthreads)]  # each thread its own scratch

        def run_parallel() -> np.ndarray:
            if prologue is not None:
                prologue(*pro_args)
            if nthreads == 1:
                main(*per_thread[0], 0, ext)
            else:
                team_for(nthreads).run(main, per_thread, ext, grain)  # looked up per call: a forked child gets its own
            return result
        return run_parallel

    def prepare(self) -> Callable[[tuple[np.ndarray, ...], np.ndarray], np.ndarray]:
        """A reusable call `run(inputs, out)` with the intermediates and scratch allocated once: the
        fast path of a tuned op. Unchecked: inputs must be C-contiguous arrays of the declared
        shapes and dtypes, out one of the output's. Not for two threads at once (shared scratch)."""
        inter = tuple(aligned_empty(t.shape, t.dtype) for t in self.nest.intermediates)
        main, prologue = self.main, self.prologue

        def scratch_of(fn: Function) -> tuple[np.ndarray, ...]:
            return tuple(aligned_empty(t.shape, t.dtype) for t in scratch(fn))
        ext = self.nest.main.parallel_extent
        if ext is None:
            own = scratch_of(self.nest.main)

            def run(ins: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray:
                main(*ins, out, *inter, *own)
                return out
            return run
        pro = scratch_of(self.nest.prologue) if self.nest.prologue is not None else ()
        nthreads = max(1, min(self.threads, ext))
        grain = max(1, ext // (8 * nthreads))
        per_thread = [scratch_of(self.nest.main) for _ in range(nthreads)]

        def run_parallel(ins: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray:
            head = ins + (out,) + inter
            if prologue is not None:
                prologue(*head, *pro)
            if nthreads == 1:
                main(*head, *per_thread[0], 0, ext)
            else:
                team_for(nthreads).run(main, [head + s for s in per_thread], ext, grain)
            return out
        return run_parallel

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self.bind(*arrays, out=out)()


def build(sched: Schedule, *, threads: int | None = None, reassoc: bool = False,
          cache_dir: Path | None = None) -> Kernel:
    """Lower, generate, compile (or load from the disk cache) and wrap a schedule."""
    nest = lower(sched)
    source = generate_source(sched, nest, reassoc=reassoc)
    mod, path, secs = load_module(source, cache_dir)
    threads = threads if threads is not None else settings().threads
    if threads > 1 and (nest.main.parallel_extent or 1) > 1:
        t0 = time.perf_counter()
        entry_for(mod.kernel)  # compiled here, so measuring does not pay for it
        secs += time.perf_counter() - t0
    return Kernel(nest, source, path, mod.kernel, getattr(mod, "prologue", None), secs, threads)
