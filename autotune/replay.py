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

from autotune.codegen import Kernel
from autotune.errors import AutotuneError
from autotune.records import Record, RecordError, best_per_task, load_records
from autotune.task import Task
from autotune.runner import MeasureInput, MeasureResult, Runner


@dataclass
class ReplayRow:
    key: str
    record: Record
    logged_gflops: float
    measured_gflops: float | None
    error: str | None

    @property
    def ratio(self) -> float | None:
        return None if self.measured_gflops is None else self.measured_gflops / self.logged_gflops

    def to_json(self) -> dict[str, Any]:
        return {"task": self.key, "config": dict(self.record.config), "logged_gflops": self.logged_gflops,
                "measured_gflops": self.measured_gflops, "ratio": self.ratio, "error": self.error}


def replay_log(log: str | os.PathLike[str] | Sequence[Record], *, runner: Runner | None = None,
               threads: int | None = None) -> list[ReplayRow]:
    """Re-verify and re-time the best kernel of every task of a log."""
    records = load_records(log) if isinstance(log, (str, os.PathLike)) else list(log)
    best = best_per_task(records)
    rows: list[ReplayRow] = []
    inputs: list[MeasureInput] = []
    keep: list[tuple[str, Record, Task]] = []
    for key in sorted(best):
        rec = best[key]
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
        from measure.local import LocalRunner
        runner = LocalRunner()
    try:
        results: list[MeasureResult] = runner.run(inputs) if inputs else []
    finally:
        if own:
            runner.close()
    for (key, rec, task), res in zip(keep, results):
        fl = task.flops()
        rows.append(ReplayRow(key, rec, fl / rec.seconds / 1e9, fl / res.median / 1e9 if res.ok else None,
                              None if res.ok else f"{res.error.value}: {res.message}"))  # type: ignore[union-attr]
    rows.sort(key=lambda r: r.key)
    return rows


def format_rows(rows: Sequence[ReplayRow]) -> str:
    w = max([len(r.key) for r in rows] + [4])
    lines = [f"{'task':<{w}}  {'logged':>9}  {'measured':>9}  {'ratio':>6}", "-" * (w + 32)]
    for r in rows:
        meas = f"{r.measured_gflops:9.1f}" if r.measured_gflops is not None else f"{'-':>9}"
        ratio = f"{r.ratio:6.2f}" if r.ratio is not None else f"{'-':>6}"
        lines.append(f"{r.key:<{w}}  {r.logged_gflops:9.1f}  {meas}  {ratio}" + (f"  {r.error}" if r.error else ""))
    lines.append("(GFLOP/s; ratio = measured / logged)")
    return "\n".join(lines)


def best_record(log: str | os.PathLike[str], op: str, shape: str | Sequence[int] | Mapping[str, int],
                dtype: str = "float32") -> Record:
    task = Task.create(op, shape, dtype)
    rec = best_per_task(load_records(log)).get(task.key())
    if rec is None:
        raise AutotuneError(f"the log {os.fspath(log)} has no successful record for {task.key()}")
    return rec


def load_best(log: str | os.PathLike[str], op: str, shape: str | Sequence[int] | Mapping[str, int],
              dtype: str = "float32", *, threads: int | None = None) -> Kernel:
    """The best kernel of a task in a log, rebuilt from its config (validated first) as a callable."""
    rec = best_record(log, op, shape, dtype)
    task = Task.create(op, shape, dtype, threads if threads is not None else rec.threads)
    cfg = rec.validated_config()
    return task.build(cfg)
