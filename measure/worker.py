"""The worker process: compiles candidates, or checks and times them. Started by LocalRunner.

It speaks JSON lines: stdin carries requests, stdout the answers. The first request is the
driver's `WorkerSetup` (role, cores, timing lock, template modules, cache directory, threads),
answered with {"ready": true} once the worker is set up, or {"ready": false, "message": ...}.
Every later request is a compile, a measure, a retime (finalists checked again and timed in
alternating rounds), or keys (the kernel key of each of some configs, answered one line per
config); a template-free op's request carries its definition as data, a hand-written Numba
kernel's (autotune.autotune_numba) its source and arguments' description (measure.handwritten). Numba's variables come in the process
environment (Numba reads them at import), so generated kernels get SLP vectorisation and
512-bit vectors. A kernel that crashes takes down only this process. Started with `--parent PID`, a worker
dies with its driver (die_with_parent), even while the driver has it stopped (SIGSTOP).

A compile cache that cannot be written is no fault of any config: at set-up it is answered
{"ready": false, "environment": true, "message": ...} (the driver stops with that message), and a
disk error while writing a kernel's source (a full disk, a read-only file system) is an
"infrastructure" error, never a compile error. Numba's cache files that cannot be written leave
the kernel uncached, and it is measured all the same (autotune.codegen.verified_cache).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import os
import signal
import statistics
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from autotune.errors import CacheError
from autotune.timing_lock import TimingLock


def _fmt(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:1000]


# errors of the disk or the file system, not of the kernel being written to it
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})


class CacheNotWritable(Exception):
    """The compile cache directory cannot be written: an environment error, not a config's."""


def check_cache(cache_dir: str | os.PathLike[str]) -> None:
    """Raise CacheNotWritable (a one-line message naming the directory) unless kernels can be
    written under `cache_dir`.

    >>> import tempfile
    >>> check_cache(tempfile.mkdtemp())
    """
    import tempfile
    d = Path(cache_dir)
    try:
        (d / "kernels").mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d / "kernels", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CacheNotWritable(f"the compile cache {d} is not writable ({e.strerror}): set AUTOTUNE_CACHE_DIR "
                               "to a writable directory") from None


def _disk_fault(e: OSError | CacheError) -> dict[str, Any]:
    """A kernel that could not be written to the compile cache (an OSError of the disk, or the
    CacheError autotune.codegen.compile makes of one): an infrastructure fault, no verdict."""
    return {"ok": False, "error": "infrastructure", "message": f"a disk error while writing the kernel: {_fmt(e)}"}


@dataclass(frozen=True)
class WorkerSetup:
    """A worker's settings, sent by its driver as the first message.

    role: "compile" or "measure"; cache_dir, threads and target: the driver's
    `autotune.environment.settings()` (Numba's CPU features for the target come in the process
    environment, autotune.environment.worker_env); cores: CPUs to pin to (none: any); lock_path: the
    machine-wide timing lock (None: no lock); template_modules: modules (or "file:<script>") that
    register the user's templates; sys_path: entries the worker adds to sys.path to find them.

    Example::

        >>> WorkerSetup.from_json(WorkerSetup("compile", "/tmp/cache", threads=2).to_json()).role
        'compile'
    """
    role: str
    cache_dir: str
    threads: int
    cores: tuple[int, ...] = ()
    lock_path: str | None = None
    template_modules: tuple[str, ...] = ()
    sys_path: tuple[str, ...] = ()
    target: str = "host"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "setup", **asdict(self)}

    @classmethod
    def from_json(cls, msg: dict[str, Any]) -> "WorkerSetup":
        if msg.get("kind") != "setup":
            raise ValueError(f"the first message to a worker must be its setup, got kind={msg.get('kind')!r}")
        fields = {k: v for k, v in msg.items() if k != "kind"}
        for k in ("cores", "template_modules", "sys_path"):
            fields[k] = tuple(fields.get(k, ()))
        return cls(**fields)


class _Worker:
    def __init__(self, setup: WorkerSetup) -> None:
        from autotune.environment import Settings, configure_numba, use_settings
        check_cache(setup.cache_dir)
        use_settings(Settings(Path(setup.cache_dir), setup.threads, setup.target))
        configure_numba()
        import numpy  # noqa: F401
        from autotune.task import Task  # noqa: F401 (imports numba once, up front)
        import importlib
        sys.path.extend(p for p in setup.sys_path if p not in sys.path)  # where the user's modules live
        for mod in setup.template_modules:
            if mod.startswith("file:"):  # a user's script: run it as a module that is not __main__
                import runpy
                runpy.run_path(mod[5:], run_name="__autotune_main__")
            else:
                importlib.import_module(mod)  # user templates register themselves on import
        self.role = setup.role
        self.lock_path = setup.lock_path
        if setup.cores and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, set(setup.cores))
            except OSError:
                pass
        self._refs: dict[tuple, Any] = {}

    def task(self, p: dict[str, Any]):  # type: ignore[no-untyped-def]
        """The request's task; a template-free op is rebuilt from the definition the request carries
        (data, validated), never from the user's code."""
        from autotune.task import Task
        return Task.from_data(p)

    def compile(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            task = self.task(p)
            k = task.build(p["config"])
            return {"ok": True, "compile_s": k.compile_seconds}
        except CacheError as e:
            return _disk_fault(e)
        except OSError as e:
            return _disk_fault(e) if e.errno in DISK_ERRNOS else {"ok": False, "error": "compile_error",
                                                                   "message": _fmt(e)}
        except Exception as e:
            return {"ok": False, "error": "compile_error", "message": _fmt(e)}

    def keys(self, p: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The kernel key of each of p["configs"] (autotune.backends.Backend.kernel_key), one
        answer {"key": ...} per config as soon as it is known, so that a schedule() that crashes
        or hangs this process is known by the driver as the config it did not answer; None where
        there is no key (no such key in the backend, a config that does not build)."""
        from autotune.backends import backend_of
        try:
            task = self.task(p)
            backend, space = backend_of(task), task.space()
        except Exception:
            task = None
        for cfg in p["configs"]:
            key = None
            if task is not None:
                try:
                    key = backend.kernel_key(task, space.validate(cfg))
                except Exception:
                    pass
            yield {"key": key}

    def _checked(self, task: Any, config: Any, seed: int) -> tuple[Any, dict[str, Any] | None]:
        """(the kernel bound to the task's inputs, None) once it built and matched the reference,
        else (None, the failure as an answer)."""
        import numpy as np

        from autotune.measure.check import check_output, poisoned
        try:
            k = task.build(config)
        except CacheError as e:
            return None, _disk_fault(e)
        except OSError as e:
            return None, (_disk_fault(e) if e.errno in DISK_ERRNOS else {"ok": False, "error": "compile_error",
                                                                         "message": _fmt(e)})
        except Exception as e:
            return None, {"ok": False, "error": "compile_error", "message": _fmt(e)}
        compile_s = k.compile_seconds
        try:
            key = (task.key(), seed)
            if key not in self._refs:
                ins = task.inputs(seed=seed)
                self._refs = {key: (ins, task.reference(ins))}  # keep one: inputs can be large
            ins, ref = self._refs[key]
            out = poisoned(k.output_shape, task.dtype)
            k(*ins, out=out)
            chk = check_output(out, np.asarray(ref), task.dtype)
            if not chk.ok:
                return None, {"ok": False, "error": "wrong_answer", "message": chk.message, "compile_s": compile_s}
            return (k.bind(*ins), compile_s), None
        except Exception as e:
            return None, _runtime_error(e, compile_s)

    def measure(self, p: dict[str, Any]) -> dict[str, Any]:
        from autotune.measure.timing import TimingProtocol
        pause = _pids(p.get("pause"))
        if p.get("numba") is not None:  # a hand-written Numba kernel (autotune.autotune_numba)
            from autotune.measure.handwritten import measure as measure_handwritten
            return measure_handwritten(p, functools.partial(self._time, pause=pause))
        try:
            task = self.task(p)
        except Exception as e:
            return {"ok": False, "error": "compile_error", "message": _fmt(e)}
        bound, failed = self._checked(task, p["config"], int(p.get("seed", 0)))
        if failed is not None:
            return failed
        run, compile_s = bound
        max_spread = float(p.get("max_spread", 1.1))
        proto = TimingProtocol(**p["protocol"])
        cutoff = p.get("cutoff_s")
        if isinstance(cutoff, (int, float)) and not isinstance(cutoff, bool) and 0 < cutoff < float("inf"):
            proto = dataclasses.replace(proto, cutoff=float(cutoff))
        try:
            t = self._time(run, proto, 1 + int(p.get("retries", 2)), max_spread, pause)
        except Exception as e:
            return _runtime_error(e, compile_s)
        return {"ok": True, "costs": list(t.samples), "compile_s": compile_s, "noisy": t.noisy(max_spread),
                "contention": t.contention()}

    def retime(self, p: dict[str, Any]) -> dict[str, Any]:
        """Check each of p["configs"] again, then time them all in p["rounds"] alternating rounds
        (`race`): {"results": [one answer per config: costs are the median of each of its rounds]}."""
        from autotune.measure.timing import TimingProtocol, time_callable
        if p.get("numba") is not None:  # hand-written kernels are not re-timed: their runs need the driver's files
            return {"results": [{"ok": False, "error": "infrastructure",
                                 "message": "a hand-written Numba kernel is not re-timed"}] * len(p["configs"])}
        try:
            task = self.task(p)
        except Exception as e:
            return {"results": [{"ok": False, "error": "compile_error", "message": _fmt(e)}] * len(p["configs"])}
        proto, rounds, max_spread = TimingProtocol(**p["protocol"]), int(p["rounds"]), float(p.get("max_spread", 1.1))
        answers: list[dict[str, Any]] = []
        runs: dict[int, Any] = {}
        for i, cfg in enumerate(p["configs"]):
            bound, failed = self._checked(task, cfg, int(p.get("seed", 0)))
            answers.append(failed or {"ok": True, "compile_s": bound[1]})
            if failed is None:
                runs[i] = bound[0]
        def time_one(i: int) -> Any:
            try:
                with TimingLock(self.lock_path):
                    return time_callable(runs[i], proto)
            except Exception as e:
                answers[i] = _runtime_error(e, answers[i].get("compile_s"))
                return None
        timings = race(list(runs), rounds, time_one, max_spread)
        for i, ts in timings.items():
            if answers[i]["ok"]:  # not failed while timed
                answers[i].update(_rounds(ts, max_spread))
        return {"results": answers}

    def _time(self, run: Any, proto: Any, attempts: int, max_spread: float, pause: tuple[int, ...] = ()) -> Any:
        """The first quiet timing of `run` in up to `attempts`, else the least disturbed one; the
        processes `pause` (compile workers on the timing's cores) stopped while it is timed."""
        from autotune.measure.timing import time_callable
        best = None
        for _ in range(attempts):
            with TimingLock(self.lock_path), stopped(pause):
                t = time_callable(run, proto)
            if t.cut or not t.noisy(max_spread):
                return t
            if best is None or (t.stolen + t.waited, t.spread) < (best.stolen + best.waited, best.spread):
                best = t
        return best


def _pids(value: Any) -> tuple[int, ...]:
    """The process ids of a request's "pause" (positive integers; anything else is ignored)."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 0)


@contextlib.contextmanager
def stopped(pids: tuple[int, ...]) -> Iterator[None]:
    """Stop these processes (SIGSTOP) while the body runs, then let them go on (SIGCONT): the
    compile workers that share the timing's cores, stopped only while a kernel is timed (its build
    and check run beside them). One already gone is skipped. Their driver sends SIGCONT again
    after every measurement, in case this process died before it could.

    >>> with stopped(()):
    ...     pass
    """
    done = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
            done.append(pid)
        except OSError:
            pass
    try:
        yield
    finally:
        for pid in done:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)


def _runtime_error(e: BaseException, compile_s: float | None) -> dict[str, Any]:
    return {"ok": False, "error": "runtime_error", "message": _fmt(e) + "\n" + traceback.format_exc(limit=3)[-800:],
            "compile_s": compile_s}


def race(entrants: list[int], rounds: int, time_one: Callable[[int], Any], max_spread: float) -> dict[int, list[Any]]:
    """Time the entrants in up to `rounds` alternating rounds (time_one(i): a Timing, or None
    when i failed, which leaves the race); the timings of each entrant that was timed. From round
    2 on, a clear loser stops (`outpaced`); once one entrant of several is left, the race ends:
    the pick is made, and it has nothing more to be compared with.

    >>> from autotune.measure.timing import Timing
    >>> timings = race([0, 1], 5, lambda i: Timing((1.0 + i,)), 1.1)
    >>> {i: len(ts) for i, ts in timings.items()}  # 1 is outpaced in round 2, and 0 is left alone
    {0: 2, 1: 2}
    """
    timings: dict[int, list[Any]] = {i: [] for i in entrants}
    running = list(entrants)
    for r in range(rounds):
        for i in list(running):
            t = time_one(i)
            if t is None:
                running.remove(i)
                del timings[i]
            else:
                timings[i].append(t)
        if r + 1 < rounds:
            for i in outpaced({i: timings[i] for i in running}, max_spread):
                running.remove(i)  # a clear loser: its rounds so far are its answer
            if len(running) < 2 <= len(entrants):
                break
    return timings


def outpaced(timings: dict[int, list[Any]], max_spread: float) -> list[int]:
    """The kernels of a re-timing to time no more: from its second round on, those each of whose
    rounds so far was slower than every round of the fastest kernel (by the median of its rounds'
    medians), judged only where every one of those rounds was quiet (a busy spell can make a
    kernel look slow; then it stays in). A kernel tied with the fastest stays in, however long.

    >>> from autotune.measure.timing import Timing
    >>> fast, slow, close = [Timing((1.0,)), Timing((1.02,))], [Timing((1.1,)), Timing((1.2,))], [Timing((1.01,))] * 2
    >>> outpaced({0: fast, 1: slow, 2: close}, 1.1), outpaced({0: fast, 1: slow[:1]}, 1.1)
    ([1], [])
    >>> outpaced({0: fast, 1: [Timing((1.1,)), Timing((1.1, 1.5))]}, 1.1)  # its second round was disturbed
    []
    """
    if len(timings) < 2 or min(len(t) for t in timings.values()) < 2:
        return []
    rounds = {i: [t.median for t in ts] for i, ts in timings.items()}
    lead = min(rounds, key=lambda i: statistics.median(rounds[i]))
    if any(t.noisy(max_spread) for t in timings[lead]):
        return []
    return [i for i, ms in rounds.items() if i != lead and min(ms) > max(rounds[lead])
            and not any(t.noisy(max_spread) for t in timings[i])]


def _rounds(timings: list[Any], max_spread: float) -> dict[str, Any]:
    """A re-timing's answer from its rounds: each round's median; noisy when half of them or more
    were (the median of the rounds stands a minority of disturbed ones).

    >>> from autotune.measure.timing import Timing
    >>> r = _rounds([Timing((1.0, 1.01)), Timing((2.0, 3.0)), Timing((1.1, 1.1))], 1.1)
    >>> r["costs"], r["noisy"], r["contention"]["noisy_rounds"], r["contention"]["spread"]
    ([1.005, 2.5, 1.1], False, 1, 2.4876)
    """
    noisy = sum(t.noisy(max_spread) for t in timings)
    medians = [t.median for t in timings]
    return {"costs": medians, "noisy": 2 * noisy >= len(timings), "retimed": True,
            "contention": {"spread": round(max(medians) / min(medians), 4), "rounds": len(timings),
                           "noisy_rounds": noisy, "retaken": sum(t.retaken for t in timings),
                           "stolen": sum(t.stolen for t in timings), "waited": sum(t.waited for t in timings),
                           "wait": round(max(t.wait for t in timings), 4)}}


def die_with_parent(parent: int | None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux: prctl PR_SET_PDEATHSIG),
    so a worker its driver stopped (SIGSTOP) and cannot resume any more does not stay behind
    forever: SIGKILL ends a stopped process too. Exit at once if `parent` died before this ran."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover (no prctl in this libc)
            pass
    if parent is not None and os.getppid() != parent:
        os._exit(0)


def main() -> None:
    """Serve JSON-line requests on stdin: first a `WorkerSetup`, then {"kind": "compile"|"measure"|
    "retime"|"keys", ...payload}; answer each on stdout (keys: one line per config).
    `--parent PID` (the driver's pid): die with the driver (die_with_parent).

    Kernels, Numba and warnings may write to stdout; the answers go to a private copy of it. When
    the driver closes stdin the worker exits at once, without tearing the interpreter down.
    """
    import json
    if sys.argv[1:2] == ["--parent"]:
        die_with_parent(int(sys.argv[2]))
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    first = sys.stdin.readline()
    if not first:
        return  # the driver went away before setting the worker up
    try:
        w = _Worker(WorkerSetup.from_json(json.loads(first)))
        answers.write(json.dumps({"ready": True}) + "\n")
    except CacheNotWritable as e:  # the driver stops: no config can be compiled here
        answers.write(json.dumps({"ready": False, "environment": True, "message": str(e)}) + "\n")
        return
    except Exception as e:  # a bad setup or an import failure in the worker: say why, then stop
        answers.write(json.dumps({"ready": False, "message": _fmt(e)}) + "\n")
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        kind = msg.get("kind")
        if kind == "keys":
            for key in w.keys(msg):
                answers.write(json.dumps(key) + "\n")
            continue
        reply = w.compile(msg) if kind == "compile" else w.retime(msg) if kind == "retime" else w.measure(msg)
        answers.write(json.dumps(reply) + "\n")
    # The driver closed stdin: every answer is written and every kernel cached. Tearing down the
    # interpreter (Numba's and LLVM's state) took 0.35-0.5 s a worker, which a tuning run waited for.
    answers.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
