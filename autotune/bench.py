"""Benchmarks: find the best config of a template from presets and samples (the tuner's finalists
timed again in alternating rounds, samples as long as the final ones: autotune.retime), then time
it against NumPy (and PyTorch when installed) in the same run, in separate blocks with pauses
between them.
When the machine was busy during those timings (samples spread out, or CPU time stolen: see
measure.timing.Timing.noisy), the result says so: its ratios are rough.

Example (Python)::

    >>> from autotune.bench import BenchOptions, run_bench          # doctest: +SKIP
    >>> from autotune.task import Task                              # doctest: +SKIP
    >>> r = run_bench(Task.create("matmul", "256x256x256"), BenchOptions(trials=4))  # doctest: +SKIP
    >>> r.best_gflops > 0                                           # doctest: +SKIP
    True
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from autotune.environment import settings
from autotune.errors import install_hint
from autotune.space import Config
from autotune.retime import FinalistOptions, busy_note
from autotune.task import Task
from autotune.target import cpu_model, current
from autotune.tuner import TuneResult
from autotune.timing_lock import TimingLock, lock_path
from autotune.measure.peak import (Peak, machine_peak, probe_copy_gbps, probe_read_gbps, task_bytes, task_roof,
                                   task_roofline, task_written)
from autotune.measure.timing import Timing, TimingProtocol, time_callable

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BenchOptions:
    """trials: configs to try (presets first, then the search's); finalists: how many of the
    fastest candidates (those within finalist_within of the fastest) are timed again, in
    pick_rounds alternating rounds with pick_protocol (a round's median; from round 2 on, a
    finalist each of whose quiet rounds was slower than every quiet round of the fastest stops,
    and the re-timing ends when one is left: measure.worker.race), before the best is chosen (a
    busy spell of the machine favours whichever candidate was timed outside it: with 3
    finalists and 3 rounds of the search's
    protocol, the 3x3 convolution's picks were 10-20% slower than its preset timed in the same
    process); search_protocol: each candidate's timing during the search (short samples: the
    finalists are timed again); rounds: alternating baseline/kernel timing blocks for the
    final comparison; pause_s: idle time between blocks (BLAS threads keep spinning after a call
    and slow whatever runs next); max_spread: a timing of the final comparison whose samples
    spread more than this (max/min), or lost CPU time to the hypervisor, makes the result noisy."""
    trials: int = 16
    seed: int = 0
    protocol: TimingProtocol = TimingProtocol(warmup=2, number=1, repeat=5, min_repeat_ms=100)
    search_protocol: TimingProtocol = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=20)
    pick_protocol: TimingProtocol = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=50)
    rounds: int = 3
    finalists: int = 5
    pick_rounds: int = 5
    finalist_within: float = 1.25
    pause_s: float = 0.5
    max_spread: float = 1.10
    progress: bool = True
    baselines: tuple[str, ...] = ("numpy", "torch")
    peak: bool = True  # compare every figure with this machine's roofline (measure.peak, probed once)


@dataclass
class Candidate:
    config: Config
    seconds: float | None = None
    compile_seconds: float | None = None
    error: str | None = None


@dataclass
class BenchResult:
    task: Task
    best: Candidate
    kernel_seconds: float
    baselines: dict[str, float]
    candidates: list[Candidate] = field(default_factory=list)
    tuning_seconds: float = 0.0
    timings: int = 0        # timings of the final comparison (baselines and kernel, every round)
    noisy_timings: int = 0  # of those, the ones taken while the machine was busy (Timing.noisy)
    search_timings: int = 0        # timings of the tuning (measurements and finalists' re-timings)
    noisy_search_timings: int = 0  # of those, the ones taken while the machine was busy
    peak: Peak | None = None       # this machine's limits (None: not a GFLOP/s task, or not asked for)

    @property
    def noisy(self) -> bool:
        """The machine was busy during the final comparison: its ratios are rough."""
        return self.noisy_timings > 0

    @property
    def best_gflops(self) -> float:
        return self.task.flops() / self.kernel_seconds / 1e9

    def ratio(self, baseline: str) -> float:
        return self.baselines[baseline] / self.kernel_seconds

    def share(self, seconds: float) -> float | None:
        """What a kernel of this task taking `seconds` reaches of the machine's roofline (1.0: the limit)."""
        if self.peak is None:
            return None
        return self.task.flops() / seconds / 1e9 / task_roofline(self.task, self.peak)[1]

    def roofline_json(self) -> dict[str, Any] | None:
        if self.peak is None:
            return None
        i, attainable, bound = task_roofline(self.task, self.peak)
        return {"peak_gflops": self.peak.gflops, "read_gbps": self.peak.read_gbps, "l3_gbps": self.peak.l3_gbps,
                "l2_gbps": self.peak.l2_gbps,
                "bandwidth_gbps": self.peak.bandwidth(task_bytes(self.task), task_written(self.task))[0],
                "intensity": i, "bound": bound, "attainable_gflops": attainable,
                "min_bytes": task_bytes(self.task), "written_bytes": task_written(self.task),
                "probed_here": None if self.peak.here is None else
                {"read_gbps": self.peak.here[1], "copy_gbps": self.peak.here[2]},
                "share": self.share(self.kernel_seconds),
                "baseline_share": {k: self.share(v) for k, v in self.baselines.items()}}

    @property
    def median_compile_seconds(self) -> float | None:
        """Median CPU seconds a candidate took to compile (None when none reported it)."""
        compiles = [c.compile_seconds for c in self.candidates if c.compile_seconds is not None]
        return statistics.median(compiles) if compiles else None

    def to_json(self) -> dict[str, Any]:
        fl = self.task.flops()
        return {
            "schema": SCHEMA_VERSION,
            "task": self.task.key(), "op": self.task.op, "shape": self.task.shape_dict, "dtype": self.task.dtype,
            "threads": self.task.threads,
            "best": {"config": self.best.config.to_json(), "seconds": self.kernel_seconds,
                     "gflops": fl / self.kernel_seconds / 1e9},
            "baselines": {k: {"seconds": v, "gflops": fl / v / 1e9, "ratio": v / self.kernel_seconds}
                          for k, v in self.baselines.items()},
            "trials": len(self.candidates),
            "errors": sum(c.error is not None for c in self.candidates),
            "tuning_seconds": self.tuning_seconds,
            "noisy": self.noisy, "noisy_timings": self.noisy_timings, "timings": self.timings,
            "search_timings": self.search_timings, "noisy_search_timings": self.noisy_search_timings,
            "median_compile_seconds": self.median_compile_seconds,
            "roofline": self.roofline_json(),
            "candidates": [{"config": c.config.to_json(), "seconds": c.seconds, "compile_seconds": c.compile_seconds,
                            "error": c.error} for c in self.candidates],
            "machine": {"cpu": cpu_model(), "target": current().to_json(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "numpy": np.__version__},
        }


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    with threadpool_limits(limits=n):
        yield


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 32 MiB instead of returning them to the
    system. Baselines that allocate their output every call (numpy, torch) otherwise page-fault
    on fresh pages in some calls and not others: torch's conv2d here took 0.9-1.6 ms depending on
    what ran before it in the process. With this they run at their best, every time. False where
    the C library is not glibc."""
    import ctypes
    import ctypes.util
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


def baseline_callables(task: Task, inputs: list[np.ndarray], which: tuple[str, ...]) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    extra = {k: v for k, v in task.shape if k in task.template.extra_dims}
    if "numpy" in which:
        out["numpy"] = lambda: task.reference(inputs)
    if "torch" in which and task.template.torch_reference is not None:
        try:
            import torch
        except ImportError:
            return out
        torch.set_num_threads(task.threads)
        tin = [torch.from_numpy(a) for a in inputs]
        tref = task.template.torch_reference

        def run_torch() -> Any:
            with torch.no_grad():
                return tref(*tin, **extra)
        out["torch"] = run_torch
    return out


def tune_candidates(task: Task, options: BenchOptions, log: str | None, strategy: str | None = None,
                    cost_model: str | None = None, pretrained: str | None = None) -> tuple[TuneResult, list[Candidate]]:
    """Tune with the real tuner (isolated workers, parallel compiles), presets first, its finalists
    timed again with pick_protocol; return the run and every measurement of the task in the
    log (a reused log counts; re-timings of finalists are not candidates)."""
    import tempfile

    from autotune.records import load_records
    from autotune.tuning import tune
    from autotune.measure.local import LocalRunnerOptions
    finalists = FinalistOptions(count=options.finalists, within=options.finalist_within,
                                noisy_count=2 * options.finalists, rounds=options.pick_rounds)
    with contextlib.ExitStack() as stack:
        if log is None:  # a scratch log in a directory of its own: its sidecar files go with it
            log = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="autotune-bench-")), "log.jsonl")
        result = tune(op=task, trials=options.trials, log=log, strategy=strategy, cost_model=cost_model,
                      pretrained=pretrained, seed=options.seed, progress=options.progress, batch=8,
                      finalists=finalists,
                      runner_options=LocalRunnerOptions(protocol=options.search_protocol, seed=options.seed,
                                                        retime_protocol=options.pick_protocol))
        space = task.space()
        return result, [Candidate(space.validate(r.config), r.seconds if r.ok else None, r.compile_seconds,
                                  None if r.ok else f"{r.error}: {r.message}")
                        for r in load_records(log) if r.key == task.key() and not r.retimed]


def run_bench(task: Task, options: BenchOptions = BenchOptions(), *, log: str | None = None,
              strategy: str | None = None, cost_model: str | None = None,
              pretrained: str | None = None) -> BenchResult:
    """Tune (or reuse a log), then time the best kernel and the baselines in alternating blocks of
    the same run. cost_model / pretrained: model-guided evolutionary search instead of `strategy`."""
    t0 = time.perf_counter()
    tuned, cands = tune_candidates(task, options, log, strategy, cost_model, pretrained)
    tuning = time.perf_counter() - t0
    assert tuned.best_config is not None  # tune raises NoValidConfig otherwise
    keep_freed_memory()
    inputs = task.inputs(seed=options.seed + 1)
    best = Candidate(tuned.best_config, tuned.best_seconds,
                     next((c.compile_seconds for c in cands if c.config == tuned.best_config), None))
    run = task.build(best.config).bind(*inputs)
    if options.progress and options.peak and has_roofline(task):
        print("autotune: this machine's peak: from the cache, else measured once (a few seconds)", file=sys.stderr,
              flush=True)
    peak = machine_peak(task.dtype, task.threads) if options.peak and has_roofline(task) else None
    base = baseline_callables(task, inputs, options.baselines)
    samples: dict[str, list[float]] = {k: [] for k in base}
    mine: list[float] = []
    timings: list[Timing] = []
    # a memory-bound task's rates are probed at its working set between the timings: on a shared
    # machine the memory rate moves by tens of percent within minutes, the cached peak's with it
    rates: list[tuple[float, float]] | None = [] if peak is not None and task_roofline(task, peak)[2] != "compute" else None
    nbytes = int(task_bytes(task))  # (task_bytes builds the task's definition: once, not between timings)
    if options.progress:  # each round says so: the comparison takes seconds, and is never silent for long
        print(f"autotune: timing the best kernel against {', '.join(base) or 'nothing'} in {options.rounds} "
              "alternating rounds...", file=sys.stderr, flush=True)
    with TimingLock(lock_path(settings().cache_dir)):  # no other autotune timing overlaps these
        for n in range(options.rounds):
            if options.progress:
                print(f"autotune: round {n + 1} of {options.rounds}", file=sys.stderr, flush=True)
            for name, fn in base.items():
                with blas_threads(task.threads):
                    timings.append(time_callable(fn, options.protocol))
                samples[name].append(timings[-1].median)
                time.sleep(options.pause_s)
            timings.append(time_callable(run, options.protocol))
            mine.append(timings[-1].median)
            if rates is not None:
                rates.append((probe_read_gbps(task.threads, repeat=5, nbytes=nbytes),
                              probe_copy_gbps(task.threads, repeat=5, nbytes=nbytes)))
            time.sleep(options.pause_s)
    if rates and peak is not None:  # the best of the rounds, as every probe: what the machine could do
        peak = peak.probed_at(nbytes, max(r for r, _ in rates), max(c for _, c in rates))
    return BenchResult(task, best, statistics.median(mine), {k: statistics.median(v) for k, v in samples.items()},
                       cands, tuning, timings=len(timings), noisy_timings=count_noisy(timings, options.max_spread),
                       search_timings=tuned.timed, noisy_search_timings=tuned.noisy, peak=peak)


def has_roofline(task: Task) -> bool:
    """Whether a task's speed compares with the machine's limit (measure.peak.task_roof)."""
    return task_roof(task) is not None


def count_noisy(timings: Iterable[Timing], max_spread: float) -> int:
    """How many of these timings were taken while the machine was busy (Timing.noisy: samples
    spread more than max_spread, or CPU time stolen during them).

    >>> count_noisy([Timing((1.0, 1.02)), Timing((1.0, 1.5)), Timing((1.0, 1.0), stolen=2)], 1.10)
    2
    """
    return sum(t.noisy(max_spread) for t in timings)


def format_result(r: BenchResult) -> str:
    t = r.task
    unit = t.template.metric
    def limit(sec: float) -> str:
        share = r.share(sec)
        return f"  {100 * share:5.1f}% of the limit" if share is not None else ""
    lines = [t.key(),
             f"  autotune  {r.best_gflops:8.1f} {unit}  ({r.kernel_seconds * 1e3:.3f} ms){limit(r.kernel_seconds)}  "
             f"config {r.best.config.key()}"]
    for name, sec in r.baselines.items():
        lines.append(f"  {name:<8}  {t.flops() / sec / 1e9:8.1f} {unit}  ({sec * 1e3:.3f} ms){limit(sec)}  "
                     f"autotune/{name} = {r.ratio(name):.2f}x")
    if r.peak is not None:
        i, attainable, bound = task_roofline(t, r.peak)
        mib, written = task_bytes(t) / (1 << 20), task_written(t)
        writes = written >= 0.01 * task_bytes(t) and (r.peak.copy or r.peak.here)  # a matrix-vector product's: none
        rate = f"reads at the read rate, its {written / (1 << 20):.1f} MiB written at the copy rate" if writes \
            else "the read rate"
        if r.peak.here is not None:
            rate += (f", both probed in this run: reads {r.peak.here[1]:.0f} GB/s, a copy {r.peak.here[2]:.0f}" if writes
                     else ", probed in this run")
        at = "" if bound == "compute" else \
            f" at {r.peak.bandwidth(task_bytes(t), written)[0]:.0f} GB/s ({rate}, at its {mib:.1f} MiB)"
        lines.append(f"  limit     {attainable:8.1f} {unit}  {bound} bound{at}: {i:.2f} flop/byte, {mib:.1f} MiB moved "
                     f"(this machine, {t.threads} thread{'s' * (t.threads > 1)}: {r.peak.gflops:.0f} GFLOP/s FMA peak; "
                     f"read {r.peak.read_gbps:.0f} GB/s from memory, {r.peak.l3_gbps:.0f} from L3, "
                     f"{r.peak.l2_gbps:.0f} from L2; measure.peak)")
    if "torch" not in r.baselines and t.template.torch_reference is not None:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            lines.append(f"  torch     not timed: PyTorch is not installed; {install_hint('gnn')} adds it "
                         "(torch==2.13.0)")
    errs = sum(c.error is not None for c in r.candidates)
    mc = r.median_compile_seconds
    median = f"; median compile {mc:.2f} s CPU each" if mc is not None else ""
    lines.append(f"  {len(r.candidates)} candidates ({errs} failed) in {r.tuning_seconds:.1f} s{median}")
    if r.noisy:
        lines.append(f"  the machine was busy while timing ({r.noisy_timings} of {r.timings} timings had spread-out "
                     "samples, stolen CPU time or other work on the kernel's cores): the ratios are rough")
    search = busy_note(r.noisy_search_timings, r.search_timings)
    if search:
        lines.append(f"  tuning: {search}")
    return "\n".join(lines)
