"""LocalRunner: compile candidates in parallel worker processes, then check and time them one
at a time in a timing worker pinned to its cores.

A kernel that segfaults, hangs or loops forever kills (or gets killed with) only its worker,
which is replaced; its result records the error kind and the tuner goes on. Compiles overlap
measurements: each candidate is checked and timed as soon as it compiled, while the others keep
compiling on cores the timing does not use; compile workers pinned to the timing cores are paused
(SIGSTOP, by the timing worker) while a candidate is timed, so nothing of this runner competes
with a timing (with --threads equal to the cores, compiles thus run between timings and beside a
candidate's build and check). The timing worker holds a machine-wide file lock while it times.
Each result is reported (on_result) the moment it is known: a compile error at once, a
measurement when its worker answers.

Infrastructure is not a config's fault: a worker that dies on a config is replaced and the
config is tried once more (a second death is the config's verdict, worker_crashed, with the
signal named); a worker that cannot start is started again up to `start_attempts` times, after
which the rest of the batch is an INFRASTRUCTURE result; a compile cache that cannot be written
is an AutotuneError naming the directory, raised when the runner or a worker starts.

Which configs build the same kernel (their kernel keys: autotune.runner.KernelKeys) is worked out
in the compile workers too, since that runs the template's schedule(): a schedule() that crashes
or hangs a worker there gives no key (the worker is replaced), and its measurement records the
fault. Workers die with the process that started them (measure.worker.die_with_parent), even
while stopped: a driver killed while it paused them leaves none behind.

Example::

    >>> from autotune.measure.local import LocalRunner                         # doctest: +SKIP
    >>> from autotune.runner import MeasureInput                       # doctest: +SKIP
    >>> with LocalRunner() as runner:                                 # doctest: +SKIP
    ...     results = runner.run([MeasureInput(task, cfg)])
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from autotune.environment import settings, worker_env
from autotune.errors import AutotuneError
from autotune.runner import ErrorKind, MeasureInput, MeasureResult, OnResult, Refill
from autotune.space import Config
from autotune.task import Task
from autotune.target import check_executable
from autotune.timing_lock import lock_path
from autotune.measure.timing import TimingProtocol
from autotune.measure.worker import CacheNotWritable, WorkerSetup, check_cache


@dataclass(frozen=True)
class LocalRunnerOptions:
    """compile_workers: parallel compiles (default: cores); timeouts in seconds; protocol: how to
    time; max_spread: re-measure (up to `retries` times) when max/min of the samples exceeds it
    (or a sample was disturbed: measure.timing); retime_protocol: how each round of a re-timing
    times a kernel (None: `protocol`; a round's median of 3 samples, the rounds' median is the result);
    key_timeout: seconds a compile worker may take over one config's kernel key (its schedule and
    source; at most compile_timeout) before it is killed and that key is unknown."""
    compile_workers: int = 0
    compile_timeout: float = 120.0
    run_timeout: float = 60.0
    protocol: TimingProtocol = TimingProtocol(warmup=1, number=1, repeat=5, min_repeat_ms=20)
    max_spread: float = 1.10
    retries: int = 2
    seed: int = 0
    timing_cores: tuple[int, ...] = ()
    startup_timeout: float = 180.0
    cache_dir: str | None = None  # the workers' compile cache (AUTOTUNE_CACHE_DIR); default: the settings' one
    start_attempts: int = 3  # starts of a worker before the batch is an infrastructure fault
    retime_protocol: TimingProtocol | None = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=40)
    key_timeout: float = 30.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LocalRunnerOptions":
        """Options from JSON data (what an entry point that does not import measure/ passes to
        autotune.tuning.make_runner): TimingProtocol fields as objects.

        >>> LocalRunnerOptions.from_json({"run_timeout": 4, "protocol": {"repeat": 3}}).protocol.repeat
        3
        """
        fields = dict(d)
        for k in ("protocol", "retime_protocol"):
            if isinstance(fields.get(k), Mapping):
                fields[k] = TimingProtocol(**fields[k])
        if "timing_cores" in fields:
            fields["timing_cores"] = tuple(fields["timing_cores"])
        return cls(**fields)


def _answer(m: dict[str, Any]) -> MeasureResult:
    """The result a worker's answer to a measure or a retime gives."""
    cs = m.get("compile_s")
    if m.get("ok"):
        return MeasureResult(tuple(m["costs"]), None, "", cs, noisy=bool(m.get("noisy")),
                             contention=m.get("contention"), retimed=bool(m.get("retimed")))
    return MeasureResult(None, ErrorKind(m["error"]), m.get("message", ""), cs, retimed=bool(m.get("retimed")))


class _Unavailable(Exception):
    """No worker could be had: the rest of the batch is an infrastructure fault."""


def exit_reason(proc: subprocess.Popen) -> str:  # type: ignore[type-arg]
    """How a process ended: "killed by signal SIGSEGV", "exit code 3" (it is waited for briefly)."""
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


_spawns: "queue.Queue[tuple[list[str], dict[str, Any], queue.Queue[Any]]] | None" = None
_spawner_pid = 0
_spawner_lock = threading.Lock()


def _popen(argv: list[str], **kw: Any) -> subprocess.Popen:  # type: ignore[type-arg]
    """subprocess.Popen(argv, **kw), from a thread that lives as long as this process: a worker's
    parent-death signal (measure.worker.die_with_parent) follows the thread that started it, so a
    worker started from a caller's thread (a pool's, a test's) would die when that thread ends."""
    global _spawns, _spawner_pid
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **kw)
    with _spawner_lock:
        if _spawns is None or _spawner_pid != os.getpid():  # none yet, or this is a fork's child
            _spawns, _spawner_pid = queue.Queue(), os.getpid()
            threading.Thread(target=_serve_spawns, args=(_spawns,), name="autotune-spawner", daemon=True).start()
        spawns = _spawns
    done: queue.Queue[Any] = queue.Queue(maxsize=1)
    spawns.put((argv, kw, done))
    ok, got = done.get()
    if not ok:
        raise got
    return got  # type: ignore[no-any-return]


def _serve_spawns(spawns: "queue.Queue[tuple[list[str], dict[str, Any], queue.Queue[Any]]]") -> None:
    while True:
        argv, kw, done = spawns.get()
        try:
            done.put((True, subprocess.Popen(argv, **kw)))
        except BaseException as e:  # handed to the caller
            done.put((False, e))


class _Worker:
    """One worker subprocess speaking JSON lines; it dies with this process."""

    def __init__(self, setup: WorkerSetup) -> None:
        try:
            self.proc = _popen([sys.executable, "-m", "autotune.measure.worker", "--parent", str(os.getpid())],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env=worker_env(setup.target))
        except OSError as e:  # no process could be made (out of memory, too many processes)
            raise _Unavailable(f"cannot start a worker process: {e.strerror}") from None
        self.buf = b""
        self.ready = False
        try:
            self.send(setup.to_json())  # answered with {"ready": ...}; see LocalRunner._ensure_ready
        except EOFError:  # died at once: _ensure_ready reads the end of its output
            pass

    def send(self, msg: dict[str, Any]) -> None:
        """Send a request; EOFError if the worker is gone."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise EOFError from None

    def fileno(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def read_line(self) -> dict[str, Any] | None:
        """A complete reply if one is buffered or readable now; None if not yet. EOFError if dead."""
        while b"\n" not in self.buf:
            r, _, _ = select.select([self.fileno()], [], [], 0)
            if not r:
                return None
            chunk = os.read(self.fileno(), 1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def wait_line(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while True:
            got = self.read_line()
            if got is not None:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            select.select([self.fileno()], [], [], min(left, 1.0))

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


class LocalRunner:
    """Measures candidates on this machine in isolated worker processes."""

    @classmethod
    def from_options(cls, *, options: LocalRunnerOptions | Mapping[str, Any] | None = None,
                     address: str | None = None) -> LocalRunner:
        """The runners' factory (autotune.tuning.RUNNERS): options (None: the defaults); address: unused."""
        return cls(options) if options is not None else cls()

    def __init__(self, options: LocalRunnerOptions | Mapping[str, Any] = LocalRunnerOptions()) -> None:
        """options: LocalRunnerOptions, or their JSON form (LocalRunnerOptions.from_json)."""
        if isinstance(options, Mapping):
            options = LocalRunnerOptions.from_json(options)
        check_executable()  # a target this machine cannot run: one line, before any worker starts
        self.options = options
        self.n_compile = options.compile_workers or (os.cpu_count() or 1)
        cache = settings().cache_dir
        for d in dict.fromkeys([cache, options.cache_dir or cache]):
            try:
                check_cache(d)
            except CacheNotWritable as e:
                raise AutotuneError(str(e)) from None
        self.lock = lock_path(cache)
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        self.timing_cores = list(options.timing_cores) or allowed[:max(1, settings().threads)]
        # compile worker k runs on core_of[k]: the cores the timing leaves free first
        self._core_of = [c for c in allowed if c not in self.timing_cores] + [c for c in allowed if c in self.timing_cores]
        self._compilers: list[_Worker] = []
        self._timer: _Worker | None = None
        self._reserved: set[int] | None = None  # in a run's refill: the compile workers' slots the run has work on
        self.workers_replaced = 0
        self.start_failures = 0

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- workers ----------------------------------------------------------------------------
    def _start(self, role: str, slot: int = 0) -> _Worker:
        from autotune.templates import USER_MODULES
        here = settings()
        beside = tuple(p for p in sys.path if p) if USER_MODULES else ()  # a user's module may live beside their script
        cores = tuple(self.timing_cores) if role == "measure" else (self._compile_core(slot),)
        return _Worker(WorkerSetup(
            role, self.options.cache_dir or str(here.cache_dir), here.threads,
            cores=cores,
            lock_path=self.lock, template_modules=tuple(USER_MODULES), sys_path=beside, target=here.target))

    def _ready_compilers(self, n: int) -> None:
        """min(n, compile_workers) compile workers at least, every one ready (those missing are
        started together, then waited for)."""
        while len(self._compilers) < min(self.n_compile, n):
            self._compilers.append(self._start("compile", len(self._compilers)))
        for slot, w in enumerate(self._compilers):
            self._compilers[slot] = self._ensure_ready(w, "compile", slot)

    def _compile_core(self, slot: int) -> int:
        return self._core_of[slot % len(self._core_of)]

    def _ensure_ready(self, w: _Worker, role: str, slot: int = 0) -> _Worker:
        """w once it answered its setup, else a new worker of `role` (at most start_attempts starts
        in all). _Unavailable when none starts; AutotuneError when the environment forbids it."""
        attempt = 1
        while not w.ready:
            try:
                msg = w.wait_line(self.options.startup_timeout)
                why = (msg or {}).get("message") or f"no answer in {self.options.startup_timeout:g} s"
            except EOFError:
                msg, why = None, f"it exited ({exit_reason(w.proc)})"
            if msg and msg.get("ready"):
                w.ready = True
                break
            w.kill()
            self.start_failures += 1
            if msg and msg.get("environment"):
                raise AutotuneError(why)
            if attempt >= self.options.start_attempts:
                raise _Unavailable(f"a {role} worker could not start ({attempt} attempts): {why}")
            attempt += 1
            w = self._start(role, slot)
        return w

    def _payload(self, inp: MeasureInput, kind: str) -> dict[str, Any]:
        return {"kind": kind, **inp.task.to_data(), "config": inp.config.to_json(),
                "protocol": asdict(self.options.protocol), "seed": self.options.seed,
                "max_spread": self.options.max_spread, "retries": self.options.retries,
                **({"cutoff_s": inp.cutoff_s} if inp.cutoff_s is not None and kind == "measure" else {})}

    # ---- phases -----------------------------------------------------------------------------
    def _compile_all(self, inputs: list[MeasureInput], failed: Callable[[int, dict[str, Any]], None],
                     compiled: Callable[[int, dict[str, Any], tuple[int, ...]], None],
                     refill: Refill | None = None) -> None:
        """Compile every input in parallel, passing each failure to `failed` and each success to
        `compiled` (which measures it, stopping the compile workers' pids it is given while it
        times) the moment it is known, new compiles started first. A worker that dies is replaced
        and its input compiled once more before the death is the input's verdict. refill: asked
        for more inputs (appended to `inputs`) whenever a compile worker is idle with nothing
        queued; after an empty answer, again only once a result came in."""
        self._ready_compilers(len(inputs))
        deaths = [0] * len(inputs)
        lost = 0  # workers found dead before they got work
        queue = list(range(len(inputs)))
        busy: dict[int, tuple[int, float]] = {}  # worker slot -> (input index, deadline)
        ready: list[tuple[int, dict[str, Any]]] = []  # compiled, not yet measured
        answered = 0  # results reported
        asked_at: int | None = None  # results reported when refill last had nothing (None: it had something)

        def done(i: int, outcome: dict[str, Any]) -> None:
            nonlocal answered
            if outcome.get("ok"):
                ready.append((i, outcome))
            else:
                failed(i, outcome)
                answered += 1

        def may_refill() -> bool:
            return refill is not None and (asked_at is None or answered > asked_at)
        while queue or busy or ready or may_refill():
            if refill is not None and not queue and len(busy) < len(self._compilers) and may_refill():
                self._reserved = set(busy)  # kernel keys asked for meanwhile go to the idle workers only
                try:
                    more = list(refill())
                finally:
                    self._reserved = None
                asked_at = None if more else answered
                queue += range(len(inputs), len(inputs) + len(more))
                inputs += more
                deaths += [0] * len(more)
                self._ready_compilers(len(queue) + len(busy))
            for slot, w in enumerate(self._compilers):
                if slot not in busy and queue:
                    i = queue.pop(0)
                    try:
                        w.send(self._payload(inputs[i], "compile"))
                    except EOFError:  # it died idle (killed from outside): no fault of this config
                        lost += 1
                        if lost > self.options.start_attempts * len(self._compilers):
                            raise _Unavailable("compile workers keep dying before they get work "
                                               f"({exit_reason(w.proc)})") from None
                        queue.insert(0, i)
                        self._replace_compiler(slot)
                        w = self._compilers[slot]
                        continue
                    busy[slot] = (i, time.monotonic() + self.options.compile_timeout)
            if ready:  # measure one (new compiles already started), then look at the compilers again
                i, outcome = ready.pop(0)
                t0 = time.monotonic()
                with self._shared([s for s in busy if self._compile_core(s) in self.timing_cores]) as pids:
                    compiled(i, outcome, pids)
                answered += 1
                paused = time.monotonic() - t0  # a paused compile's deadline moves by the pause
                busy = {s: (j, d + paused if self._compile_core(s) in self.timing_cores else d)
                        for s, (j, d) in busy.items()}
            fds = [self._compilers[s] for s in busy]
            if fds and not ready and all(not w.buf for w in fds):  # wait for a reply, at most until the nearest deadline
                wait = max(0.0, min(d for _, d in busy.values()) - time.monotonic())
                select.select([w.fileno() for w in fds], [], [], min(wait, 0.5))
            for slot in list(busy):
                w = self._compilers[slot]
                i, deadline = busy[slot]
                try:
                    msg = w.read_line()
                except EOFError:
                    del busy[slot]
                    deaths[i] += 1
                    why = exit_reason(w.proc)
                    self._replace_compiler(slot)
                    if deaths[i] < 2:
                        queue.insert(0, i)  # maybe not this config's doing: once more on a new worker
                    else:
                        done(i, {"ok": False, "error": "worker_crashed",
                                 "message": f"compiling it killed the compile worker twice ({why})"})
                    continue
                if msg is not None:
                    del busy[slot]
                    done(i, msg)
                elif time.monotonic() > deadline:
                    del busy[slot]
                    self._replace_compiler(slot)
                    done(i, {"ok": False, "error": "compile_timeout",
                             "message": f"compile took over {self.options.compile_timeout:g} s"})

    @contextlib.contextmanager
    def _shared(self, slots: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """The pids of the compile workers of `slots` (they share cores with the timing), for the
        timing worker to stop while it times a kernel (measure.worker.stopped); afterwards they are
        let go on (SIGCONT) in any case: a timing worker killed or dead in the middle of a timing
        cannot have done it."""
        workers = [self._compilers[slot] for slot in slots]
        try:
            yield tuple(w.proc.pid for w in workers)
        finally:
            for w in workers:
                if w.proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(w.proc.pid, signal.SIGCONT)

    def _replace_compiler(self, slot: int) -> None:
        self._compilers[slot].kill()
        self.workers_replaced += 1
        self._compilers[slot] = self._ensure_ready(self._start("compile", slot), "compile", slot)

    def _measure(self, inp: MeasureInput, pause: tuple[int, ...] = ()) -> dict[str, Any]:
        """Check and time one compiled input, the processes `pause` stopped while it is timed; a
        worker death gets one more try on a new worker."""
        why = ""
        deaths = idle_deaths = 0
        while deaths < 2:
            if self._timer is None:
                self._timer = self._start("measure")
            self._timer = w = self._ensure_ready(self._timer, "measure")
            try:
                w.send({**self._payload(inp, "measure"), "pause": list(pause)})
            except EOFError:  # it died idle (killed from outside): no fault of this config
                w.kill()
                self._timer = None
                self.workers_replaced += 1
                idle_deaths += 1
                if idle_deaths > self.options.start_attempts:
                    raise _Unavailable(f"measure workers keep dying before they get work ({exit_reason(w.proc)})")
                continue
            try:
                msg = w.wait_line(self.options.run_timeout)
            except EOFError:
                deaths += 1
                why = exit_reason(w.proc)
                w.kill()
                self._timer = None
                self.workers_replaced += 1
                continue
            if msg is None:
                w.kill()
                self._timer = None
                self.workers_replaced += 1
                return {"ok": False, "error": "run_timeout",
                        "message": f"check and timing took over {self.options.run_timeout:g} s; the worker was killed"}
            return msg
        return {"ok": False, "error": "worker_crashed", "message": f"the kernel crashed its worker twice ({why})"}

    def retime(self, inputs: Sequence[MeasureInput], rounds: int) -> list[MeasureResult]:
        """Check the inputs again and time them in `rounds` alternating rounds in the timing worker
        (autotune.runner.Retimer). A worker that dies or hangs meanwhile gives INFRASTRUCTURE results:
        which kernel did it is unknown, and the search's timings stand."""
        results: list[MeasureResult] = [MeasureResult(None, ErrorKind.INFRASTRUCTURE, "not re-timed")] * len(inputs)
        groups: dict[str, list[int]] = {}
        for i, inp in enumerate(inputs):
            groups.setdefault(inp.task.key(), []).append(i)
        protocol = self.options.retime_protocol or self.options.protocol
        for idx in groups.values():
            task = inputs[idx[0]].task
            msg = {"kind": "retime", **task.to_data(), "configs": [inputs[i].config.to_json() for i in idx],
                   "rounds": rounds, "protocol": asdict(protocol), "seed": self.options.seed,
                   "max_spread": self.options.max_spread}
            answers = self._ask_timer(msg, self.options.run_timeout * max(1, rounds * len(idx)))
            for i, a in zip(idx, answers["results"] if answers else ()):
                results[i] = _answer({**a, "retimed": True})  # a failure too: the kernel failed its re-check
            if answers is None:
                why = "the timing worker died or hung while re-timing; the search's timings stand"
                for i in idx:
                    results[i] = MeasureResult(None, ErrorKind.INFRASTRUCTURE, why)
        return results

    def _ask_timer(self, msg: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """The timing worker's answer to one request, None if it died or did not answer in time
        (it is replaced)."""
        try:
            if self._timer is None:
                self._timer = self._start("measure")
            self._timer = w = self._ensure_ready(self._timer, "measure")
            w.send(msg)
            answer = w.wait_line(timeout)
        except (EOFError, _Unavailable):
            answer = None
        if answer is None and self._timer is not None:
            self._timer.kill()
            self._timer = None
            self.workers_replaced += 1
        return answer

    def kernel_keys(self, task: Task, configs: Sequence[Config]) -> list[str | None]:
        """The kernel key of each config (autotune.runner.KernelKeys), worked out by the compile
        workers, the configs split among them, one request each: a template's schedule() never
        runs in this process. A worker that dies on a config, or takes over key_timeout on it, is
        replaced and that config's key is None (its measurement records the fault); the configs
        after it are asked of the new worker. No worker at all: every key left is None."""
        keys: list[str | None] = [None] * len(configs)
        if not configs:
            return keys
        timeout = min(self.options.key_timeout, self.options.compile_timeout)
        data = task.to_data()
        reserved = self._reserved
        within_run = reserved is not None  # asked by a run's refill: its idle workers only, none started
        slots = [s for s in range(len(self._compilers) if within_run else self.n_compile) if s not in (reserved or ())]
        n = min(len(slots), len(configs))
        pending: dict[int, tuple[list[int], float]] = {}  # slot -> (configs asked, not answered; deadline)
        lost = 0  # workers found dead before they got work

        def ask(slot: int, idx: list[int]) -> None:
            nonlocal lost
            while idx:
                try:
                    self._compilers[slot].send({"kind": "keys", **data, "configs": [configs[i].to_json() for i in idx]})
                except EOFError:  # it died idle (killed from outside): no fault of these configs
                    lost += 1
                    if lost > self.options.start_attempts * n:
                        raise _Unavailable("compile workers keep dying before they get work") from None
                    self._replace_compiler(slot)
                    continue
                pending[slot] = (idx, time.monotonic() + timeout)
                return
        try:
            self._ready_compilers(n)
            for k, slot in enumerate(slots[:n]):
                ask(slot, list(range(len(configs)))[k::n])
            while pending:
                waiting = [self._compilers[s] for s in pending]
                if all(not w.buf for w in waiting):
                    wait = max(0.0, min(d for _, d in pending.values()) - time.monotonic())
                    select.select([w.fileno() for w in waiting], [], [], min(wait, 0.5))
                for slot in list(pending):
                    idx, deadline = pending.pop(slot)
                    w, dead = self._compilers[slot], False
                    try:
                        while idx and (msg := w.read_line()) is not None:
                            key = msg.get("key")
                            keys[idx.pop(0)] = key if isinstance(key, str) else None
                            deadline = time.monotonic() + timeout
                    except EOFError:
                        dead = True
                    if not idx:
                        continue
                    if dead or time.monotonic() > deadline:  # idx[0]'s schedule() crashed or hung it: no key
                        self._replace_compiler(slot)
                        ask(slot, idx[1:])
                    else:
                        pending[slot] = (idx, deadline)
        except _Unavailable:
            if not within_run:  # within a run, its own fault handling sees to the workers
                self.close()  # workers may hold unanswered requests: start afresh
        except BaseException:
            if not within_run:  # within a run, the run closes them
                self.close()  # an environment error, an interrupt: no unanswered request may stay behind
            raise
        return keys

    def run(self, inputs: Sequence[MeasureInput], on_result: OnResult | None = None) -> list[MeasureResult]:
        return self._run(list(inputs), on_result, None)

    def run_refilling(self, inputs: Sequence[MeasureInput], on_result: OnResult | None,
                      refill: Refill) -> list[MeasureResult]:
        """As run, asking refill() for more inputs whenever a compile worker would wait
        (autotune.runner.Refilling): compiling goes on across what were the ends of batches."""
        return self._run(list(inputs), on_result, refill)

    def _run(self, inputs: list[MeasureInput], on_result: OnResult | None, refill: Refill | None) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(inputs)

        def report(i: int, r: MeasureResult) -> None:
            results[i] = r
            if on_result is not None:
                on_result(i, r)

        def more() -> list[MeasureInput]:
            added = list(refill()) if refill is not None else []
            results.extend([None] * len(added))
            return added
        if not inputs:
            return []
        def measure(i: int, c: dict[str, Any], pause: tuple[int, ...]) -> None:
            report(i, _answer({**self._measure(inputs[i], pause), "compile_s": c.get("compile_s")}))  # the compile worker's time
        try:
            self._compile_all(inputs, lambda i, c: report(
                i, MeasureResult(None, ErrorKind(c["error"]), c.get("message", ""), c.get("compile_s"))), measure,
                more if refill is not None else None)
        except _Unavailable as e:
            self.close()  # workers may hold unanswered requests: start afresh next batch
            for i, r in enumerate(results):
                if r is None:
                    report(i, MeasureResult(None, ErrorKind.INFRASTRUCTURE, str(e)))
        except BaseException:
            self.close()  # refill raised, or an interrupt: no unanswered request may stay behind
            raise
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for w in self._compilers:
            w.close()
        self._compilers = []
        if self._timer is not None:
            self._timer.close()
            self._timer = None
