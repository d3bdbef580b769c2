"""Measuring a hand-written Numba kernel (autotune.autotune_numba) in a worker (measure.worker):
its task (autotune.task.NumbaTask) arrives as data; the kernel is rebuilt from it, run once on the
arguments the driver saved (.npy files, no pickle), checked against the expected outputs the driver
saved (the reference's, or a first config's) or, without them, its outputs are saved for the
driver; then it is timed with the common timing code (measure.timing, through the worker's
timing-lock-holding `time_fn`). Answers are the worker's: {"ok": True, "costs", ...} or
{"ok": False, "error": <ErrorKind value>, "message"}.

The driver only sends kernels whose source it vouches for (autotune.numba_tune's docstring).

Example::

    >>> from autotune.measure.handwritten import load_arguments      # doctest: +SKIP
"""
from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from autotune.codegen.handwritten import same, scalar_value, wrong


def _fmt(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {' | '.join(lines)}"[:1000]


def load_arguments(spec: Mapping[str, Any], folder: Path) -> list[Any]:
    """The kernel's arguments: arrays from `folder`/arg_<name>.npy (no pickle), scalars from the spec."""
    out: list[Any] = []
    for a in spec["args"]:
        if "array" in a:
            v = np.load(folder / f"arg_{a['name']}.npy", allow_pickle=False)
            if list(v.shape) != a["array"]["shape"] or v.dtype.name != a["array"]["dtype"]:
                raise ValueError(f"argument {a['name']} on disk is {v.dtype} {list(v.shape)}, not as described")
            out.append(np.ascontiguousarray(v))
        else:
            out.append(scalar_value(a))
    return out


def measure(p: Mapping[str, Any], time_fn: Callable[[Callable[[], object], Any, int, float], Any]) -> dict[str, Any]:
    """Build, run once, check (or save the outputs), then time one config of a NumbaTask request."""
    from autotune.task import Task
    from autotune.measure.timing import TimingProtocol
    try:
        task = Task.from_data(p)
        spec, run = task.spec, task.run_data  # type: ignore[attr-defined]
        folder, prefix = Path(run["dir"]), str(run.get("prefix", ""))
        args = load_arguments(spec, folder)
        kernel = task.build(p["config"])
    except Exception as e:
        return {"ok": False, "error": "compile_error", "message": _fmt(e)}
    compile_s = kernel.compile_seconds
    names = [a["name"] for a in spec["args"]]
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    initial = {i: args[i].copy() for i in arrays if names[i] in spec["restore"]}
    zero = [i for i in arrays if names[i] in spec["zero"]]

    def reset() -> None:
        for i, v in initial.items():
            args[i][...] = v
        for i in zero:
            args[i][...] = 0

    def fail(kind: str, message: str) -> dict[str, Any]:
        return {"ok": False, "error": kind, "message": message, "compile_s": compile_s}
    try:
        reset()
        before = {i: args[i].copy() for i in arrays}
        ret = kernel(*args)
        if spec["outputs"] is not None:
            changed = [names[i] for i in arrays if names[i] in spec["outputs"]]
        else:
            changed = [names[i] for i in arrays if not same(before[i], args[i])]
        got = {names[i]: args[i] for i in arrays if names[i] in changed}
        if ret is not None and np.asarray(ret).dtype != object:
            got["return"] = np.asarray(ret)
        expected = run.get("expected")
        if expected is None:  # the driver takes these outputs as the expected ones
            for n, v in got.items():
                np.save(folder / f"{prefix}{n}.npy", v, allow_pickle=False)
        else:
            want = {n: np.load(folder / f, allow_pickle=False) for n, f in expected.items()}
            got = {**{n: before[names.index(n)] for n in want if n not in got and n in names
                      and names.index(n) in before}, **got}
            why = wrong(got, want, spec["outputs"] is not None, str(run.get("against", "the reference")), spec["rtol"])
            if why:
                return fail("wrong_answer", why)
        del before, got

        def call() -> None:
            reset()
            kernel(*args)
        max_spread = float(p.get("max_spread", 1.1))
        t = time_fn(call, TimingProtocol(**p["protocol"]), 1 + int(p.get("retries", 2)), max_spread)
    except Exception as e:
        return fail("runtime_error", _fmt(e) + "\n" + traceback.format_exc(limit=3)[-800:])
    return {"ok": True, "costs": list(t.samples), "compile_s": compile_s, "noisy": t.noisy(max_spread),
            "contention": t.contention()}
