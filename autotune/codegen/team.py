"""A team of worker threads that starts a parallel kernel call in about a microsecond.

A thread-pool task took ~90 us to start here: on a virtual machine whose idle vCPUs halt, waking a
sleeping thread crosses the hypervisor. That is 8% of a 1 ms conv2d. Like OpenMP's threads, the
team's workers spin for a while (`spin_us`) after each job, so back-to-back calls (the timer's
repeats, a network's layers) start at once; an idle worker then blocks on an Event.

Each thread has a contiguous share of the parallel loop's iterations and takes them in chunks
from its front; a thread done with its share takes chunks from the front of the others' shares,
so a thread slowed by a neighbour on its core (common on a shared machine) does fewer. Shares, not
chunks in turn: two threads streaming from distant parts of memory read it faster than two
interleaving chunks of the same region (layernorm over a 16 MiB input, 2 threads: 206 us against
256 us with its 16 chunks handed out in turn; measure/experiments/RESULTS.md).

Neither side takes the GIL on the critical path. The caller posts the job, runs its own share and
waits for the workers inside one nogil Numba call; each worker runs its share, reports done and
spins for the next job inside another. Both call the kernel through a first-class function
pointer, so these small functions compile once per kernel signature (and are cached on disk), not
once per kernel, and never recompile the kernel's body.

Example::

    >>> import numba, numpy as np
    >>> @numba.njit("void(float64[::1], int64, int64)", nogil=True)
    ... def fill(out, lo, hi):
    ...     for i in range(lo, hi):
    ...         out[i] = i
    >>> out = np.zeros(4)
    >>> team_for(2).run(fill, [(out,), (out,)], 4)
    >>> out.tolist()
    [0.0, 1.0, 2.0, 3.0]
"""
from __future__ import annotations

import atexit
import functools
import os
import platform
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from autotune.environment import configure_numba

configure_numba()
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.experimental.function_type import _get_wrapper_address  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

from autotune.codegen.healing import healing_njit  # noqa: E402

SPIN_US = 2000.0  # how long an idle worker spins before it blocks
_STRIDE = 24  # int64 slots per worker; each flag on its own 64-byte line
_LINE = 8  # int64 slots per chunk counter (one a thread, after the workers' slots): a line each
_GEN, _SAME, _DONE, _SLEEP = 0, 1, 8, 16
_STOP = -1


def _element(context, builder, sig, args):  # type: ignore[no-untyped-def]
    """The address of arr[i] for an intrinsic whose first two arguments are (arr, i)."""
    a = context.make_array(sig.args[0])(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, sig.args[0], a, [args[1]])


@intrinsic
def _load(typingctx, arr, i):  # type: ignore[no-untyped-def]
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return builder.load_atomic(_element(context, builder, sig, args), "seq_cst", 8)
    return types.int64(arr, i), codegen


@intrinsic
def _store(typingctx, arr, i, value):  # type: ignore[no-untyped-def]
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        builder.store_atomic(args[2], _element(context, builder, sig, args), "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(arr, i, value), codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@intrinsic
def _relax(typingctx):  # type: ignore[no-untyped-def]
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def _ticks(typingctx):  # type: ignore[no-untyped-def]
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


_CTRL = "int64[::1]"


@healing_njit(f"int64({_CTRL}, int64, int64, int64)", nogil=True, cache=True)
def _await_job(ctrl, w, last, spin):  # type: ignore[no-untyped-def]
    """Spin until worker w's generation moves past `last` (return it) or `spin` ticks pass."""
    t0 = _ticks()
    while True:
        g = _load(ctrl, w * _STRIDE + _GEN)
        if g != last or _ticks() - t0 > spin:
            return g
        _relax()


@healing_njit(f"boolean({_CTRL}, int64, int64)", nogil=True, cache=True)
def _try_sleep(ctrl, w, last):  # type: ignore[no-untyped-def]
    """Announce that worker w sleeps; False (and no sleep) if a job arrived meanwhile."""
    _store(ctrl, w * _STRIDE + _SLEEP, 1)
    if _load(ctrl, w * _STRIDE + _GEN) != last:
        _store(ctrl, w * _STRIDE + _SLEEP, 0)
        return False
    return True


@healing_njit(f"void({_CTRL}, int64, int64)", nogil=True, cache=True)
def _set(ctrl, i, value):  # type: ignore[no-untyped-def]
    _store(ctrl, i, value)


@intrinsic
def _fetch_add(typingctx, arr, i, value):  # type: ignore[no-untyped-def]
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return builder.atomic_rmw("add", _element(context, builder, sig, args), args[2], "seq_cst")
    return types.int64(arr, i, value), codegen


@healing_njit(nogil=True, cache=True)
def _share(fn, args, ext, grain, ctrl, nxt, me, nthreads):  # type: ignore[no-untyped-def]
    """Run chunks of up to `grain` iterations of [0, ext): those of thread me's own share first
    (share b is [b * ext // nthreads, (b + 1) * ext // nthreads), its next chunk at counter b),
    then whatever is left of the others' shares."""
    for k in range(nthreads):
        b = (me + k) % nthreads
        hi = (b + 1) * ext // nthreads
        while True:
            i = _fetch_add(ctrl, nxt + b * _LINE, grain)
            if i >= hi:
                break
            fn(*args, i, min(i + grain, hi))


_WORK, _POST_RUN_WAIT, _RUN_WAIT, _WAIT = 0, 1, 2, 3


@healing_njit(nogil=True, cache=True)
def _call(fn, args, ext, grain, ctrl, w, g, nworkers, mode, spin):  # type: ignore[no-untyped-def]
    """One side of a team call over iterations [0, ext), `grain` at a time from each thread's
    own share, then from the others' (`_share`: a thread slowed by a neighbour on its core does
    fewer).

    mode _WORK (worker w): take chunks until none are left, report generation g done, spin for the
    next job. A job the caller marked as the same as the last (same kernel and arrays) runs at
    once; otherwise return its generation, or the last one done if none came within `spin` ticks.
    mode _POST_RUN_WAIT (caller): reset the counters and post g to every worker; if any sleeps,
    return a bitmask of the sleepers without running anything (wake them, then call again with
    _RUN_WAIT). Otherwise take chunks and wait like _WAIT.
    mode _WAIT: wait for every worker to finish g; 0 when all have, -1 after `spin` ticks.
    """
    nxt = nworkers * _STRIDE
    if mode == _WORK:
        while True:
            _share(fn, args, ext, grain, ctrl, nxt, w + 1, nworkers + 1)
            _store(ctrl, w * _STRIDE + _DONE, g)
            new = _await_job(ctrl, w, g, spin)
            if new == g:
                return g
            if new == _STOP or _load(ctrl, w * _STRIDE + _SAME) == 0:
                return new
            g = new
    if mode == _POST_RUN_WAIT:
        for b in range(nworkers + 1):
            _store(ctrl, nxt + b * _LINE, b * ext // (nworkers + 1))
        for v in range(nworkers):
            _store(ctrl, v * _STRIDE + _GEN, g)
        sleepers = 0
        for v in range(nworkers):
            if _load(ctrl, v * _STRIDE + _SLEEP) != 0:
                sleepers |= 1 << v
        if sleepers != 0:
            return sleepers
    if mode != _WAIT:
        _share(fn, args, ext, grain, ctrl, nxt, 0, nworkers + 1)
    t0 = _ticks()
    for v in range(nworkers):
        while _load(ctrl, v * _STRIDE + _DONE) != g:
            if _ticks() - t0 > spin:
                return -1
            _relax()
    return 0


class _Entry:
    """A kernel as a first-class function for `_call`: its compiled overload and the address of
    the kernel (looked up once: Numba's own lookup costs ~40 us a call)."""

    def __init__(self, kernel: Any) -> None:
        (ksig,) = kernel.nopython_signatures
        self.address = _get_wrapper_address(kernel, ksig)
        sig = (types.FunctionType(ksig), types.Tuple(ksig.args[:-2]), types.int64, types.int64,
               types.int64[::1], types.int64, types.int64, types.int64, types.int64, types.int64)
        self.call: Callable[..., int] = _call.compile(sig)

    def __wrapper_address__(self) -> int:
        return self.address


_entries: dict[Any, _Entry] = {}


def entry_for(kernel: Any) -> _Entry:
    """Compile (or load from Numba's disk cache) what running `kernel` on a team needs. `kernel` is
    a Numba function with one signature whose last two arguments are the range (lo, hi)."""
    e = _entries.get(kernel)
    if e is None:
        e = _entries[kernel] = _Entry(kernel)
    return e


@healing_njit("int64()", nogil=True, cache=True)
def _now():  # type: ignore[no-untyped-def]
    return _ticks()


@functools.cache
def ticks_per_us() -> float:
    """The cycle counter's rate, measured once over ~2 ms."""
    t0, c0 = time.perf_counter(), _now()
    while time.perf_counter() - t0 < 0.002:
        pass
    return max(1.0, (_now() - c0) / ((time.perf_counter() - t0) * 1e6))


class Team:
    """The calling thread plus `workers` spinning worker threads; `run` splits one call over them."""

    def __init__(self, workers: int, spin_us: float = SPIN_US) -> None:
        if workers < 1:
            raise ValueError(f"a team needs at least one worker thread, got {workers}")
        self.workers = workers
        self._spin = int(spin_us * ticks_per_us())
        self._ctrl = np.zeros(_STRIDE * workers + _LINE * (workers + 1), np.int64)  # then the chunk counters
        self._jobs: list[tuple[Any, ...] | None] = [None] * workers
        self._errors: list[BaseException | None] = [None] * workers
        self._wake = [threading.Event() for _ in range(workers)]
        self._lock = threading.Lock()
        self._gen = 0
        self._threads = [threading.Thread(target=self._work, args=(w,), daemon=True, name=f"autotune-team-{w}")
                         for w in range(workers)]
        for t in self._threads:
            t.start()

    def run(self, kernel: Any, args: Sequence[tuple], ext: int, grain: int = 1) -> None:
        """Run kernel(*args[t], lo, hi) over chunks [lo, hi) of up to `grain` iterations covering
        [0, ext), each chunk once: thread t (0: this one) the chunks of its contiguous share of
        [0, ext) first, then what is left of the others'; return when all are done. args[t] is
        thread t's own (its scratch buffers differ). Pass the same tuples again to repeat a call:
        the workers then rerun it without returning to Python."""
        if len(args) != self.workers + 1:
            raise ValueError(f"a team of {self.workers} workers needs {self.workers + 1} argument tuples, got {len(args)}")
        if ext < 0 or grain < 1:
            raise ValueError(f"iterations must be >= 0 and grain >= 1, got ext={ext}, grain={grain}")
        e = entry_for(kernel)
        ctrl, n, spin = self._ctrl, self.workers, self._spin
        with self._lock:
            self._gen += 1
            g = self._gen
            for w in range(n):
                job = (e, args[w + 1], ext, grain)
                old = self._jobs[w]
                ctrl[w * _STRIDE + _SAME] = old is not None and old[0] is e and old[1] is job[1] and old[2:] == job[2:]
                self._jobs[w] = job
            mine = args[0]
            r = e.call(e, mine, ext, grain, ctrl, -1, g, n, _POST_RUN_WAIT, spin)
            if r > 0:
                for w in range(n):
                    if r >> w & 1:
                        self._wake[w].set()
                r = e.call(e, mine, ext, grain, ctrl, -1, g, n, _RUN_WAIT, spin)
            while r < 0:
                dead = [t.name for t in self._threads if not t.is_alive()]
                if dead:
                    raise RuntimeError(f"team worker threads {dead} died; the kernel call did not finish")
                os.sched_yield()
                r = e.call(e, mine, ext, grain, ctrl, -1, g, n, _WAIT, spin)
            errors = [x for x in self._errors if x is not None]
            self._errors = [None] * n
        if errors:
            raise errors[0]

    def _work(self, w: int) -> None:
        ctrl, spin = self._ctrl, self._spin
        last = g = 0
        while True:
            while g != last:
                if g == _STOP:
                    return
                job = self._jobs[w]
                assert job is not None
                e, args, ext, grain = job
                try:
                    nxt = e.call(e, args, ext, grain, ctrl, w, g, self.workers, _WORK, spin)
                except BaseException as exc:  # reported to the caller, which raises it
                    self._errors[w] = exc
                    _set(ctrl, w * _STRIDE + _DONE, g)
                    nxt = g
                last, g = int(ctrl[w * _STRIDE + _DONE]), nxt  # repeats ran in the call: last done is in ctrl
            if _try_sleep(ctrl, w, last):
                self._wake[w].wait()
                self._wake[w].clear()
                _set(ctrl, w * _STRIDE + _SLEEP, 0)
            g = _await_job(ctrl, w, last, spin)

    def stop(self) -> None:
        """Stop the worker threads (the team is unusable afterwards)."""
        for w in range(self.workers):
            _set(self._ctrl, w * _STRIDE + _GEN, _STOP)
            self._wake[w].set()
        for t in self._threads:
            t.join(timeout=1.0)


_teams: dict[int, Team] = {}
_teams_lock = threading.Lock()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def team_for(threads: int) -> Team:
    """The process's team for `threads` threads (the caller plus threads - 1 workers). With more
    threads than cores the workers do not spin: a spinning thread would hold a core another
    thread of the same call needs."""
    with _teams_lock:
        team = _teams.get(threads)
        if team is None:
            team = _teams[threads] = Team(threads - 1, SPIN_US if threads <= _cores() else 0.0)
        return team


def _stop_all() -> None:
    with _teams_lock:
        for team in _teams.values():
            team.stop()
        _teams.clear()


def _forget_after_fork() -> None:  # a forked child has none of the parent's threads
    global _teams_lock
    _teams.clear()
    _teams_lock = threading.Lock()


atexit.register(_stop_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
