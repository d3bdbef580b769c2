"""Triton-style autotuning of a hand-written Numba kernel: each config's values become
compile-time constants of the kernel; every config is compiled, checked and timed by the common
runner (measure.local.LocalRunner's isolated worker processes, made by autotune.tuning.make_runner),
and the fastest correct one is kept per key. Its measurements are ordinary records of the common
log (autotune.records), so `autotune report LOG` shows them and `autotune replay LOG` re-verifies
them (see Replay below).

The kernel is one more kind of task (autotune.task.NumbaTask): it travels to the workers as data
(autotune.codegen.handwritten: its source, the module-level names it may read, its arguments'
shapes and dtypes, the config's constants), is rebuilt there, run on the caller's arguments (saved
as .npy files, no pickle), checked against the expected outputs and timed by the common timing
code (measure.handwritten, measure.timing). A config that fails to compile, crashes the worker,
raises, runs past its time limit or gives a wrong answer is recorded with its common `ErrorKind`
and tuning goes on; the caller's process never runs an untested config. Outputs (the arguments a
kernel writes, found by comparing them before and after a run, or named with `outputs=`, plus a
returned value) are checked against `reference=` (a Python function with the kernel's signature
that writes the same outputs or returns the same value; it runs in the caller's process), else
against the first config that runs; tolerances are the common table's
(autotune.codegen.handwritten.tolerance). The worker works on copies, so the caller's arrays see
exactly one run: the best config's, in this process. A timed call includes restoring
`restore_value` and zeroing `reset_to_zero` arguments.

Limits: the worker rebuilds the kernel from its source, never from pickled code, so the kernel
may use only its parameters, the config constants, builtins, the modules numpy, math, cmath and
numba (and names imported from them, such as `prange`) and int/float/bool constants of its
module. A helper function it calls, or a variable of an enclosing function, is an error when the
kernel is decorated. Arguments must be NumPy arrays or scalars of a numeric dtype or
bool/int/float/None. A record's task key is "numba:<name>:<source hash>|<key dims>|<dtype of the
first array>|threads=N": the key's array shapes and int values (a float key value is not in it).

Replay (SECURITY): a log is untrusted, and a kernel's source is code (Numba's `objmode` runs any
Python), so `autotune replay` compiles a numba record's source only when the user vouches for it:
`replay_log(log, trusted=[fn])` with the kernel (its `autotune_numba` object or the plain function,
whose source must have the record's SHA-256), or the environment variable
AUTOTUNE_TRUSTED_KERNELS, a comma-separated list of `module:function` names (imported: the user's
own code) and SHA-256 hex digests of sources the user trusts. Anything else is reported in one
line, "not replayable here: ...", and the other records replay as usual. A vouched record is
rebuilt in a worker and run on seeded random arguments of its recorded shapes and dtypes, checked
against the vouching kernel's `reference=` when it has one, else against the log's earliest
successful config of that key (the tuning's reference when it had none), and timed.

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

import functools
import importlib
import inspect
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from autotune.codegen.handwritten import (CONSTANTS, MODULES, build, check_spec, kernel_globals, kernel_source,
                                          random_arguments, same, source_sha256)
from autotune.environment import settings, trusted_kernels
from autotune.errors import AutotuneError, ShapeError
from autotune.records import Record, RecordLog
from autotune.runner import MeasureInput, MeasureResult, Runner
from autotune.space import Config
from autotune.target import current_target
from autotune.task import NumbaTask

__all__ = ["MODULES", "NumbaAutotuner", "TRUST_ENV", "autotune_numba", "build", "kernel_source", "replay_record",
           "trusted_sources"]

TRUST_ENV = "AUTOTUNE_TRUSTED_KERNELS"  # module:function names and SHA-256 digests of sources a replay may compile
STRATEGY = "autotune_numba"  # the records' strategy
NOT_REPLAYABLE = ("not replayable here: the kernel's source is code; vouch for it to rebuild it: `autotune replay LOG "
                  f"--trust module:function` (or the SHA-256 of its source), replay_log(trusted=[fn]) or {TRUST_ENV}")


# ---- measuring configs through the common runner ------------------------------------------------

def expected_outputs(reference: Callable[..., Any], spec: Mapping[str, Any], values: Sequence[Any]) -> dict[str, np.ndarray]:
    """The reference's outputs on copies of `values` (reset_to_zero arguments zeroed): the array
    arguments it writes (or the spec's `outputs`) and its returned value."""
    names = [a["name"] for a in spec["args"]]
    state = {n: (np.zeros_like(v) if n in spec["zero"] else v) for n, v in zip(names, values) if isinstance(v, np.ndarray)}
    copies = [state[n].copy() if n in state else v for n, v in zip(names, values)]
    ret = reference(*copies)
    want = {n: c for n, c in zip(names, copies) if n in state
            and (n in spec["outputs"] if spec["outputs"] is not None else not same(state[n], c))}
    if ret is not None:
        want["return"] = np.asarray(ret)
    return want


def save_expected(want: Mapping[str, np.ndarray], folder: Path) -> dict[str, str]:
    """`want` saved as .npy files in `folder` (no pickle): output name -> file name."""
    files = {}
    for n, v in want.items():
        np.save(folder / f"want_{n}.npy", np.asarray(v), allow_pickle=False)
        files[n] = f"want_{n}.npy"
    return files


def measure_configs(spec: Mapping[str, Any], configs: Sequence[Mapping[str, Any]], folder: Path, runner: Runner, *,
                    threads: int, expected: Mapping[str, str] | None, against: str = "",
                    on_result: Callable[[int, MeasureResult], None] | None = None,
                    on_first: Callable[[int, Mapping[str, str]], None] | None = None) -> list[MeasureResult]:
    """Measure every config of a kernel (its arguments saved in `folder` as arg_<name>.npy) with
    `runner`, one result per config in order. expected: output name -> .npy file in `folder`; None:
    the first config that works is the reference (configs measured one by one until one does;
    on_first(index, its output files) is told, and may raise to stop), then the rest in one batch.
    on_result(index, result) as each is known."""
    results: list[MeasureResult | None] = [None] * len(configs)

    def report(i: int, r: MeasureResult) -> None:
        results[i] = r
        if on_result is not None:
            on_result(i, r)

    def inp(i: int) -> MeasureInput:
        run = {"dir": str(folder), "prefix": f"c{i}_", "expected": dict(expected) if expected is not None else None,
               "against": against}
        return MeasureInput(NumbaTask.of(spec, threads, run), Config(configs[i]))
    start = 0
    while expected is None and start < len(configs):
        r = runner.run([inp(start)])[0]
        if r.ok:
            prefix = f"c{start}_"
            outs = {f.name[len(prefix):-4]: f.name for f in folder.glob(f"{prefix}*.npy")}
            if on_first is not None:
                on_first(start, outs)
            expected, against = outs, f"config {start} {dict(configs[start])}"
        report(start, r)
        start += 1
    if start < len(configs):
        runner.run([inp(i) for i in range(start, len(configs))], lambda j, r: report(start + j, r))
    return results  # type: ignore[return-value]


def to_record(task: NumbaTask, config: Mapping[str, Any], r: MeasureResult, target: Mapping[str, Any]) -> Record:
    """The common log record of one measurement of a hand-written kernel (its data included)."""
    return Record(op=task.op, shape=task.shape_dict, dtype=task.dtype, threads=task.threads, config=dict(config),
                  costs=list(r.costs) if r.ok else None, error=r.error.value if r.error else None,  # type: ignore[arg-type]
                  message=r.message[:2000], compile_seconds=r.compile_seconds, timestamp=r.timestamp,
                  target=dict(target), strategy=STRATEGY, noisy=r.noisy, contention=r.contention, numba=task.spec)


class _InOrder:
    """Calls `fn(i, r)` for results reported in any order, in index order, as soon as it can."""

    def __init__(self, fn: Callable[[int, MeasureResult], None]) -> None:
        self.fn, self.next, self.held = fn, 0, {}  # type: ignore[var-annotated]

    def __call__(self, i: int, r: MeasureResult) -> None:
        self.held[i] = r
        while self.next in self.held:
            self.fn(self.next, self.held.pop(self.next))
            self.next += 1


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
                if not isinstance(v, (*CONSTANTS, str)):
                    raise AutotuneError(f"autotune_numba config value {k}={v!r} must be a bool, int, float or str")
        self.key = list(key)
        self.reference, self.outputs = reference, (list(outputs) if outputs is not None else None)
        self.restore_value, self.reset_to_zero = list(restore_value), list(reset_to_zero)
        self.warmup, self.repeat, self.fastmath, self.rtol = warmup, repeat, fastmath, rtol
        self.compile_timeout, self.run_timeout = compile_timeout, run_timeout
        self.log = os.fspath(log) if log is not None else None
        constants = {k for c in self.configs for k in c}
        self.constants = sorted(constants)
        self.kernel = {"name": fn.__name__, "source": kernel_source(fn), "globals": kernel_globals(fn, constants)}
        self.compiled: dict[int, Callable[..., Any]] = {}
        self.best: dict[tuple, dict[str, Any]] = {}
        self.timings: dict[tuple, list[float]] = {}
        self.results: dict[tuple, list[MeasureResult]] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def _compiled(self, i: int) -> Callable[..., Any]:
        if i not in self.compiled:
            self.compiled[i] = build({**self.kernel, "fastmath": self.fastmath, "args": []}, self.configs[i],
                                     compile_now=False).dispatcher
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

    def _options(self) -> dict[str, Any]:
        """The LocalRunner options of this tuner (as JSON: this entry point does not import measure/)."""
        return {"compile_timeout": self.compile_timeout, "run_timeout": self.run_timeout,
                "compile_workers": 1,  # hand-written kernels compile fast: one worker, started once
                "protocol": {"warmup": self.warmup, "number": 1, "repeat": self.repeat, "min_repeat_ms": 10.0}}

    def _spec(self, values: list[Any], folder: Path) -> dict[str, Any]:
        """The kernel's data for this call (autotune.codegen.handwritten); its arrays saved in `folder`."""
        args: list[dict[str, Any]] = []
        for name, v in zip(self.params, values):
            if isinstance(v, (np.ndarray, np.generic, complex)):
                a = np.asarray(v)
                if a.dtype.kind not in "biufc":
                    raise AutotuneError(f"autotune_numba argument {name!r} has dtype {a.dtype}; the worker gets "
                                        "arrays without pickle: pass numeric arrays")
                if isinstance(v, np.ndarray):
                    np.save(folder / f"arg_{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
                    args.append({"name": name, "array": {"shape": list(a.shape), "dtype": a.dtype.name}})
                else:
                    x = a.item()
                    args.append({"name": name, "scalar": a.dtype.name,
                                 "value": [x.real, x.imag] if isinstance(x, complex) else x})
            elif v is None or isinstance(v, (bool, int, float)):
                args.append({"name": name, "value": v})
            else:
                raise AutotuneError(f"autotune_numba argument {name!r} is a {type(v).__name__}; pass NumPy arrays "
                                    "or bool/int/float scalars")
        try:
            return check_spec({**self.kernel, "constants": self.constants, "args": args, "key": self.key,
                               "outputs": self.outputs, "restore": self.restore_value, "zero": self.reset_to_zero,
                               "fastmath": self.fastmath, "rtol": self.rtol})
        except AutotuneError as e:
            raise AutotuneError(f"autotune_numba {self.fn.__name__}: {e}") from None

    def _tune(self, key: tuple, values: list[Any]) -> None:
        from autotune.tuning import make_runner
        self._start_state(values)
        log = RecordLog(self.log) if self.log is not None else None
        threads = settings().threads
        target = current_target(threads)
        with tempfile.TemporaryDirectory(prefix="autotune_numba_") as tmp:
            folder = Path(tmp)
            spec = self._spec(values, folder)
            task = NumbaTask.of(spec, threads)
            expected, against = None, ""
            if self.reference is not None:
                want = expected_outputs(self.reference, spec, values)
                self._check_writable(values, list(want))
                expected = save_expected(want, folder)
                against = f"the reference {getattr(self.reference, '__name__', '')}".rstrip()

            def first(i: int, outputs: Mapping[str, str]) -> None:
                self._check_writable(values, list(outputs))  # found out by the first run

            def record(i: int, r: MeasureResult) -> None:
                if log is not None:
                    log.append(to_record(task, self.configs[i], r, target))
            runner = make_runner("local", options=self._options())
            try:
                results = measure_configs(spec, self.configs, folder, runner, threads=threads, expected=expected,
                                          against=against, on_result=_InOrder(record), on_first=first)
            finally:
                runner.close()
        times = [r.median for r in results]
        self.results[key], self.timings[key] = results, times
        if not any(r.ok for r in results):
            lines = "; ".join(f"{c}: {r.error.value if r.error else '?'} {r.message}"
                              for c, r in zip(self.configs, results))
            raise AutotuneError(f"autotune_numba found no working config of {self.fn.__name__} for key {key}: {lines}")
        self.best[key] = self.configs[int(np.argmin(times))]


# ---- replaying a log's records ------------------------------------------------------------------

def trusted_sources(trusted: Iterable[Any] = ()) -> dict[str, Any]:
    """The kernel sources a replay may compile, by SHA-256: from `trusted` (autotune_numba
    objects, plain kernel functions, "module:function" names, SHA-256 hex digests) and the
    environment variable AUTOTUNE_TRUSTED_KERNELS (comma-separated names and digests). Each maps
    to what vouched for it (None for a bare digest). AutotuneError for a name that does not import.

    >>> trusted_sources(["ab" * 32]) == {"ab" * 32: None}
    True
    """
    items = list(trusted) + trusted_kernels()
    out: dict[str, Any] = {}
    for t in items:
        if isinstance(t, str):
            if re.fullmatch(r"[0-9a-fA-F]{64}", t):
                out.setdefault(t.lower(), None)
                continue
            module, _, attr = t.partition(":")
            try:
                t = functools.reduce(getattr, attr.split("."), importlib.import_module(module))
            except (ImportError, AttributeError, ValueError) as e:
                raise AutotuneError(f"{t!r} in {TRUST_ENV} or trusted= is neither a SHA-256 hex digest nor an "
                                    f"importable module:function ({type(e).__name__}: {e})") from None
        fn = t.fn if isinstance(t, NumbaAutotuner) else t
        if not callable(fn):
            raise AutotuneError(f"trusted kernels are functions, autotune_numba objects or SHA-256 digests, got {t!r}")
        out[source_sha256(kernel_source(fn))] = t
    return out


def replay_record(rec: Record, runner: Runner, *, trusted: Mapping[str, Any],
                  records: Sequence[Record] = ()) -> MeasureResult | str:
    """Rebuild, re-verify and time the hand-written kernel of a record (`rec.numba`) with `runner`,
    only if its source's SHA-256 is in `trusted` (trusted_sources); else the one-line reason it
    is not replayable here (nothing compiled). It runs on seeded random arguments of the recorded
    shapes and dtypes, checked against the vouching kernel's reference when it has one, else against
    the earliest successful config of its key in `records` (when that is another config).

    >>> replay_record(rec, runner, trusted=trusted_sources([my_kernel]), records=records)  # doctest: +SKIP
    """
    spec = check_spec(dict(rec.numba or {}))
    sha = spec["sha256"]
    if sha not in trusted:
        return NOT_REPLAYABLE
    voucher = trusted[sha]
    reference = None
    if voucher is not None:  # the user's own kernel: its globals (the log's constants are not needed)
        fn = voucher.fn if isinstance(voucher, NumbaAutotuner) else voucher
        spec = check_spec({**spec, "globals": kernel_globals(fn, set(spec["constants"]))})
        reference = voucher.reference if isinstance(voucher, NumbaAutotuner) else None
    config = rec.validated_config()
    configs: list[Mapping[str, Any]] = [config]
    if reference is None:
        ok = sorted((r for r in records if r.key == rec.key and r.ok and not r.retimed), key=lambda r: r.timestamp)
        if ok and ok[0].config_key() != rec.config_key():
            configs.insert(0, ok[0].validated_config())
    values = random_arguments(spec)
    with tempfile.TemporaryDirectory(prefix="autotune_numba_replay_") as tmp:
        folder = Path(tmp)
        for a, v in zip(spec["args"], values):
            if "array" in a:
                np.save(folder / f"arg_{a['name']}.npy", v, allow_pickle=False)
        expected, against = None, ""
        if reference is not None:
            expected = save_expected(expected_outputs(reference, spec, values), folder)
            against = f"the reference {getattr(reference, '__name__', '')}".rstrip()
        results = measure_configs(spec, configs, folder, runner, threads=rec.threads, expected=expected,
                                  against=against)
    return results[-1]


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

