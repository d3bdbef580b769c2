"""Replay a tuning log: rebuild the best kernel of each task from its recipe (the config),
re-verify it against the reference, re-time it, and compare with what the log says.

Example::

    >>> from autotune.replay import load_best                            # doctest: +SKIP
    >>> matmul = load_best("tune.jsonl", "matmul", "256x256x256")         # doctest: +SKIP
    >>> C = matmul(A, B)                                                   # doctest: +SKIP
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autotune.errors import AutotuneError
from autotune.records import Record, RecordError, best_per_task, from_target, load_records
from autotune.target import current_target
from autotune.task import OpKernel, Task
from autotune.runner import MeasureInput, MeasureResult, Runner


@dataclass
class ReplayRow:
    """One task of a replay: logged and measured speed in `unit` (GFLOP/s, or calls/s for an op
    whose definition does no floating-point arithmetic)."""
    key: str
    record: Record
    logged_gflops: float
    measured_gflops: float | None
    error: str | None
    unit: str = "GFLOP/s"

    @property
    def ratio(self) -> float | None:
        return None if self.measured_gflops is None else self.measured_gflops / self.logged_gflops

    def to_json(self) -> dict[str, Any]:
        return {"task": self.key, "config": dict(self.record.config), "logged_gflops": self.logged_gflops,
                "measured_gflops": self.measured_gflops, "ratio": self.ratio, "error": self.error, "unit": self.unit}


def replay_log(log: str | os.PathLike[str] | Sequence[Record], *, runner: Runner | None = None,
               threads: int | None = None, any_target: bool = False, trusted: Sequence[Any] = ()) -> list[ReplayRow]:
    """Re-verify and re-time the best kernel of every task of a log. Records measured on a machine
    of another ISA are left out unless any_target=True (then with a warning).

    A hand-written Numba kernel's record (autotune_numba) carries source code: it is rebuilt only
    when its source is vouched for by `trusted` (its kernel function or autotune_numba object,
    "module:function" names, SHA-256 digests of trusted sources) or the AUTOTUNE_TRUSTED_KERNELS
    environment variable (autotune.numba_tune.trusted_sources); else its row says in one line that
    it is not replayable here, and the other records replay."""
    records = load_records(log) if isinstance(log, (str, os.PathLike)) else list(log)
    here = current_target(threads or 1)
    usable = from_target(records, here, any_target=any_target)
    if records and not usable:
        raise AutotuneError(f"every record of the log was measured on another ISA than this machine's "
                            f"({here['isa']}): pass --any-target (any_target=True) to replay them anyway")
    best, fastest = best_per_task(usable), best_per_task(usable, valid=False)
    rows: list[ReplayRow] = []
    inputs: list[MeasureInput] = []
    keep: list[tuple[str, Record, Task]] = []
    handwritten: list[tuple[str, Record]] = []
    for key in sorted(fastest):  # a task with no valid record gets a row saying why
        rec = best.get(key, fastest[key])
        if rec.numba is not None and key in best:  # source code: replayed only if vouched for (below)
            handwritten.append((key, rec))
            continue
        try:
            task = rec.task()
            if threads is not None:
                task = Task.create(task.op, task.shape_dict, task.dtype, threads)
            cfg = rec.validated_config()
        except RecordError as e:
            rows.append(ReplayRow(key, rec, 0.0, None, str(e)))
            continue
        inputs.append(MeasureInput(task, cfg))
        keep.append((key, rec, task))
    own = runner is None
    if runner is None:
        from autotune.tuning import make_runner
        runner = make_runner("local")
    try:
        results: list[MeasureResult] = runner.run(inputs) if inputs else []
        if handwritten:
            from autotune.numba_tune import replay_record, trusted_sources
            vouched = trusted_sources(trusted)
            for key, rec in handwritten:
                got = replay_record(rec, runner, trusted=vouched, records=usable)
                if isinstance(got, str):
                    rows.append(ReplayRow(key, rec, 1.0 / rec.seconds, None, got, "calls/s"))
                else:
                    rows.append(ReplayRow(key, rec, 1.0 / rec.seconds, 1.0 / got.median if got.ok else None,
                                          None if got.ok else f"{got.error.value}: {(got.message.splitlines() or [''])[0]}",  # type: ignore[union-attr]
                                          "calls/s"))
    finally:
        if own:
            runner.close()
    for (key, rec, task), res in zip(keep, results):
        per, unit = task.speed_unit()
        rows.append(ReplayRow(key, rec, per / rec.seconds, per / res.median if res.ok else None,
                              None if res.ok else f"{res.error.value}: {res.message}", unit))  # type: ignore[union-attr]
    rows.sort(key=lambda r: r.key)
    return rows


def format_rows(rows: Sequence[ReplayRow]) -> str:
    w = max([len(r.key) for r in rows] + [4])
    lines = [f"{'task':<{w}}  {'logged':>11}  {'measured':>11}  {'ratio':>6}  unit", "-" * (w + 44)]
    for r in rows:
        meas = f"{r.measured_gflops:11.1f}" if r.measured_gflops is not None else f"{'-':>11}"
        ratio = f"{r.ratio:6.2f}" if r.ratio is not None else f"{'-':>6}"
        lines.append(f"{r.key:<{w}}  {r.logged_gflops:11.1f}  {meas}  {ratio}  {r.unit}" + (f"  {r.error}" if r.error else ""))
    lines.append("(ratio = measured / logged)")
    ops = sorted({r.record.op for r in rows if r.record.definition is not None})
    for op in ops:  # how to name a user op's shape (load_best, the CLI): its dims in the definition's order
        from autotune.templates import get_template
        try:
            lines.append(f"{op}: a user op; its shape as numbers is {get_template(op).dims_help()}")
        except AutotuneError:
            continue
    return "\n".join(lines)


def best_record(log: str | os.PathLike[str], op: str, shape: str | Sequence[int] | Mapping[str, int],
                dtype: str = "float32", *, threads: int | None = None, any_target: bool = False) -> Record:
    """The fastest record of a task (threads: default, this machine's thread count) in a log,
    measured on a machine of this ISA (any_target=True: any machine, with a warning). A user op
    (a definition) is known from the log's own records; its shape as numbers lists each input's
    dims in turn, in the definition's argument order (X0xX1xW0 for inputs X[2d], W[1d])."""
    records = load_records(log)
    _know_definitions(records, op)
    task = Task.create(op, shape, dtype, threads)
    records = [r for r in records if r.op == task.op and dict(r.shape) == task.shape_dict
               and r.dtype == task.dtype]
    rec = best_per_task(from_target(records, current_target(task.threads), any_target=any_target)).get(task.key())
    if rec is None:
        where = f"the log {os.fspath(log)} has no successful record for {task.key()}"
        others = sorted({r.threads for r in records if r.ok and r.threads != task.threads})
        if others:
            raise AutotuneError(f"{where}; it has some for threads={others}: pass threads=")
        if any(r.ok and r.threads == task.threads for r in records):
            raise AutotuneError(f"{where} measured on this ISA ({current_target(1)['isa']}): pass "
                                "any_target=True to use records from another machine")
        raise AutotuneError(where)
    return rec


def _know_definitions(records: Sequence[Record], op: str) -> None:
    """Make the definition op `op` known from the first valid definition its records carry (the
    others are checked against it when used)."""
    for r in records:
        if r.op == op and r.definition is not None:
            try:
                r.task()
                return
            except RecordError:
                continue


def load_best(log: str | os.PathLike[str], op: str, shape: str | Sequence[int] | Mapping[str, int],
              dtype: str = "float32", *, threads: int | None = None, any_target: bool = False) -> OpKernel:
    """The best kernel of a task in a log, rebuilt from its config (validated first) as a callable.
    threads: the thread count it was tuned for (default: this machine's); any_target: also use a
    record measured on a machine of another ISA. The kernel is checked against the task's reference
    once before it is returned: a kernel that computes something else raises. It takes the op's
    arrays in the op's argument order (a user op's: its function's parameters, whatever order the
    definition reads them in; `kernel.arguments` lists them) and answers inputs holding NaN or Inf
    with the NumPy reference, as a tuned op does (`kernel.check_finite = False` skips that check).

    >>> k = load_best("axpb.jsonl", "axpb", "16x16", threads=1)           # doctest: +SKIP
    >>> [a.name for a in k.arguments], k(A, B)                             # doctest: +SKIP
    (['A', 'B'], array([...]))
    """
    rec = best_record(log, op, shape, dtype, threads=threads, any_target=any_target)
    task = rec.task()
    kernel = task.build(rec.validated_config())
    task.verify(kernel)
    return kernel

