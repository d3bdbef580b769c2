"""This machine's limits, measured once and kept in the cache: the peak floating-point rate (a
register-resident FMA loop per thread, compiled like autotune's kernels) and the read bandwidth
of memory and of the caches (every thread summing its share of an array far larger than the
last-level cache, of one that fits the L3, of one that fits the threads' L2s; the best of 1, 4
and 8 streams a thread, since one stream leaves memory idle on some machines). A kernel's share of
the machine is its speed over the roofline at its arithmetic intensity: min(peak, intensity x
bandwidth), the intensity being its flops over the bytes it must move at least (every input read
once, the output written once), the bandwidth that of the smallest level its bytes fit (a kernel
timed call after call keeps what fits in the cache). Working sets past the L3's share and short
of memory are probed too, at 1, 2 and 4 times the L3, and a size between two probed ones takes the
rate interpolated in log size: a kernel timed over and over on 32 MiB finds part of it in a 32 MiB
L3 still, and measured against the rate from memory it seemed to run at 130-200% of the limit.
A kernel's writes move at the rate of a copy probed at the same sizes (plain or non-temporal
stores): each written byte with one read byte at the copy rate, the other reads at the read rate
(softmax, writing what it reads, is held to a copy's rate). `bench` probes the read and copy rates
of a memory-bound task's working set again between its timings (`Peak.probed_at`): on a shared
machine the memory rate moves by a third within minutes.

    >>> from autotune.measure.peak import Peak
    >>> p = Peak(cpu="example", isa="avx2", dtype="float32", threads=2, gflops=200.0, read_gbps=20.0,
    ...          l3_gbps=60.0, l3_bytes=32 << 20, l2_gbps=120.0, l2_bytes=1 << 20)
    >>> p.attainable(1.0), p.attainable(1.0, nbytes=8 << 20), p.attainable(100.0), round(p.share(100.0, 100.0), 2)
    (20.0, 60.0, 200.0, 0.5)

The probe takes a few seconds; `machine_peak` measures once per (CPU model, ISA, dtype, threads)
and reads it back from `$AUTOTUNE_CACHE_DIR/peak.json` afterwards (`autotune peak` prints it,
`autotune peak --again` measures anew). Timings are the best of several runs: a peak is what the machine can do, not what it did
while busy.
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from autotune.environment import settings
from autotune.errors import AutotuneError
from autotune.target import cache_sizes, cpu_model, current
from autotune.timing_lock import TimingLock, lock_path

SCHEMA = 5  # 4: the read rates are the best of 1, 4 and 8 streams a thread; 5: copy rates
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Peak:
    """gflops: the FMA peak of `threads` threads in `dtype`; read_gbps: their read rate from memory;
    l3_gbps / l2_gbps: from the L3 / their L2s, for working sets of up to l3_bytes / l2_bytes;
    beyond: (bytes, GB/s) of working sets past l3_bytes, smallest first: a working set between two
    probed sizes (l3_bytes the first) takes the rate interpolated between theirs in log size, past
    the largest read_gbps; copy: (bytes moved, GB/s) of a copy whose source and destination
    together take that many bytes, smallest first (plain or non-temporal stores, the faster): the
    rate of a kernel's writes (see `bandwidth`); here: (bytes, read GB/s, copy GB/s) probed at one
    working set just now (`probed_at`), which a working set of exactly that size takes instead."""
    cpu: str
    isa: str
    dtype: str
    threads: int
    gflops: float
    read_gbps: float
    measured: str = ""
    l3_gbps: float = 0.0
    l3_bytes: int = 0
    l2_gbps: float = 0.0
    l2_bytes: int = 0
    beyond: tuple[tuple[int, float], ...] = ()
    copy: tuple[tuple[int, float], ...] = ()
    here: tuple[int, float, float] | None = None

    def probed_at(self, nbytes: int, read_gbps: float, copy_gbps: float) -> "Peak":
        """This peak with the read and copy rates of a working set of nbytes as probed just now
        (`bench` probes them between its timings: the memory rate of a shared machine moves)."""
        return replace(self, here=(int(nbytes), read_gbps, copy_gbps))

    def bandwidth(self, nbytes: float | None = None, written: float = 0.0) -> tuple[float, str]:
        """(GB/s, level) of the smallest level a working set of nbytes fits (None: memory). Of
        those bytes, `written` are written: each written byte is moved with one read byte at the copy
        rate, the other reads at the read rate (a kernel writing as much as it reads: the copy's rate).

        >>> p = Peak("example", "avx2", "float32", 1, 100.0, 20.0, copy=((1 << 30, 10.0),))
        >>> p.bandwidth(None), p.bandwidth(None, written=1.0), round(p.bandwidth(4.0, written=1.0)[0], 2)
        ((20.0, 'memory'), (10.0, 'memory'), 13.33)
        """
        gbps, level = self._read_rate(nbytes)
        here = self.here is not None and nbytes is not None and int(nbytes) == self.here[0]
        if here:
            gbps = self.here[1]  # type: ignore[index]
        if written > 0 and (self.copy or here):
            total = nbytes if nbytes is not None else 2.0 * written
            w = min(written, total / 2)
            copy = self.here[2] if here else self._copy_rate(nbytes)  # type: ignore[index]
            gbps = total / ((total - 2 * w) / gbps + 2 * w / copy)
        return gbps, level

    def _copy_rate(self, nbytes: float | None) -> float:
        """The copy rate at nbytes moved: the nearest probed size's at either end, between two
        probed sizes interpolated in log size (None: the largest probed size, from memory)."""
        points = self.copy
        if nbytes is None or nbytes >= points[-1][0]:
            return points[-1][1]
        if nbytes <= points[0][0]:
            return points[0][1]
        for (s0, g0), (s1, g1) in zip(points, points[1:]):
            if nbytes <= s1:
                return g0 + (g1 - g0) * math.log(nbytes / s0) / math.log(s1 / s0)
        return points[-1][1]

    def _read_rate(self, nbytes: float | None) -> tuple[float, str]:
        if nbytes is not None:
            for gbps, size, level in ((self.l2_gbps, self.l2_bytes, "L2"), (self.l3_gbps, self.l3_bytes, "L3")):
                if gbps > 0 and nbytes <= size:
                    return gbps, level
            points = [(self.l3_bytes, self.l3_gbps), *self.beyond] if self.l3_gbps > 0 else list(self.beyond)
            for (s0, g0), (s1, g1) in zip(points, points[1:]):
                if nbytes <= s1:
                    t = math.log(max(nbytes, s0) / s0) / math.log(s1 / s0)
                    return g0 + (g1 - g0) * t, "memory"
        return self.read_gbps, "memory"

    def attainable(self, intensity: float, nbytes: float | None = None, written: float = 0.0) -> float:
        """The roofline: the GFLOP/s a kernel of this many flops per byte moved (nbytes in all, or
        None: from memory; `written` of them written) can reach."""
        return min(self.gflops, intensity * self.bandwidth(nbytes, written)[0])

    def share(self, gflops: float, intensity: float, nbytes: float | None = None, written: float = 0.0) -> float:
        """A kernel's speed over what the roofline allows at its intensity (1.0: at the limit)."""
        return gflops / self.attainable(intensity, nbytes, written)

    def bound(self, intensity: float, nbytes: float | None = None, written: float = 0.0) -> str:
        """'memory', 'L3' or 'L2' when the roofline at this intensity is that bandwidth, else 'compute'."""
        gbps, level = self.bandwidth(nbytes, written)
        return level if intensity * gbps < self.gflops else "compute"


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity: flops per byte moved (inf for a kernel that moves nothing)."""
    return flops / nbytes if nbytes > 0 else math.inf


def task_bytes(task: Any) -> float:
    """The bytes a task's kernel must move at least: its inputs read once and its output written once."""
    item = np.dtype(task.dtype).itemsize
    return float(sum(math.prod(shape) for shape in task.views()) * item)


def task_written(task: Any) -> float:
    """The bytes of a task's output, which its kernel writes (once, at least)."""
    return float(math.prod(task.views()[-1]) * np.dtype(task.dtype).itemsize)


def task_roofline(task: Any, peak: Peak) -> tuple[float, float, str]:
    """(intensity, attainable GFLOP/s, bound) of a task's kernel on a machine of this peak."""
    i, nbytes, written = task_intensity(task), task_bytes(task), task_written(task)
    return i, peak.attainable(i, nbytes, written), peak.bound(i, nbytes, written)


def task_intensity(task: Any) -> float:
    """Flops per byte a task's kernel must move at least (see task_bytes)."""
    return intensity(task.flops(), task_bytes(task))


def task_roof(task: Any) -> tuple[float, float, float] | None:
    """(intensity, bytes moved, bytes written) of a task whose speed this machine's roofline bounds: GFLOP/s of a
    float32 or float64 CPU kernel with a flop count; None for any other (a hand-written kernel's
    calls/s, a TPU emulator's kernel)."""
    flops = task.flops()  # first: 0 for a hand-written kernel, which has no template to ask
    if flops <= 0 or task.template.backend != "cpu" or task.template.metric != "GFLOP/s" or task.dtype not in DTYPES:
        return None
    nbytes = task_bytes(task)
    i = intensity(flops, nbytes)
    return (i, nbytes, task_written(task)) if math.isfinite(i) and i > 0 else None


# ---- the probe ------------------------------------------------------------------------------

def _fma_kernel(accumulators: int, dtype: str) -> Callable[..., Any]:
    """A kernel running `accumulators` independent FMA chains for n steps in each of `threads`
    threads, its accumulators in registers (a stack buffer of constant size, as autotune's own
    register tiles are)."""
    import numba

    from autotune.codegen.runtime import stack_empty
    src = f"""
def fma(n, threads, m, c, out):
    for t in numba.prange(threads):
        acc = numba.carray(stack_empty({accumulators}, np.{dtype}), ({accumulators},))
        for j in range({accumulators}):
            acc[j] = j + t
        for _ in range(n):
            for j in range({accumulators}):
                acc[j] = acc[j] * m + c
        s = acc[0]
        for j in range(1, {accumulators}):
            s += acc[j]
        out[t] = s
"""
    ns: dict[str, Any] = {"numba": numba, "np": np, "stack_empty": stack_empty}
    exec(compile(src, "<peak fma probe>", "exec"), ns)  # generated here from constants, never from input
    return numba.njit(parallel=True, fastmath=True)(ns["fma"])  # type: ignore[no-any-return]


READ_STREAMS = (1, 4, 8)  # contiguous streams a thread reads side by side; the probe keeps the best


@functools.cache
def _read_kernel(streams: int) -> Callable[..., Any]:
    """A kernel summing x in `threads` threads, each its contiguous share read as `streams`
    sub-arrays side by side (one vectorised sum each, under fastmath: the loads, not the adds, set
    the pace). One stream a thread leaves memory idle on some machines: on the AMD EPYC Zen 5 here,
    2 threads read 64 MiB at 114 GB/s in one stream each and at 145 in four (the same minute)."""
    import numba
    sums = "\n".join(f"                s{k} += part[{k} * n + i]" for k in range(streams))
    src = f"""
def read(x, threads, passes, out):
    chunk = x.size // threads
    for t in numba.prange(threads):
        part = x[t * chunk:(t + 1) * chunk]
        n = part.size // {streams}
        {" = ".join(f"s{k}" for k in range(streams))} = np.float32(0)
        for _ in range(passes):
            for i in range(n):
{sums}
        out[t] = {" + ".join(f"s{k}" for k in range(streams))}
"""
    ns: dict[str, Any] = {"numba": numba, "np": np}
    exec(compile(src, "<peak read probe>", "exec"), ns)  # generated here from constants, never from input
    return numba.njit(parallel=True, fastmath=True)(ns["read"])  # type: ignore[no-any-return]


def memory_bytes() -> int:
    """A working set that only memory holds: 8x the last-level cache, at least 256 MiB."""
    return max(8 * max(cache_sizes()[2], 1 << 20), 256 << 20)


def _best_seconds(run: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def probe_gflops(dtype: str = "float32", threads: int = 1, seconds: float = 0.2, repeat: int = 5) -> float:
    """The best FMA rate (GFLOP/s) of `threads` threads over a few chain counts."""
    import numba
    numba.set_num_threads(threads)
    lanes = current().lanes(dtype)
    one = np.dtype(dtype).type
    best = 0.0
    for chains in (4, 8, 12):
        acc = lanes * chains
        f = _fma_kernel(acc, dtype)
        out = np.zeros(threads, dtype)
        f(10, threads, one(0.999999), one(1e-7), out)
        n = 1000
        while True:  # steps that take about `seconds`
            dt = _best_seconds(lambda: f(n, threads, one(0.999999), one(1e-7), out), 1)
            if dt > seconds / 4 or n > 1 << 30:
                break
            n *= 4
        n = max(1, int(n * seconds / max(dt, 1e-9)))
        dt = _best_seconds(lambda: f(n, threads, one(0.999999), one(1e-7), out), repeat)
        best = max(best, 2.0 * acc * n * threads / dt / 1e9)
    return best


def probe_read_gbps(threads: int = 1, repeat: int = 10, nbytes: int | None = None) -> float:
    """The best read rate (GB/s) of `threads` threads summing an array of nbytes (None: 8x the
    last-level cache, at least 256 MiB: from memory), read again and again (a cache-sized array
    stays in the cache)."""
    import numba
    numba.set_num_threads(threads)
    if nbytes is None:
        nbytes = memory_bytes()
    unit = threads * 1024  # every stream of every thread the same whole number of floats
    x = np.ones(max(nbytes // 4 // unit, max(READ_STREAMS)) * unit, np.float32)
    out = np.zeros(threads, np.float32)
    passes = max(1, (64 << 20) // x.nbytes)  # at least 64 MiB a timing
    best = math.inf
    for streams in READ_STREAMS:
        f = _read_kernel(streams)
        f(x, threads, 1, out)
        best = min(best, _best_seconds(lambda: f(x, threads, passes, out), repeat))
    return x.nbytes * passes / best / 1e9


_COPY_ROW = 1024  # floats a streaming copy stores per stream_row call (4 KiB)


@functools.cache
def _copy_kernel(streaming: bool, streams: int = 1) -> Callable[..., Any]:
    """A kernel copying x[rows, _COPY_ROW] to y in `threads` threads, each its contiguous share of
    rows as `streams` runs of rows side by side, row by row in turn: plain stores (a loop LLVM
    vectorises), or non-temporal ones (runtime.stream_row, as a kernel with the schedule step
    `stream` stores its rows)."""
    import numba
    from autotune.codegen.runtime import stream_fence, stream_row
    vbytes = max(16, current().vector_bits // 8)

    if streaming:
        @numba.njit(inline="always")
        def store(x, y, row):  # type: ignore[no-untyped-def]
            stream_row(y, (row, 0), x[row], _COPY_ROW, vbytes)
        fence = stream_fence
    else:
        @numba.njit(inline="always")
        def store(x, y, row):  # type: ignore[no-untyped-def]
            for i in range(_COPY_ROW):
                y[row, i] = x[row, i]

        @numba.njit(inline="always")
        def fence():  # type: ignore[no-untyped-def]
            pass

    def copy(x, y, threads, passes):  # type: ignore[no-untyped-def]
        chunk = x.shape[0] // threads
        run = chunk // streams
        for t in numba.prange(threads):
            for _ in range(passes):
                for r in range(run):
                    for k in range(streams):
                        store(x, y, t * chunk + k * run + r)
            fence()
    return numba.njit(parallel=True, fastmath=True)(copy)  # type: ignore[no-any-return]


def probe_copy_gbps(threads: int = 1, repeat: int = 10, nbytes: int | None = None) -> float:
    """The best rate (GB/s, counting the bytes read and the bytes written) of `threads` threads
    copying an array into another, the two nbytes together (None: from memory, as probe_read_gbps),
    with plain or non-temporal stores in 1, 4 or 8 streams a thread, whichever is fastest."""
    import numba
    numba.set_num_threads(threads)
    if nbytes is None:
        nbytes = memory_bytes()
    unit = threads * max(READ_STREAMS)  # every stream of every thread the same number of rows
    rows = max(nbytes // 8 // (_COPY_ROW * unit), 1) * unit
    x = np.ones((rows, _COPY_ROW), np.float32)
    y = np.empty_like(x)
    passes = max(1, (64 << 20) // (2 * x.nbytes))  # at least 64 MiB moved a timing
    best = math.inf
    for streaming in (False, True):
        for streams in READ_STREAMS:
            f = _copy_kernel(streaming, streams)
            f(x, y, threads, 1)
            best = min(best, _best_seconds(lambda: f(x, y, threads, passes), repeat))
    return 2 * x.nbytes * passes / best / 1e9


def copy_sizes(l2_bytes: int, l3_bytes: int) -> tuple[int, ...]:
    """The bytes moved (source and destination together) at which the copy is probed: the L2s'
    and the L3's shares, the sizes past the L3 that reads are probed at, and memory's."""
    return tuple(sorted({n for n in (l2_bytes, l3_bytes, *beyond_sizes(l3_bytes)) if n > 0}
                        | {memory_bytes()}))


def cache_levels(threads: int) -> tuple[int, int]:
    """(L2 bytes of `threads` threads, L3 bytes): the working sets that stay in each level (half
    the size, for what else the level holds)."""
    _, l2, l3 = cache_sizes()
    return threads * l2 // 2, l3 // 2


def beyond_sizes(l3_bytes: int) -> tuple[int, ...]:
    """The working sets probed between the L3's share (l3_bytes) and memory: 2, 4 and 8 times it
    (1, 2 and 4 times the L3)."""
    return tuple(k * l3_bytes for k in (2, 4, 8)) if l3_bytes > 0 else ()


# ---- measured once, cached ------------------------------------------------------------------

def _cache_file() -> Path:
    return settings().cache_dir / "peak.json"


def _load(path: Path) -> list[dict[str, Any]]:
    """The cached peaks (a damaged or hostile file counts as empty: the probe runs again)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("peaks"), list):
        return []
    out = []
    for p in data["peaks"][:1000]:
        try:
            Peak(**p)
            if all(isinstance(p.get(k), (int, float)) and math.isfinite(p[k]) and p[k] > 0
                   for k in ("threads", "gflops", "read_gbps", "l3_gbps", "l3_bytes", "l2_gbps", "l2_bytes")):
                out.append({**p, "beyond": _rates(p.get("beyond"), "beyond"), "copy": _rates(p.get("copy", []), "copy"),
                            "here": None})
        except (TypeError, ValueError):
            continue
    return out


def _rates(value: Any, name: str) -> tuple[tuple[int, float], ...]:
    """A cached `beyond` or `copy`: at most 8 (bytes, GB/s) pairs of positive finite numbers, sizes
    rising; ValueError otherwise."""
    ok = isinstance(value, list) and len(value) <= 8 and all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                    and math.isfinite(x) and x > 0 for x in v) for v in value)
    if not ok or [v[0] for v in value] != sorted({v[0] for v in value}):
        raise ValueError(f"a bad {name!r} in the peak cache")
    return tuple((int(b), float(g)) for b, g in value)


def cached_peak(dtype: str = "float32", threads: int = 1) -> Peak | None:
    """This machine's peak from the cache, never measured (None when it was not measured yet)."""
    cpu, isa = cpu_model(), current().isa
    for p in _load(_cache_file()):
        if (p["cpu"], p["isa"], p["dtype"], p["threads"]) == (cpu, isa, dtype, threads):
            return Peak(**p)
    return None


def machine_peak(dtype: str = "float32", threads: int = 1, *, again: bool = False) -> Peak:
    """This machine's peak for `threads` threads in `dtype`: from the cache, else measured (a few
    seconds) and cached. again=True: measured anew."""
    if dtype not in DTYPES:
        raise AutotuneError(f"the peak is measured for {', '.join(DTYPES)}, not {dtype!r}")
    if not 1 <= threads <= (os.cpu_count() or 1):
        raise AutotuneError(f"threads must be 1..{os.cpu_count()} on this machine, got {threads}")
    cpu, isa = cpu_model(), current().isa
    path = _cache_file()
    peaks = _load(path)
    if not again:
        for p in peaks:
            if (p["cpu"], p["isa"], p["dtype"], p["threads"]) == (cpu, isa, dtype, threads):
                return Peak(**p)
    l2_bytes, l3_bytes = cache_levels(threads)
    with TimingLock(lock_path(settings().cache_dir)):  # no other autotune timing overlaps the probe
        gflops, gbps = probe_gflops(dtype, threads), probe_read_gbps(threads)
        l3_gbps, l2_gbps = probe_read_gbps(threads, nbytes=l3_bytes), probe_read_gbps(threads, nbytes=l2_bytes)
        beyond = tuple((n, round(probe_read_gbps(threads, nbytes=n), 1)) for n in beyond_sizes(l3_bytes))
        copy = tuple((n, round(probe_copy_gbps(threads, nbytes=n), 1)) for n in copy_sizes(l2_bytes, l3_bytes))
    peak = Peak(cpu, isa, dtype, threads, round(gflops, 1), round(gbps, 1), datetime.date.today().isoformat(),
                round(l3_gbps, 1), l3_bytes, round(l2_gbps, 1), l2_bytes, beyond, copy)
    keep = [p for p in peaks if (p["cpu"], p["isa"], p["dtype"], p["threads"]) != (cpu, isa, dtype, threads)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        mine = {k: v for k, v in asdict(peak).items() if k != "here"}  # `here` is bench's, never cached
        tmp.write_text(json.dumps({"schema": SCHEMA, "peaks": [*keep, mine]}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written: measured again next time
    return peak


__all__ = ["Peak", "beyond_sizes", "cache_levels", "cached_peak", "copy_sizes", "intensity", "machine_peak", "memory_bytes",
           "probe_copy_gbps", "probe_gflops", "probe_read_gbps", "task_bytes", "task_intensity", "task_roof",
           "task_roofline", "task_written"]
