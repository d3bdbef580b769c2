"""The worker process: compiles candidates, or checks and times them. Started by LocalRunner.

It sets Numba's environment before importing Numba, so generated kernels get SLP
vectorisation and 512-bit vectors. A kernel that crashes takes down only this process.
"""
from __future__ import annotations

import os
import time
import traceback
from typing import Any


def _fmt(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:1000]


class _Worker:
    def __init__(self, role: str, cores: list[int] | None, lock_path: str | None) -> None:
        from autotune.environment import configure_numba
        configure_numba()
        import numpy  # noqa: F401
        from autotune.task import Task  # noqa: F401 (imports numba once, up front)
        import importlib
        for mod in filter(None, os.environ.get("AUTOTUNE_TEMPLATE_MODULES", "").split(",")):
            if mod.startswith("file:"):  # a user's script: run it as a module that is not __main__
                import runpy
                runpy.run_path(mod[5:], run_name="__autotune_main__")
            else:
                importlib.import_module(mod)  # user templates register themselves on import
        self.role = role
        self.lock_path = lock_path
        if cores and hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, set(cores))
            except OSError:
                pass
        self._refs: dict[tuple, Any] = {}

    def task(self, p: dict[str, Any]):  # type: ignore[no-untyped-def]
        from autotune.task import Task
        return Task.create(p["op"], p["shape"], p["dtype"], p["threads"])

    def compile(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            task = self.task(p)
            t0 = time.perf_counter()
            k = task.build(p["config"])
            return {"ok": True, "compile_s": k.compile_seconds or time.perf_counter() - t0}
        except Exception as e:
            return {"ok": False, "error": "compile_error", "message": _fmt(e)}

    def measure(self, p: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        from measure.check import check_output, poisoned
        from measure.timing import TimingProtocol, time_callable
        try:
            task = self.task(p)
            t0 = time.perf_counter()
            k = task.build(p["config"])
            compile_s = k.compile_seconds or time.perf_counter() - t0
        except Exception as e:
            return {"ok": False, "error": "compile_error", "message": _fmt(e)}
        try:
            seed = int(p.get("seed", 0))
            key = (task.key(), seed)
            if key not in self._refs:
                ins = task.inputs(seed=seed)
                self._refs = {key: (ins, task.reference(ins))}  # keep one: inputs can be large
            ins, ref = self._refs[key]
            out = poisoned(k.output_shape, task.dtype)
            k(*ins, out=out)
            chk = check_output(out, np.asarray(ref), task.dtype)
            if not chk.ok:
                return {"ok": False, "error": "wrong_answer", "message": chk.message, "compile_s": compile_s}
            proto = TimingProtocol(**p["protocol"])
            run = k.bind(*ins)
            costs = None
            noisy = False
            for _attempt in range(1 + int(p.get("retries", 2))):
                with _timing_lock(self.lock_path):
                    t = time_callable(run, proto)
                if costs is None or t.spread < (max(costs) / min(costs)):
                    costs = list(t.samples)
                noisy = t.spread > float(p.get("max_spread", 1.1)) or t.stolen > 0
                if not noisy:
                    break
            return {"ok": True, "costs": costs, "compile_s": compile_s, "noisy": noisy}
        except Exception as e:
            return {"ok": False, "error": "runtime_error", "message": _fmt(e) + "\n" + traceback.format_exc(limit=3)[-800:],
                    "compile_s": compile_s}


class _timing_lock:
    """An exclusive lock across processes on this machine, so timings never overlap."""

    def __init__(self, path: str | None) -> None:
        self.path, self.fd = path, None

    def __enter__(self) -> None:
        if self.path:
            import fcntl
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            import fcntl
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def main() -> None:
    """Serve JSON-line requests on stdin: {"kind": "compile"|"measure", ...payload}; answer on stdout.

    Kernels, Numba and warnings may write to stdout; the answers go to a private copy of it.
    """
    import json
    import sys
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    cores = [int(c) for c in os.environ.get("AUTOTUNE_WORKER_CORES", "").split(",") if c.strip()]
    role = os.environ.get("AUTOTUNE_WORKER_ROLE", "measure")
    lock = os.environ.get("AUTOTUNE_TIMING_LOCK") or None
    try:
        w = _Worker(role, cores or None, lock)
        answers.write(json.dumps({"ready": True}) + "\n")
    except Exception as e:  # import failure in the worker: say why, then stop
        answers.write(json.dumps({"ready": False, "message": _fmt(e)}) + "\n")
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        reply = w.compile(msg) if msg.get("kind") == "compile" else w.measure(msg)
        answers.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
