"""The Python API: tuned ops and applying logs (autotuning a hand-written Numba kernel: autotune/numba_tune.py).

A tuned op from a template::

    >>> import autotune                                                  # doctest: +SKIP
    >>> matmul = autotune.op("matmul", log="mm.jsonl", trials=32)         # doctest: +SKIP
    >>> C = matmul(A, B)   # new shape: best from the log, else tune  # doctest: +SKIP

A tuned op from a compute definition (no template; the space is derived by rules)::

    >>> from autotune import te                                           # doctest: +SKIP
    >>> @autotune.op(log="scale.jsonl", policy="log")                    # doctest: +SKIP
    ... def scale(A):
    ...     return te.compute(A.shape, lambda i, j: A[i, j] * 2.0, name="out")

Every decorated op inside `with autotune.apply_history("a.jsonl", "b.jsonl"):` looks there first.

Inputs are checked before anything is looked up, tuned or logged: their number, ranks, shapes
(every dim two inputs share must agree), one dtype of float32 or float64 (a definition is
dtype-generic: float64 arrays tune and run at float64), and `out=` (shape, dtype, C-contiguous,
writable, not overlapping an input). A mismatch is a one-line ShapeError (a ValueError) naming the
argument, what it needs and how to fix it. Inputs of any strides are copied to C order first.

NaN and Inf: the kernels are compiled with fast-math flags that assume finite values (nnan,
ninf), so on a NaN or Inf they may answer anything (a max that drops the NaN). With
check_finite=True (the default) every call first checks its inputs (one read of each); a call
whose inputs hold NaN or Inf is computed by the op's NumPy reference instead, with a
RuntimeWarning: the answer is NumPy's. A kernel made of sums and products only (matmul,
convolutions; autotune.ir.nonfinite) is compiled without nnan and ninf and checks its output
after the run instead (NaN or Inf there: an input's, or an overflow, and NumPy answers), which
reads less than its inputs. check_finite=False skips the check (the kernel then assumes finite
inputs). Zeros: -0.0 and 0.0 compare equal, but the sign of a zero in
the output may differ from NumPy's (nsz). Per operator: the table in templates/__init__.py.

    >>> mm = autotune.op("matmul", policy="default")                     # doctest: +SKIP
    >>> mm(np.ones(4, np.float32), np.ones((4, 4), np.float32))           # doctest: +SKIP
    Traceback (most recent call last):
    autotune.errors.ShapeError: matmul: input A must have 2 dimensions [MxK], got shape (4,)
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import operator
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from autotune.codegen import Kernel
from autotune.codegen.buffers import check_disjoint
from autotune.codegen.invoke import RAN, STRIDED
from autotune.errors import AutotuneError, ShapeError
from autotune.records import Log, Record, best_per_task, from_target, preference
from autotune.retime import busy_note
from autotune.target import current_target
from autotune.task import DTYPES, Argument, Task, by_reference, check_out, first_nonfinite
from autotune.templates import Template, get_template, register

POLICIES = ("tune", "log", "default")
_logs: dict[str, Log] = {}  # each log a tuned op consults, read once and then followed
_logs_lock = threading.Lock()


def _records(path: str | os.PathLike[str]) -> list[Record]:
    """The records of a log, read once per process and then only its new lines (autotune.records.Log)."""
    key = os.path.abspath(path)
    with _logs_lock:
        log = _logs.get(key)
        if log is None:
            log = _logs[key] = Log(key)
        else:
            log.refresh()
        return list(log.records)

_history: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("autotune_history", default=())


@contextlib.contextmanager
def apply_history(*logs: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, every tuned op uses the best records of these logs first."""
    for p in logs:
        if not os.path.exists(p):
            raise AutotuneError(f"apply_history: no tuning log at {os.fspath(p)}")
    token = _history.set(_history.get() + tuple(os.fspath(p) for p in logs))
    try:
        yield
    finally:
        _history.reset(token)


@dataclass(frozen=True)
class OpOptions:
    """log: where measurements go and best configs come from; policy: what a call with a shape
    no log covers does — "tune" within `trials`/`timeout_s`, "log" (use the log, else a default
    schedule, said once), "default" (never tune); strategy, cost_model, pretrained: the search
    (autotune.tuning.make_search); threads: for parallel kernels; any_target: also use records
    measured on a machine of another ISA (with a warning); verbose: a progress bar while tuning on
    an interactive stderr, else one summary line (False: silent); check_finite: check every call's
    inputs for NaN and Inf and compute such a call with the NumPy reference (False: skip the check;
    the kernel assumes finite inputs, see the module docstring)."""
    log: str | None = None
    policy: str = "tune"
    trials: int = 16
    timeout_s: float | None = None
    strategy: str | None = None
    cost_model: str | None = None
    pretrained: str | None = None
    threads: int | None = None
    seed: int = 0
    any_target: bool = False
    verbose: bool = True
    check_finite: bool = True


class TunedOp:
    """A callable op: NumPy arrays in, NumPy array out, with one compiled kernel per shape.

    The first call with new (shapes, dtypes, strides) checks the arrays against the op's arguments
    (task_for: a mismatch is a one-line ShapeError naming the input, the expected and the given
    shape, before anything is tuned or logged) and finds the kernel (log, tuning or a default
    schedule); later calls go straight to it. `out=` (a writable C-contiguous array of the
    output's shape and dtype) is written instead of a new array. Inputs holding NaN or Inf are
    computed by the NumPy reference unless check_finite=False (see the module docstring).
    """

    def __init__(self, template: Template, options: OpOptions) -> None:
        if options.policy not in POLICIES:
            raise AutotuneError(f"policy must be one of {POLICIES}, got {options.policy!r}")
        if options.policy == "tune" and options.log is None:
            raise AutotuneError("policy='tune' needs a log=... file to record measurements in")
        self.template = template
        self.options = options
        self.kernels: dict[tuple, Kernel] = {}
        self.sources: dict[tuple, str] = {}  # "log", "tuned" or "default": where each kernel came from
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: call key -> prepared call (scratch is per thread)
        self._warned: set[tuple] = set()
        functools.update_wrapper(self, template.define)  # type: ignore[arg-type]
        self.__name__ = template.name

    def configure(self, **changes: Any) -> "TunedOp":
        """The same op with some options changed (log, policy, trials, ...): a new op, new caches."""
        import dataclasses
        if "log" in changes and changes["log"] is not None:
            changes["log"] = os.fspath(changes["log"])
        return TunedOp(self.template, dataclasses.replace(self.options, **changes))

    def task_for(self, *arrays: np.ndarray) -> Task:
        """The task of a call on these arrays, checked against the op's arguments first: their
        number and ranks, one dtype (float32 or float64), and every array's shape (so two inputs
        that disagree on a dim they share are refused). A one-line ShapeError (DefinitionError for
        a definition op's count or rank) names the input and the fix; nothing is tuned before.

        >>> autotune.op("matmul", policy="default").task_for(np.zeros((8, 4)), np.zeros((4, 2))).key()  # doctest: +SKIP
        'matmul|M=8,N=2,K=4|float64|threads=2'
        """
        name = self.template.name
        for i, a in enumerate(arrays):
            if isinstance(a, np.ma.MaskedArray):
                raise ShapeError(f"{name}: input {i} is a masked array, which tuned ops do not support: pass "
                                 "a.filled(value) or a.compressed()")
        arrays = tuple(np.asarray(a) for a in arrays)
        shape = self.template.shape_from(*arrays)  # the number of arrays and their ranks
        names = self.template.argument_names()
        for n, a in zip(names, arrays):
            if a.dtype.name not in DTYPES:
                raise ShapeError(f"{name}: input {n} has dtype {a.dtype}; tuned ops compute in float32 or "
                                 f"float64: pass {n}.astype(np.float32)")
        dtypes = {a.dtype.name for a in arrays}
        if len(dtypes) != 1:
            given = ", ".join(f"{n} {a.dtype}" for n, a in zip(names, arrays))
            other = next(n for n, a in zip(names, arrays) if a.dtype != arrays[0].dtype)
            raise ShapeError(f"{name}: all inputs must share one dtype, got {given}: convert them to one, "
                             f"e.g. {other}.astype(np.{arrays[0].dtype})")
        task = Task.create(self.template, shape, dtypes.pop(), self.options.threads)
        check_arguments(name, task.arguments(), arrays)
        return task

    def _best_record(self, task: Task) -> Record | None:
        logs = list(_history.get()) + ([self.options.log] if self.options.log else [])
        best: Record | None = None
        here = current_target(task.threads)
        for path in logs:
            if not os.path.exists(path):
                continue
            # a record is valid for this op only if its definition is this one (best_per_task checks)
            rec = best_per_task(from_target(_records(path), here, any_target=self.options.any_target)).get(task.key())
            if rec is not None and (best is None or preference(rec) < preference(best)):
                best = rec
        return best

    def kernel_for(self, *arrays: np.ndarray) -> Kernel:
        """The kernel a call on these arrays runs (found, tuned or a default schedule; then cached),
        which takes them in the op's argument order. The arrays are checked first (task_for)."""
        return self._kernel(self.task_for(*arrays))

    def _kernel(self, task: Task) -> Kernel:
        key = (task.key(), _history.get())
        with self._lock:
            k = self.kernels.get(key)
            if k is not None:
                return k
            rec = self._best_record(task)
            if rec is not None:  # a log is untrusted: its kernel is checked once before it is used
                k, how = task.build(rec.validated_config()), "log"
                task.verify(k)
            elif self.options.policy == "tune":
                k, how = self._tune(task), "tuned"
            else:
                if key not in self._warned:
                    self._warned.add(key)
                    warnings.warn(f"autotune: no tuning record for {task.key()}; running a default schedule "
                                  f"(tune it with policy='tune' or `autotune tune`)", RuntimeWarning, stacklevel=4)
                k, how = task.build(task.default_config()), "default"
                task.verify(k)
            self.kernels[key] = k
            self.sources[key] = how
            return k

    def _tune(self, task: Task) -> Kernel:
        from autotune.tuning import tune
        o = self.options
        res = tune(op=task, trials=o.trials, timeout_s=o.timeout_s, log=o.log, strategy=o.strategy,
                   cost_model=o.cost_model, pretrained=o.pretrained, seed=o.seed,
                   progress=None if o.verbose else False)
        note = busy_note(res.noisy, res.timed, o.log)
        if o.verbose and note:
            print(f"autotune: {note}", file=sys.stderr)
        assert res.best_config is not None  # tune raises NoValidConfig otherwise
        return task.build(res.best_config)

    def _prepare(self, arrays: tuple[np.ndarray, ...], key: tuple) -> tuple[Callable[..., np.ndarray], tuple | None]:
        """Check the arrays (task_for: before any tuning) and make the call path for their key:
        (call(arrays, out), fast), fast being (compiled entry, its other arrays, the output's shape,
        dtype and layout, the inputs' shapes and dtypes) for __call__ to run without call's frame
        on C-contiguous inputs of those shapes and dtypes, or None."""
        task = self.task_for(*arrays)
        k = self._kernel(task)
        name = self.template.name
        args = task.arguments()
        oshape, odtype = k.output_shape, np.dtype(k.nest.output.dtype)
        contiguous = all(a.flags.c_contiguous for a in arrays)
        check = self.options.check_finite
        # the arrays in the op's argument order; None (nothing run) when an input holds NaN or Inf
        run, entry = k.prepared(check_finite=check)
        # a one-thread kernel taking the arrays as they come: its compiled entry called from __call__'s
        # frame, the only Python one on the way (each frame is call overhead); with the layout of an
        # out= that it may write to as it is (C-contiguous)
        fast = (*entry, oshape, odtype, _layout(np.empty(oshape, odtype)), tuple(map(_shape, arrays)),
                tuple(np.dtype(a.dtype.name) for a in arrays)) if entry is not None and contiguous else None

        def nonfinite(ins: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray:
            return by_reference(name, first_nonfinite(args, ins), task.reference, ins, out, stacklevel=5)

        def call(arrays: tuple[np.ndarray, ...], out: np.ndarray | None) -> np.ndarray:
            ins = arrays if contiguous else tuple(np.ascontiguousarray(a) for a in arrays)
            if out is None:
                out = np.empty(oshape, odtype)
            else:
                check_out(out, oshape, odtype, name)
                check_disjoint(ins, out)
            result = run(ins, out)
            return nonfinite(ins, out) if result is None else result
        self._local.__dict__.setdefault("calls", {})[key] = (call, fast)
        return call, fast

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        local = self._local.__dict__
        last = local.get("last")  # (logs in force, layouts, call, fast): this thread's last call path
        if last is not None and last[0] is _history.get():
            fast = last[3]
            if fast is not None:  # the compiled entry from this frame, for C-contiguous arrays
                entry, rest, oshape, odtype, olayout, shapes, dtypes = fast
                n = len(arrays)
                try:  # shapes and dtypes here (the entry checks the strides), inline: each step is call overhead
                    if n == 2:
                        a, b = arrays
                        hit = a.shape == shapes[0] and b.shape == shapes[1] and (
                            a.dtype is dtypes[0] or a.dtype == dtypes[0]) and (b.dtype is dtypes[1] or b.dtype == dtypes[1])
                    elif n == 1:
                        a = arrays[0]
                        hit = a.shape == shapes[0] and (a.dtype is dtypes[0] or a.dtype == dtypes[0])
                    else:
                        hit = tuple(map(_shape, arrays)) == shapes and tuple(map(_dtype, arrays)) == dtypes
                except AttributeError:
                    hit = False
                if hit:
                    did = STRIDED
                    try:  # TypeError: not an ndarray (an object with a shape and dtype): converted below
                        if out is None:
                            result = np.empty(oshape, odtype)
                            did = entry(arrays, (result,) + rest)
                            if did == RAN:
                                return result
                        elif type(out) is np.ndarray and _layout(out) == olayout and out.flags.writeable:
                            did = entry(arrays, (out,) + rest)  # the entry checks that out overlaps no input
                            if did == RAN:
                                return out
                    except TypeError:
                        pass
                    if did != STRIDED:
                        return last[2](arrays, out)  # (an input with NaN or Inf, an overlapping out: call answers it)
            else:
                try:
                    hit = tuple(map(_layout, arrays)) == last[1]
                except AttributeError:
                    hit = False
                if hit:
                    return last[2](arrays, out)
        try:
            layouts = tuple(map(_layout, arrays))
        except AttributeError:  # not all arrays: convert once, then the same path
            return self(*(np.asarray(a) for a in arrays), out=out)
        history = _history.get()
        key = (layouts, history)
        path = local.get("calls", _NO_CALLS).get(key)
        if path is None:
            path = self._prepare(arrays, key)
        local["last"] = (history, layouts, *path)
        return path[0](arrays, out)


_NO_CALLS: dict[tuple, tuple[Callable[..., np.ndarray], tuple | None]] = {}
_layout = operator.attrgetter("shape", "dtype", "strides")  # what a call path is chosen by, per array
_shape, _dtype = operator.attrgetter("shape"), operator.attrgetter("dtype")


def check_arguments(name: str, args: Sequence[Argument], arrays: Sequence[np.ndarray]) -> None:
    """ShapeError unless the arrays are the op's arguments: as many, each of its shape and dtype."""
    if len(arrays) != len(args):
        raise ShapeError(f"{name} takes {len(args)} arrays ({', '.join(a.name for a in args)}), got {len(arrays)}")
    for arg, a in zip(args, arrays):
        if a.shape != arg.shape:
            raise ShapeError(f"{name}: input {arg.name} has shape {_dims(a.shape)}, expected {_dims(arg.shape)} "
                             "(from the other inputs' dims)")
        if a.dtype != np.dtype(arg.dtype):
            raise ShapeError(f"{name}: input {arg.name} has dtype {a.dtype}, expected {arg.dtype}: pass "
                             f"{arg.name}.astype(np.{arg.dtype})")


def _dims(shape: Sequence[int]) -> str:
    return "[" + "x".join(map(str, shape)) + "]"


def op(fn: Callable[..., Any] | str | Template | None = None, *, log: str | os.PathLike[str] | None = None,
       policy: str = "tune", trials: int = 16, timeout_s: float | None = None, strategy: str | None = None,
       cost_model: str | None = None, pretrained: str | os.PathLike[str] | None = None,
       threads: int | None = None, seed: int = 0, any_target: bool = False, name: str | None = None,
       reference: Callable[..., np.ndarray] | None = None, verbose: bool = True, check_finite: bool = True) -> Any:
    """A tuned op from a template name, or a decorator over a compute-definition function.

    `autotune.op("matmul", log=...)` or `@autotune.op(log=...)` / `@autotune.op` on a function
    that takes placeholders and returns te.compute(...): anywhere, in a script without a main
    guard, inside a function, in a notebook; workers get the definition as data. cost_model="xgb"
    (or another of autotune.cost_model.MODELS) tunes with the model-guided search; reference: a
    NumPy function of the inputs checking a definition op's kernels (default: the IR's own
    interpreter); verbose=False: no progress bar or summary line while tuning; check_finite=False:
    no per-call check of the inputs for NaN and Inf (see the module docstring). See OpOptions.

    >>> @autotune.op(log="axpb.jsonl", trials=4)                         # doctest: +SKIP
    ... def axpb(A, B):
    ...     return te.compute(B.shape, lambda i: B[i] * 2.0 + A[i], name="out")
    >>> axpb(np.ones(16), np.zeros(16))[:2]   # float64 in: tuned and run at float64   # doctest: +SKIP
    array([1., 1.])
    """
    options = OpOptions(os.fspath(log) if log is not None else None, policy, trials, timeout_s, strategy,
                        cost_model, os.fspath(pretrained) if pretrained is not None else None, threads, seed,
                        any_target, verbose, check_finite)

    def wrap(f: Callable[..., Any]) -> TunedOp:
        from autotune.definition import template_from_function
        t = template_from_function(f, name=name, reference=reference)
        register(t, listed=False)
        return TunedOp(t, options)

    if isinstance(fn, (str, Template)):
        return TunedOp(get_template(fn), options)
    if fn is None:
        return wrap
    return wrap(fn)

