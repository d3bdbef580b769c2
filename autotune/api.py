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
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from autotune.codegen import Kernel
from autotune.errors import AutotuneError
from autotune.records import Record, best_per_task, from_target, load_records
from autotune.target import current_target
from autotune.task import Task
from templates import Template, get_template, register

POLICIES = ("tune", "log", "default")
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
    measured on a machine of another ISA (with a warning)."""
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


class TunedOp:
    """A callable op: NumPy arrays in, NumPy array out, with one compiled kernel per shape."""

    def __init__(self, template: Template, options: OpOptions) -> None:
        if options.policy not in POLICIES:
            raise AutotuneError(f"policy must be one of {POLICIES}, got {options.policy!r}")
        if options.policy == "tune" and options.log is None:
            raise AutotuneError("policy='tune' needs a log=... file to record measurements in")
        if template.shape_of is None:
            raise AutotuneError(f"operator {template.name!r} cannot infer its shape from arrays (no shape_of)")
        self.template = template
        self.options = options
        self.kernels: dict[tuple, Kernel] = {}
        self.sources: dict[tuple, str] = {}  # "log", "tuned" or "default": where each kernel came from
        self._lock = threading.Lock()
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
        dtypes = {str(np.asarray(a).dtype) for a in arrays}
        if len(dtypes) != 1:
            raise AutotuneError(f"{self.template.name}: all inputs must share one dtype, got {sorted(dtypes)}")
        shape = self.template.shape_of(*arrays)  # type: ignore[misc]
        return Task.create(self.template, shape, dtypes.pop(), self.options.threads)

    def _best_record(self, task: Task) -> Record | None:
        logs = list(_history.get()) + ([self.options.log] if self.options.log else [])
        best: Record | None = None
        here = current_target(task.threads)
        for path in logs:
            if not os.path.exists(path):
                continue
            rec = best_per_task(from_target(load_records(path), here, any_target=self.options.any_target)).get(task.key())
            if rec is not None and (best is None or rec.seconds < best.seconds):
                best = rec
        return best

    def kernel_for(self, *arrays: np.ndarray) -> Kernel:
        task = self.task_for(*arrays)
        key = (task.key(), _history.get())
        with self._lock:
            k = self.kernels.get(key)
            if k is not None:
                return k
            rec = self._best_record(task)
            if rec is not None:
                k, how = task.build(rec.validated_config()), "log"
            elif self.options.policy == "tune":
                k, how = self._tune(task), "tuned"
            else:
                if key not in self._warned:
                    self._warned.add(key)
                    warnings.warn(f"autotune: no tuning record for {task.key()}; running a default schedule "
                                  f"(tune it with policy='tune' or `autotune tune`)", RuntimeWarning, stacklevel=3)
                k, how = task.build(task.default_config()), "default"
            self.kernels[key] = k
            self.sources[key] = how
            return k

    def _tune(self, task: Task) -> Kernel:
        from autotune.tuning import tune
        o = self.options
        res = tune(op=task, trials=o.trials, timeout_s=o.timeout_s, log=o.log, strategy=o.strategy,
                   cost_model=o.cost_model, pretrained=o.pretrained, seed=o.seed)
        if res.best_config is None:
            raise AutotuneError(f"tuning {task.key()} found no working config in {res.measured} trials")
        return task.build(res.best_config)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        return self.kernel_for(*arrays)(*arrays)


def op(fn: Callable[..., Any] | str | Template | None = None, *, log: str | os.PathLike[str] | None = None,
       policy: str = "tune", trials: int = 16, timeout_s: float | None = None, strategy: str | None = None,
       cost_model: str | None = None, pretrained: str | os.PathLike[str] | None = None,
       threads: int | None = None, seed: int = 0, any_target: bool = False, name: str | None = None,
       reference: Callable[..., np.ndarray] | None = None) -> Any:
    """A tuned op from a template name, or a decorator over a compute-definition function.

    `autotune.op("matmul", log=...)` or `@autotune.op(log=...)` / `@autotune.op` on a function
    that takes placeholders and returns te.compute(...). cost_model="xgb" (or another of
    autotune.cost_model.MODELS) tunes with the model-guided search. See OpOptions.
    """
    options = OpOptions(os.fspath(log) if log is not None else None, policy, trials, timeout_s, strategy,
                        cost_model, os.fspath(pretrained) if pretrained is not None else None, threads, seed,
                        any_target)

    def wrap(f: Callable[..., Any]) -> TunedOp:
        from autotune.definition import template_from_function
        t = template_from_function(f, name=name, reference=reference)
        register(t, module=f.__module__, listed=False)
        return TunedOp(t, options)

    if isinstance(fn, (str, Template)):
        return TunedOp(get_template(fn), options)
    if fn is None:
        return wrap
    return wrap(fn)

