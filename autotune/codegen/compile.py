"""Compile generated source with Numba, cached on disk by a hash of the source.

The source is written to `<cache>/kernels/k_<hash>.py` and run as a module; Numba's own cache
keeps the machine code beside it, so another process that builds the same schedule loads the
kernel instead of recompiling it. The cache is verified, not trusted: what runs is always the
source generated for the schedule (an entry holding other bytes is rewritten), and the kernels are
compiled by `healing_njit` (autotune.codegen.healing), whose Numba cache files are loaded only
when their MAC under the cache directory's private key checks, before anything in them is
unpickled; files that fail are compiled afresh and rewritten, and files that fail to load anyway
are dropped and rebuilt. A kernel source that cannot be written is a CacheError (the
environment's fault); Numba's cache files that cannot be written leave the kernel uncached, with
a warning, and it runs all the same.

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

import math
import contextlib
import os
import stat
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from autotune.codegen.buffers import aligned_empty, check_disjoint
from autotune.environment import configure_numba, settings
from autotune.errors import CacheError, CompileError, ShapeError
from autotune.ir.stmt import Function, LoopNest
from autotune.schedule.lower import lower
from autotune.schedule.schedule import Schedule
from autotune.target import check_executable

configure_numba()
import numba  # noqa: E402  (after configure_numba on purpose)
from numba.core.caching import UserProvidedCacheLocator  # noqa: E402

from autotune.codegen.runtime import RUNTIME_VERSION  # noqa: E402
from autotune.codegen.source import fastmath_flags, generate_sources, scratch, source_hash  # noqa: E402
from autotune.codegen.finite import parallel_finite_check  # noqa: E402
from autotune.codegen.invoke import OVERLAP, RAN, STRIDED, invoker_for  # noqa: E402
from autotune.codegen.team import entry_for, team_for  # noqa: E402


Run = Callable[[tuple[np.ndarray, ...], np.ndarray], "np.ndarray | None"]  # Kernel.prepare's call
Entry = tuple[Callable[..., Any], tuple[np.ndarray, ...]]  # a compiled entry and its trailing arrays (Kernel.prepared)


def _cache_key_extra() -> str:
    env = configure_numba()
    return f"numba={numba.__version__};runtime={RUNTIME_VERSION};" + ";".join(f"{k}={v}" for k, v in sorted(env.items()))


def _unwritable(root: Path, e: OSError) -> CacheError:
    return CacheError(f"the compile cache {root} is not writable ({e.strerror or type(e).__name__}): "
                      "set AUTOTUNE_CACHE_DIR to a writable directory")


def kernel_dir(cache_dir: Path | None = None) -> Path:
    """`<cache>/kernels`, made if missing; a cache that cannot be made is a CacheError naming it."""
    root = cache_dir or settings().cache_dir
    d = root / "kernels"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _unwritable(root, e) from None
    return d


def _holds(path: Path, expected: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `expected` (read no further than that)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a symlink, FIFO or directory is never an entry
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return f.read(len(expected) + 1) == expected


def _write_entry(path: Path, expected: bytes, root: Path) -> None:
    """Write `expected` to `path` atomically: a temporary file beside it, then os.replace."""
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(expected)
        os.replace(tmp, path)
        tmp = None
    except IsADirectoryError:
        raise CacheError(f"the compile cache entry {path} is a directory: remove it, or set AUTOTUNE_CACHE_DIR "
                         "to another directory") from None
    except OSError as e:
        raise _unwritable(root, e) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _numba_cache_files(path: Path) -> list[Path]:
    """Numba's cache files (index .nbi, data .nbc) of the kernels defined in the module at `path`."""
    dirs = [path.parent / "__pycache__"]
    if numba.config.CACHE_DIR:
        sub = UserProvidedCacheLocator.get_suitable_cache_subpath(str(path))
        dirs.append(Path(numba.config.CACHE_DIR) / sub)
    return [f for d in dirs for f in d.glob(f"{path.stem}.*") if f.suffix in (".nbi", ".nbc")]


def _execute(name: str, source: str, path: Path) -> Any:
    """Run the generated source (never the file's bytes) as module `name`, backed by `path`."""
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    code = compile(source, str(path), "exec")
    sys.modules[name] = mod  # before executing: Numba's cache looks the module up by name
    try:
        exec(code, mod.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def load_module(source: str, cache_dir: Path | None = None) -> tuple[Any, Path]:
    """Import the module for `source`; return (module, path).

    The cache is verified, not trusted: the entry `k_<hash>.py` is rewritten unless it holds
    exactly `source`, and the module runs `source` itself, so no bytes planted in the cache run;
    Numba's cache files are verified before they are read (autotune.codegen.healing), and those
    that fail to load all the same are dropped and the kernel compiled once more. CacheError when
    the entry cannot be written.
    """
    h = source_hash(source, _cache_key_extra())
    name = f"autotune_kernel_{h}"
    root = cache_dir or settings().cache_dir
    path = kernel_dir(cache_dir) / f"k_{h}.py"
    expected = source.encode()
    if not _holds(path, expected):
        _write_entry(path, expected, root)
    if name in sys.modules:  # built from this same source earlier in this process
        return sys.modules[name], path
    try:
        try:
            mod = _execute(name, source, path)
        except Exception:
            stale = _numba_cache_files(path)
            if not stale:
                raise
            for f in stale:  # corrupt or foreign: drop them and compile afresh, once
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            mod = _execute(name, source, path)
    except Exception as e:  # numba typing/lowering errors arrive here
        raise CompileError(f"Numba could not compile the kernel in {path}: {type(e).__name__}: "
                           f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
    return mod, path


@dataclass
class Kernel:
    """A compiled kernel: call it on NumPy arrays to get the output.

    `bind(*inputs)` returns a zero-argument callable that reruns the kernel into preallocated
    buffers (what the timer measures). compile_seconds: CPU seconds `build` spent (see there).
    views: the caller's shapes of the inputs and the output (in that order) when the definition
    computes on other shapes of the same C-ordered elements (a flat view of an image); () when
    they are the definition's own. main and prologue are the compiled Numba functions, which have
    no Python wrappers: Python calls them through `autotune.codegen.invoke`. checks_output: compiled
    without nnan and ninf, its output holds NaN or Inf wherever a value it read does
    (autotune.ir.nonfinite), so a checked call looks at its output after the run, not at its inputs.
    """
    nest: LoopNest
    source: str
    path: Path
    main: Any
    prologue: Any | None
    compile_seconds: float
    threads: int = 1
    views: tuple[tuple[int, ...], ...] = ()
    checks_output: bool = False

    def __post_init__(self) -> None:
        tensors = [*self.nest.inputs, self.nest.output]
        if self.views and (len(self.views) != len(tensors) or any(
                math.prod(v) != math.prod(t.shape) for v, t in zip(self.views, tensors))):
            raise ShapeError(f"views {self.views} do not hold the elements of the kernel's tensors "
                             f"{[t.shape for t in tensors]}")

    @property
    def input_shapes(self) -> list[tuple[tuple[int, ...], str]]:
        shapes = self.views[:-1] if self.views else [t.shape for t in self.nest.inputs]
        return [(tuple(sh), t.dtype) for sh, t in zip(shapes, self.nest.inputs)]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self.views[-1]) if self.views else self.nest.output.shape

    def _check(self, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        ins = self.nest.inputs
        if len(arrays) != len(ins):
            names = ", ".join(t.name for t in ins)
            raise ShapeError(f"kernel takes {len(ins)} arrays ({names}), got {len(arrays)}")
        out = []
        for a, t, (shape, _) in zip(arrays, ins, self.input_shapes):
            a = np.asarray(a)
            if a.shape != shape:
                raise ShapeError(f"input {t.name!r} must have shape {shape}, got {a.shape}")
            if a.dtype != np.dtype(t.dtype):
                raise ShapeError(f"input {t.name!r} must have dtype {t.dtype}, got {a.dtype}")
            out.append(np.ascontiguousarray(a).reshape(t.shape))
        return out

    def _python_calls(self) -> tuple[Callable[..., None], Callable[..., None] | None]:
        """The kernel and the prologue as Python callables (they have no Python wrappers)."""
        return invoker_for(self.main), invoker_for(self.prologue) if self.prologue is not None else None

    def bind(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> Callable[[], np.ndarray]:
        ins = self._check(arrays)
        o, oshape = self.nest.output, self.output_shape
        if out is None:
            result = aligned_empty(oshape, o.dtype)
        elif out.shape != oshape or out.dtype != np.dtype(o.dtype) or not out.flags.c_contiguous \
                or not out.flags.writeable:
            why = " (not contiguous)" if not out.flags.c_contiguous else " (read-only)" if not out.flags.writeable else ""
            raise ShapeError(f"out must be a writable C-contiguous {o.dtype} array of shape {oshape}, "
                             f"got {out.dtype} {out.shape}{why}")
        else:
            result = out
            check_disjoint(ins, out)
        inter = [aligned_empty(t.shape, t.dtype) for t in self.nest.intermediates]
        args = tuple(ins) + (result.reshape(o.shape),) + tuple(inter)
        main, prologue = self._python_calls()

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
                team_for(nthreads).run(self.main, per_thread, ext, grain)  # looked up per call: a forked child gets its own
            return result
        return run_parallel

    def prepare(self, *, check_finite: bool = False) -> Run:
        """A reusable call `run(inputs, out)` with the intermediates and scratch allocated once: the
        fast path of a tuned op. Unchecked: inputs must be C-contiguous arrays of the declared
        shapes and dtypes, out one of the output's. Not for two threads at once (shared scratch).
        check_finite: `run` returns None when an input holds NaN or ±Inf: without running the kernel,
        or, where it checks_output, after it ran and its output held NaN or ±Inf (an input's or an
        overflow). Checked in the same compiled call as the kernel's where it runs on one thread."""
        return self.prepared(check_finite=check_finite)[0]

    def prepared(self, *, check_finite: bool = False) -> tuple[Run, Entry | None]:
        """prepare()'s `run`, and the compiled entry `(call, rest)` it calls, for a caller that calls
        it from its own frame (no Python frame in between: a tuned op's call), where the kernel runs
        on one thread and takes the arrays as they are (no views); None otherwise. `rest` are run's
        own intermediates and scratch. `call(ins, (out,) + rest)` returns autotune.codegen.invoke's
        RAN, or, running nothing, OVERLAP when out shares memory with an input, STRIDED when an
        input is not C-contiguous and (checked) NONFINITE when an input holds NaN or ±Inf (when
        the output does, after the run, where the kernel checks_output). Inputs (their dtype and
        dimensions) and out otherwise unchecked, as for run."""
        shapes = [t.shape for t in self.nest.inputs] if self.views else []  # the caller's arrays, reshaped
        oshape = self.nest.output.shape

        def scratch_of(fn: Function) -> tuple[np.ndarray, ...]:
            return tuple(aligned_empty(t.shape, t.dtype) for t in scratch(fn))
        inter = tuple(aligned_empty(t.shape, t.dtype) for t in self.nest.intermediates)
        main, prologue = self._python_calls()
        ext = self.nest.main.parallel_extent
        if ext is None:
            rest = (*inter, *scratch_of(self.nest.main))  # after the inputs and the output
            n = len(self.nest.inputs)
            call = main.apart(n) if not check_finite else main.checked_output(n) if self.checks_output \
                else main.checked(n)

            def run(ins: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray | None:
                if shapes:
                    did = call(tuple([a.reshape(sh) for a, sh in zip(ins, shapes)]), (out.reshape(oshape),) + rest)
                else:
                    did = call(ins, (out,) + rest)
                if did == OVERLAP:
                    check_disjoint(ins, out)  # raises the ShapeError
                if did == STRIDED:
                    return run(tuple(np.ascontiguousarray(a) for a in ins), out)
                return out if did == RAN else None
            return run, None if shapes else (call, rest)
        pro = scratch_of(self.nest.prologue) if self.nest.prologue is not None else ()
        nthreads = max(1, min(self.threads, ext))
        grain = max(1, ext // (8 * nthreads))
        per_thread = [scratch_of(self.nest.main) for _ in range(nthreads)]

        before: list[tuple[int, Callable[[np.ndarray], bool]]] = []  # the inputs' checks, before the run
        after = None  # the output's, after it
        if check_finite and self.checks_output:
            after = parallel_finite_check(np.dtype(self.nest.output.dtype), nthreads)
        elif check_finite:
            before = [(i, c) for i, t in enumerate(self.nest.inputs)
                      if (c := parallel_finite_check(np.dtype(t.dtype), nthreads)) is not None]

        def run_parallel(ins: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray | None:
            if before and not all(c(ins[i]) for i, c in before):
                return None
            if shapes:
                head = tuple(a.reshape(sh) for a, sh in zip(ins, shapes)) + (out.reshape(oshape),) + inter
            else:
                head = ins + (out,) + inter
            if prologue is not None:
                prologue(*head, *pro)
            if nthreads == 1:
                main(*head, *per_thread[0], 0, ext)
            else:
                team_for(nthreads).run(self.main, [head + s for s in per_thread], ext, grain)
            if after is not None and not after(out):
                return None
            return out
        return run_parallel, None

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self.bind(*arrays, out=out)()


def build(sched: Schedule, *, threads: int | None = None, reassoc: bool = False, noalias: bool = False,
          cache_dir: Path | None = None, views: Sequence[tuple[int, ...]] = ()) -> Kernel:
    """Lower, generate, compile (or load from the disk cache) and wrap a schedule. The kernel's
    compile_seconds is the CPU time this thread spent on all of it: a compile worker paused while
    another kernel is timed, or waiting for a busy core, is not charged. A target in force that this
    machine cannot execute (AUTOTUNE_TARGET) is an AutotuneError: its code is never compiled here."""
    check_executable()
    t0 = time.thread_time()
    nest = lower(sched)
    source, modules = generate_sources(sched, nest, reassoc=reassoc, noalias=noalias)
    checks_output = "nnan" not in fastmath_flags(nest, reassoc)
    loaded = {name: load_module(text, cache_dir) for name, text in modules.items()}
    mod, path = loaded["kernel"]
    prologue = loaded["prologue"][0].prologue if "prologue" in loaded else None
    threads = threads if threads is not None else settings().threads
    for fn in (mod.kernel, prologue):  # compiled here (once per signature), so measuring does not pay for it
        if fn is not None:
            invoker_for(fn)
    if threads > 1 and (nest.main.parallel_extent or 1) > 1:
        entry_for(mod.kernel)
    caller = tuple(map(tuple, views))
    own = tuple(t.shape for t in (*nest.inputs, nest.output))
    return Kernel(nest, source, path, mod.kernel, prologue, time.thread_time() - t0, threads,
                  caller if caller != own else (), checks_output)
