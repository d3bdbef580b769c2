"""Triton-style autotuning of a hand-written Numba kernel: each config's values become
compile-time constants of the kernel; every config is compiled, checked and timed in an isolated
worker process, and the fastest correct one is kept per key.

A config that fails to compile, crashes the worker, raises, runs past its time limit or gives a
wrong answer is recorded with its `ErrorKind` and tuning goes on; the caller's process never runs
an untested config. Outputs (the arguments a kernel writes, found by comparing them before and
after a run, or named with `outputs=`, plus a returned value) are checked against
`reference=` (a Python function with the kernel's signature that writes the same outputs or
returns the same value), else against the first config that runs. The worker works on copies,
so the caller's arrays see exactly one run: the best config's, in this process.

Limits: the worker rebuilds the kernel from its source, never from pickled code, so the kernel
may use only its parameters, the config constants, builtins, the modules numpy, math, cmath and
numba (and names imported from them, such as `prange`) and int/float/bool constants of its
module. A helper function it calls, or a variable of an enclosing function, is an error when the
kernel is decorated. Arguments must be NumPy arrays (not of object dtype), NumPy scalars or
bool/int/float/None.

Example::

    >>> import numpy as np, autotune
    >>> @autotune.autotune_numba(configs=[{"BLOCK": 4}, {"BLOCK": 8}], key=["n"])   # doctest: +SKIP
    ... def add_one(x, out, n):
    ...     for b in range(0, n, BLOCK):
    ...         for i in range(b, min(b + BLOCK, n)):
    ...             out[i] = x[i] + 1.0
    >>> x = np.zeros(10); out = np.empty(10); add_one(x, out, n=10); float(out[0])   # doctest: +SKIP
    1.0
    >>> add_one.best[(10,)] in ({"BLOCK": 4}, {"BLOCK": 8})                          # doctest: +SKIP
    True
"""
from __future__ import annotations

import ast
import builtins
import dis
import functools
import importlib
import inspect
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from autotune.environment import settings, worker_env
from autotune.errors import AutotuneError, ShapeError
from autotune.runner import ErrorKind, MeasureResult
from autotune.timing_lock import TimingLock, lock_path

MODULES = ("numpy", "math", "cmath", "numba")  # the modules a kernel may use by name
_CONSTANTS = (bool, int, float)  # module-level values passed to the worker as constants
_REL_TOL = {"float16": 1e-2, "float32": 2e-3, "float64": 1e-9, "complex64": 2e-3, "complex128": 1e-9}
STARTUP_TIMEOUT = 180.0


# ---- the kernel as data: source, globals and config constants ---------------------------------

def kernel_source(fn: Callable[..., Any]) -> str:
    """The source of `fn` from its `def` line on (decorators stripped), dedented."""
    where = getattr(fn, "__qualname__", repr(fn))
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError) as e:
        raise AutotuneError(f"autotune_numba needs the source of {where} to rebuild it in a worker process "
                            f"({e}); define the kernel in a file or a notebook cell") from None
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.FunctionDef) or node.name != getattr(fn, "__name__", None):
        raise AutotuneError(f"autotune_numba tunes a function defined with `def`, got {where}")
    return "\n".join(src.splitlines()[node.lineno - 1:node.end_lineno]) + "\n"


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def kernel_globals(fn: Callable[..., Any], constants: set[str]) -> dict[str, dict[str, Any]]:
    """How the worker rebuilds each global name the kernel reads, other than config constants and
    builtins: {"module": name}, {"from": module, "attr": name} or {"value": int/float/bool}."""
    if fn.__code__.co_freevars:
        raise AutotuneError(f"autotune_numba kernel {fn.__name__} uses {', '.join(fn.__code__.co_freevars)} of an "
                            "enclosing function; the worker rebuilds the kernel from its source alone: pass them "
                            "as arguments or config constants")
    spec: dict[str, dict[str, Any]] = {}
    for name in sorted(_global_names(fn.__code__) - constants):
        if name not in fn.__globals__:
            if hasattr(builtins, name):
                continue
            raise AutotuneError(f"autotune_numba kernel {fn.__name__} reads {name!r}, which is neither defined when "
                                f"it is decorated nor a config constant (constants: {sorted(constants)})")
        v = fn.__globals__[name]
        if isinstance(v, types.ModuleType) and v.__name__.split(".")[0] in MODULES:
            spec[name] = {"module": v.__name__}
        elif isinstance(v, _CONSTANTS):
            spec[name] = {"value": v}
        else:
            attr = getattr(v, "__name__", name)
            home = next((m for m in MODULES if getattr(importlib.import_module(m), attr, None) is v), None)
            if home is None:
                raise AutotuneError(
                    f"autotune_numba kernel {fn.__name__} reads the global {name!r} ({type(v).__name__}); the "
                    "worker rebuilds the kernel from its source with only config constants, builtins, the modules "
                    f"{', '.join(MODULES)} (and names imported from them) and int/float/bool constants: inline "
                    f"{name!r} into the kernel or pass it as an argument")
            spec[name] = {"from": home, "attr": attr}
    return spec


def build(kernel: Mapping[str, Any], config: Mapping[str, Any], fastmath: bool) -> Any:
    """The Numba dispatcher of `kernel` ({"name", "source", "globals"}) with `config`'s constants."""
    import linecache

    import numba
    g: dict[str, Any] = {"__builtins__": builtins, "__name__": "__autotune_numba__"}
    for name, how in kernel["globals"].items():
        if "module" in how:
            g[name] = importlib.import_module(how["module"])
        elif "from" in how:
            g[name] = getattr(importlib.import_module(how["from"]), how["attr"])
        else:
            g[name] = how["value"]
    g.update(config)
    filename = f"<autotune_numba {kernel['name']}>"
    linecache.cache[filename] = (len(kernel["source"]), None, kernel["source"].splitlines(True), filename)
    exec(compile(kernel["source"], filename, "exec"), g)
    return numba.njit(nogil=True, fastmath=fastmath)(g[kernel["name"]])


# ---- the worker process (python -m autotune.numba_tune) -----------------------------------------

def _fmt(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {' | '.join(lines)}"[:1000]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _load_args(req: Mapping[str, Any]) -> list[Any]:
    args = []
    for a in req["args"]:
        if "npy" in a:
            v = np.load(Path(req["dir"]) / a["npy"], allow_pickle=False)
            args.append(v[()] if a.get("scalar") else v)
        else:
            args.append(a["value"])
    return args


def _measure(req: Mapping[str, Any], say: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Compile (then say so), run once and save the outputs, then time `repeat` runs after `warmup`."""
    import numba
    t0 = time.thread_time()  # CPU time: a paused or crowded worker is not charged for waiting
    try:
        args = _load_args(req)
        kernel = build(req["kernel"], req["config"], req["fastmath"])
        kernel.compile(tuple(numba.typeof(a) for a in args))
    except Exception as e:
        return {"ok": False, "error": ErrorKind.COMPILE_ERROR.value, "message": _fmt(e)}
    say({"compiled": True, "compile_s": time.thread_time() - t0})
    names = req["names"]
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    initial = {i: args[i].copy() for i in arrays if names[i] in req["restore"]}
    zero = [i for i in arrays if names[i] in req["zero"]]

    def reset() -> None:
        for i, v in initial.items():
            args[i][...] = v
        for i in zero:
            args[i][...] = 0

    try:
        reset()
        before = {i: args[i].copy() for i in arrays}
        ret = kernel(*args)
        if req["outputs"] is not None:
            changed = [names[i] for i in arrays if names[i] in req["outputs"]]
        else:
            changed = [names[i] for i in arrays if not _same(before[i], args[i])]
        del before
        out = Path(req["dir"])
        for i in arrays:
            if names[i] in changed:
                np.save(out / f"{req['prefix']}{names[i]}.npy", args[i], allow_pickle=False)
        returned = ret is not None and np.asarray(ret).dtype != object
        if returned:
            np.save(out / f"{req['prefix']}return.npy", np.asarray(ret), allow_pickle=False)
        samples = []
        with TimingLock(req["lock"]):
            for _ in range(req["warmup"]):
                reset()
                kernel(*args)
            for _ in range(req["repeat"]):
                reset()
                t = time.perf_counter()
                kernel(*args)
                samples.append(time.perf_counter() - t)
        return {"ok": True, "costs": samples, "changed": changed, "returned": returned}
    except Exception as e:
        return {"ok": False, "error": ErrorKind.RUNTIME_ERROR.value, "message": _fmt(e)}


def _serve() -> None:
    """Answer JSON-line measure requests on stdin: {"ready": true} first, then per request a
    {"compiled": ...} line once compiled (unless compiling failed) and the result line."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a kernel's or Numba's prints must not corrupt the answers
    sys.stdout = sys.stderr
    import numba  # noqa: F401 (imported before saying ready, so the compile timeout covers compiling only)

    def say(msg: dict[str, Any]) -> None:
        answers.write(json.dumps(msg) + "\n")

    say({"ready": True})
    for line in sys.stdin:
        if line.strip():
            say(_measure(json.loads(line), say))


class _Worker:
    """One worker subprocess speaking JSON lines; killed after a crash, a timeout or the tuning."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "autotune.numba_tune"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=worker_env())
        self.buf = b""
        msg = self._reply(STARTUP_TIMEOUT) if self.alive() else None
        if not msg or not msg.get("ready"):
            self.kill()
            raise AutotuneError(f"the autotune_numba worker did not start ({self.death()}); "
                                f"run `{sys.executable} -m autotune.numba_tune` to see why")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def death(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "no answer"
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit code {rc}"

    def _reply(self, timeout: float) -> dict[str, Any] | None:
        """The next answer; None if none came within `timeout` s. EOFError if the worker died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.proc.wait()
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def measure(self, req: dict[str, Any], compile_timeout: float, run_timeout: float) -> dict[str, Any]:
        """The worker's answer, or a crash/timeout outcome (then the worker is dead)."""
        assert self.proc.stdin is not None
        compile_s = None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            msg = self._reply(compile_timeout)
            if msg is None:
                self.kill()
                return {"ok": False, "error": ErrorKind.COMPILE_TIMEOUT.value,
                        "message": f"compiling took over {compile_timeout:g} s"}
            if not msg.get("compiled"):
                return msg
            compile_s = msg["compile_s"]
            msg = self._reply(run_timeout)
            if msg is None:
                self.kill()
                return {"ok": False, "error": ErrorKind.RUN_TIMEOUT.value, "compile_s": compile_s,
                        "message": f"checking and timing took over {run_timeout:g} s"}
            return {**msg, "compile_s": compile_s}
        except (EOFError, BrokenPipeError):
            self.kill()
            return {"ok": False, "error": ErrorKind.WORKER_CRASHED.value, "compile_s": compile_s,
                    "message": f"the worker died while {'running' if compile_s is not None else 'compiling'} "
                               f"({self.death()})"}

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


# ---- checking outputs --------------------------------------------------------------------------

def _differs(got: np.ndarray, want: np.ndarray, name: str, against: str, rtol: float | None) -> str | None:
    """Why `got` is not `want` (None if it is): elements compared with a tolerance relative to max|want|."""
    if got.shape != want.shape:
        return f"{name} has shape {list(got.shape)}, {against} gives {list(want.shape)}"
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        tol = rtol if rtol is not None else max(_REL_TOL.get(d.name, 1e-3 if d.kind in "fc" else 0.0)
                                                for d in (got.dtype, want.dtype))
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max()) if finite.size else 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~((got == want) | (np.abs(got - want) <= tol * scale) | (np.isnan(got) & np.isnan(want)))
    else:
        bad = got != want
    n = int(np.count_nonzero(bad))
    if not n:
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    return (f"{n} of {want.size} elements of {name} differ from {against}, first at {list(first)}: "
            f"{got[first].item()!r} instead of {want[first].item()!r}")


def _wrong(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], named: bool, against: str,
           rtol: float | None) -> str | None:
    """Why a config's outputs `got` are wrong against `want` (None if right). Unless the outputs
    were named, writing an argument `against` leaves alone is wrong too."""
    extra = sorted(set(got) - set(want) - {"return"}) if not named else []
    if extra:
        return (f"writes {', '.join(extra)}, which {against} leaves unchanged (if that is scratch space, "
                "name the outputs with outputs=[...])")
    for name, w in want.items():
        if name not in got:
            return f"returns nothing, {against} returns a value" if name == "return" else f"{name} is not written"
        why = _differs(np.asarray(got[name]), np.asarray(w), name, against, rtol)
        if why:
            return why
    return None


# ---- the autotuner -----------------------------------------------------------------------------

class NumbaAutotuner:
    """A hand-written kernel tuned over `configs` per `key`; call it like the kernel.

    On the first call with a new key, every config is measured in a worker process (see the
    module docstring); `best[key]` is then the fastest correct config, `timings[key]` the median
    seconds per config (inf where it failed) and `results[key]` each config's MeasureResult
    (error kind and message where it failed). Later calls with that key run the best config's
    kernel in this process. Raises AutotuneError if no config works.
    """

    def __init__(self, fn: Callable[..., Any], configs: Sequence[Mapping[str, Any]], key: Sequence[str], *,
                 reference: Callable[..., Any] | None = None, outputs: Sequence[str] | None = None,
                 restore_value: Sequence[str] = (), reset_to_zero: Sequence[str] = (), warmup: int = 1,
                 repeat: int = 5, fastmath: bool = False, compile_timeout: float = 120.0,
                 run_timeout: float = 60.0, rtol: float | None = None,
                 log: str | os.PathLike[str] | None = None) -> None:
        if not configs:
            raise AutotuneError("autotune_numba needs at least one config")
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters)
        where = f"{getattr(fn, '__name__', fn)}{tuple(self.params)}"
        for what, names in (("key", key), ("outputs", outputs or ()), ("restore_value", restore_value),
                            ("reset_to_zero", reset_to_zero)):
            for k in names:
                if k not in self.params:
                    raise AutotuneError(f"autotune_numba {what} {k!r} is not a parameter of {where}")
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in self.signature.parameters.values()):
            raise AutotuneError(f"autotune_numba kernels take named parameters only, {where} has *args or **kwargs")
        if warmup < 0 or repeat < 1 or compile_timeout <= 0 or run_timeout <= 0:
            raise AutotuneError("autotune_numba needs warmup >= 0, repeat >= 1 and positive timeouts")
        self.configs = [dict(c) for c in configs]
        for c in self.configs:
            for k, v in c.items():
                if not isinstance(k, str) or not k.isidentifier() or k in self.params:
                    raise AutotuneError(f"autotune_numba config key {k!r} must be an identifier that is not a "
                                        f"parameter of {where}")
                if not isinstance(v, (*_CONSTANTS, str)):
                    raise AutotuneError(f"autotune_numba config value {k}={v!r} must be a bool, int, float or str")
        self.key = list(key)
        self.reference, self.outputs = reference, (list(outputs) if outputs is not None else None)
        self.restore_value, self.reset_to_zero = list(restore_value), list(reset_to_zero)
        self.warmup, self.repeat, self.fastmath, self.rtol = warmup, repeat, fastmath, rtol
        self.compile_timeout, self.run_timeout = compile_timeout, run_timeout
        self.log = os.fspath(log) if log is not None else None
        constants = {k for c in self.configs for k in c}
        self.kernel = {"name": fn.__name__, "source": kernel_source(fn), "globals": kernel_globals(fn, constants)}
        self.compiled: dict[int, Callable[..., Any]] = {}
        self.best: dict[tuple, dict[str, Any]] = {}
        self.timings: dict[tuple, list[float]] = {}
        self.results: dict[tuple, list[MeasureResult]] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def _compiled(self, i: int) -> Callable[..., Any]:
        if i not in self.compiled:
            self.compiled[i] = build(self.kernel, self.configs[i], self.fastmath)
        return self.compiled[i]

    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.fn.__name__}(): {e}") from None
        bound.apply_defaults()
        return [bound.arguments[p] for p in self.params]

    def _key(self, values: list[Any]) -> tuple:
        return tuple(tuple(v.shape) if isinstance(v, np.ndarray) else v
                     for v in (values[self.params.index(k)] for k in self.key))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._bind(args, kwargs)
        key = self._key(values)
        self._check_writable(values, list(self.outputs or []) + self.restore_value + self.reset_to_zero)
        if key not in self.best:
            with self._lock:
                if key not in self.best:
                    self._tune(key, values)
        return self._compiled(self.configs.index(self.best[key]))(*values)

    def _check_writable(self, values: list[Any], written: Sequence[str]) -> None:
        """ShapeError (a ValueError) if an argument the kernel writes is a read-only array: Numba
        refuses it only after tuning, in a page-long typing error (a read-only memmap included)."""
        for name, v in zip(self.params, values):
            if name in written and isinstance(v, np.ndarray) and not v.flags.writeable:
                raise ShapeError(f"autotune_numba {self.fn.__name__}: argument {name!r} is read-only but the kernel "
                                 f"writes it: pass a writable array (np.array({name}) copies it)")

    # ---- tuning ---------------------------------------------------------------------------
    def _start_state(self, values: list[Any]) -> dict[str, np.ndarray]:
        """Every array argument as a run starts: the caller's values, zeros for reset_to_zero."""
        state = {}
        for name, v in zip(self.params, values):
            if name in self.restore_value + self.reset_to_zero and not isinstance(v, np.ndarray):
                raise AutotuneError(f"autotune_numba restore_value/reset_to_zero argument {name!r} must be a "
                                    f"NumPy array, got {type(v).__name__}")
            if isinstance(v, np.ndarray):
                state[name] = np.zeros_like(v) if name in self.reset_to_zero else v
        return state

    def _save_args(self, values: list[Any], folder: Path) -> list[dict[str, Any]]:
        out = []
        for name, v in zip(self.params, values):
            if isinstance(v, (np.ndarray, np.generic, complex)):
                a = np.asarray(v)
                if a.dtype.hasobject:
                    raise AutotuneError(f"autotune_numba argument {name!r} has dtype {a.dtype}; the worker gets "
                                        "arrays without pickle: pass numeric arrays")
                np.save(folder / f"arg_{name}.npy", a, allow_pickle=False)
                out.append({"npy": f"arg_{name}.npy", "scalar": not isinstance(v, np.ndarray)})
            elif v is None or isinstance(v, (bool, int, float)):
                out.append({"value": v})
            else:
                raise AutotuneError(f"autotune_numba argument {name!r} is a {type(v).__name__}; pass NumPy arrays "
                                    "or bool/int/float scalars")
        return out

    def _expected(self, values: list[Any], state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The reference's outputs: the arguments it writes (or `outputs`) and its returned value."""
        assert self.reference is not None
        copies = [state[n].copy() if n in state else v for n, v in zip(self.params, values)]
        ret = self.reference(*copies)
        want = {n: c for n, c in zip(self.params, copies) if n in state
                and (n in self.outputs if self.outputs is not None else not _same(state[n], c))}
        if ret is not None:
            want["return"] = np.asarray(ret)
        return want

    def _tune(self, key: tuple, values: list[Any]) -> None:
        state = self._start_state(values)
        cache = settings().cache_dir
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="autotune_numba_") as tmp:
            folder = Path(tmp)
            base = {"kind": "measure", "kernel": self.kernel, "names": self.params, "dir": tmp,
                    "args": self._save_args(values, folder), "outputs": self.outputs,
                    "restore": self.restore_value, "zero": self.reset_to_zero, "warmup": self.warmup,
                    "repeat": self.repeat, "fastmath": self.fastmath, "lock": lock_path(cache)}
            want = self._expected(values, state) if self.reference is not None else None
            against = f"the reference {getattr(self.reference, '__name__', '')}".rstrip()
            results: list[MeasureResult] = []
            worker: _Worker | None = None
            try:
                for i, config in enumerate(self.configs):
                    if worker is None or not worker.alive():
                        worker = _Worker()
                    msg = worker.measure({**base, "config": config, "prefix": f"c{i}_"},
                                         self.compile_timeout, self.run_timeout)
                    if msg.get("ok"):
                        self._check_writable(values, msg["changed"])  # found out by the first run
                        got = {n: np.load(folder / f"c{i}_{n}.npy", allow_pickle=False)
                               for n in msg["changed"] + (["return"] if msg["returned"] else [])}
                        if want is None:
                            want, against = dict(got), f"config {i} {config}"
                        got = {**{n: state[n] for n in want if n not in got and n in state}, **got}
                        why = _wrong(got, want, self.outputs is not None, against, self.rtol)
                        if why:
                            msg = {"ok": False, "error": ErrorKind.WRONG_ANSWER.value, "message": why,
                                   "compile_s": msg.get("compile_s")}
                    for f in folder.glob(f"c{i}_*.npy"):
                        f.unlink()
                    results.append(MeasureResult(tuple(msg["costs"]) if msg.get("ok") else None,
                                                 None if msg.get("ok") else ErrorKind(msg["error"]),
                                                 msg.get("message", ""), msg.get("compile_s")))
                    self._record(key, config, results[-1])
            finally:
                if worker is not None:
                    worker.kill()
        times = [r.median for r in results]
        self.results[key], self.timings[key] = results, times
        if not any(r.ok for r in results):
            lines = "; ".join(f"{c}: {r.error.value if r.error else '?'} {r.message}"
                              for c, r in zip(self.configs, results))
            raise AutotuneError(f"autotune_numba found no working config of {self.fn.__name__} for key {key}: {lines}")
        self.best[key] = self.configs[int(np.argmin(times))]

    def _record(self, key: tuple, config: Mapping[str, Any], r: MeasureResult) -> None:
        if self.log is None:
            return
        line = {"kernel": self.fn.__qualname__, "key": [list(k) if isinstance(k, tuple) else k for k in key],
                "config": dict(config), "error": r.error.value if r.error else None, "message": r.message,
                "costs": list(r.costs) if r.costs else None, "compile_s": r.compile_seconds, "timestamp": r.timestamp}
        with open(self.log, "a") as f:
            f.write(json.dumps(line, default=lambda v: v.item() if isinstance(v, np.generic) else str(v)) + "\n")


def autotune_numba(*, configs: Sequence[Mapping[str, Any]], key: Sequence[str], reference: Callable[..., Any] | None = None,
                   outputs: Sequence[str] | None = None, restore_value: Sequence[str] = (),
                   reset_to_zero: Sequence[str] = (), warmup: int = 1, repeat: int = 5, fastmath: bool = False,
                   compile_timeout: float = 120.0, run_timeout: float = 60.0, rtol: float | None = None,
                   log: str | os.PathLike[str] | None = None) -> Callable[[Callable[..., Any]], NumbaAutotuner]:
    """Decorator: tune the compile-time constants of a hand-written Numba kernel per key, each
    config measured and checked in a worker process (see NumbaAutotuner and this module's docstring).

    configs: constants per config; key: parameters whose shapes (arrays) or values select a tuning;
    reference: a function with the kernel's signature giving the right outputs (default: the first
    config that runs); outputs: the parameters the kernel writes (default: those a run changes);
    restore_value / reset_to_zero: array parameters the kernel updates in place, restored to the
    caller's values / zeroed before every measured run; warmup, repeat: runs before and timed;
    timeouts in seconds; rtol: tolerance relative to max|expected| (default by dtype); log: a JSON
    lines file receiving one line per measured config.

    Example::

        >>> @autotune_numba(configs=[{"BLOCK": 4}, {"BLOCK": 8}], key=["x"], restore_value=["acc"])  # doctest: +SKIP
        ... def accumulate(acc, x):
        ...     for b in range(0, x.shape[0], BLOCK):
        ...         for i in range(b, min(b + BLOCK, x.shape[0])):
        ...             acc[i] += x[i]
    """
    def wrap(fn: Callable[..., Any]) -> NumbaAutotuner:
        return NumbaAutotuner(fn, configs, key, reference=reference, outputs=outputs, restore_value=restore_value,
                              reset_to_zero=reset_to_zero, warmup=warmup, repeat=repeat, fastmath=fastmath,
                              compile_timeout=compile_timeout, run_timeout=run_timeout, rtol=rtol, log=log)
    return wrap


if __name__ == "__main__":
    _serve()
