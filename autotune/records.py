"""Tuning records: one JSON line per measurement, with a schema version in every line.

A log is append-only. Each record is written with a single write of the whole line on a file
opened for appending, and flushed, so a tuner killed with SIGKILL loses at most the line it was
writing. Loading skips a truncated or corrupt line with a warning naming the file and line; a
record from a newer schema raises RecordError. A log is untrusted input: `Record.task()` and
`Record.validated_config()` check the operator, shape and every knob value against the
template's declared space before anything is lowered or compiled.

Example::

    >>> import tempfile, os
    >>> from autotune.records import Record, RecordLog, load_records
    >>> path = os.path.join(tempfile.mkdtemp(), "log.jsonl")
    >>> log = RecordLog(path)
    >>> log.append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
    ...                   config={"mr": 4}, costs=[1e-6], error=None, compile_seconds=0.5))
    >>> [r.op for r in load_records(path)]
    ['matmul']
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from autotune.errors import AutotuneError

SCHEMA_VERSION = 1
ERROR_KINDS = ("compile_error", "compile_timeout", "runtime_error", "run_timeout", "wrong_answer", "worker_crashed")
MAX_LINE = 1 << 20


class RecordError(AutotuneError, ValueError):
    """A record or log that cannot be used (corrupt, from a newer schema, or out of its space)."""


@dataclass(frozen=True)
class Record:
    """One measurement of one config of one task."""
    op: str
    shape: Mapping[str, int]
    dtype: str
    threads: int
    config: Mapping[str, Any]
    costs: Sequence[float] | None          # seconds per run (the samples), None on error
    error: str | None = None               # one of ERROR_KINDS
    message: str = ""
    compile_seconds: float | None = None
    timestamp: float = field(default_factory=time.time)
    target: Mapping[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    noisy: bool = False                    # the samples stayed spread out, or CPU time was stolen during them
    version: int = SCHEMA_VERSION

    # ---- derived ---------------------------------------------------------------------------
    @property
    def key(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.op}|{dims}|{self.dtype}"

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def seconds(self) -> float:
        """Median cost (inf for failed measurements)."""
        if not self.ok:
            return math.inf
        c = sorted(self.costs)  # type: ignore[arg-type]
        n = len(c)
        return c[n // 2] if n % 2 else 0.5 * (c[n // 2 - 1] + c[n // 2])

    def config_key(self) -> str:
        return json.dumps(dict(self.config), sort_keys=True, separators=(",", ":"))

    # ---- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"v": self.version, "op": self.op, "shape": dict(self.shape), "dtype": self.dtype,
                "threads": self.threads, "config": dict(self.config),
                "costs": list(self.costs) if self.costs is not None else None,
                "error": self.error, "message": self.message, "compile_s": self.compile_seconds,
                "ts": self.timestamp, "target": dict(self.target), "strategy": self.strategy, "noisy": self.noisy}

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, d: Any) -> "Record":
        """Parse and type-check one record (structure only; see validated_config for the space)."""
        if not isinstance(d, dict):
            raise RecordError("a record must be a JSON object")
        v = d.get("v")
        if not isinstance(v, int) or isinstance(v, bool):
            raise RecordError("missing schema version 'v'")
        if v > SCHEMA_VERSION:
            raise RecordError(f"record has schema version {v}, newer than this autotune reads ({SCHEMA_VERSION}); "
                              "upgrade autotune to read this log")

        def need(name: str, types: type | tuple[type, ...]) -> Any:
            x = d.get(name)
            if not isinstance(x, types) or isinstance(x, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
                raise RecordError(f"field {name!r} is missing or has the wrong type ({type(x).__name__})")
            return x

        op = need("op", str)
        shape = need("shape", dict)
        if not all(isinstance(k, str) and isinstance(x, int) and not isinstance(x, bool) for k, x in shape.items()):
            raise RecordError("field 'shape' must map dimension names to integers")
        costs = d.get("costs")
        if costs is not None:
            if (not isinstance(costs, list) or len(costs) > 10000
                    or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 and math.isfinite(c)
                               for c in costs)):
                raise RecordError("field 'costs' must be a list of positive finite seconds or null")
        err = d.get("error")
        if err is not None and err not in ERROR_KINDS:
            raise RecordError(f"field 'error' must be null or one of {ERROR_KINDS}, got {err!r}")
        cs = d.get("compile_s")
        if cs is not None and (not isinstance(cs, (int, float)) or isinstance(cs, bool)):
            raise RecordError("field 'compile_s' must be a number or null")
        strat = d.get("strategy")
        return cls(op=op, shape=shape, dtype=need("dtype", str), threads=need("threads", int),
                   config=need("config", dict), costs=costs, error=err, message=str(d.get("message", ""))[:2000],
                   compile_seconds=cs, timestamp=float(d.get("ts", 0.0)) if isinstance(d.get("ts"), (int, float)) else 0.0,
                   target=d.get("target") if isinstance(d.get("target"), dict) else {},
                   strategy=strat if isinstance(strat, str) else None, noisy=d.get("noisy") is True, version=v)

    # ---- validation against the operator's space ----------------------------------------------
    def task(self):  # type: ignore[no-untyped-def]
        """The Task of this record, after checking the operator, shape and dtype."""
        from autotune.task import Task
        try:
            return Task.create(self.op, self.shape, self.dtype, self.threads)
        except AutotuneError as e:
            raise RecordError(f"record for {self.op!r} is not usable: {e}") from None

    def validated_config(self):  # type: ignore[no-untyped-def]
        """The config, checked knob by knob against the template's declared space."""
        try:
            return self.task().space().validate(self.config)
        except RecordError:
            raise
        except AutotuneError as e:
            raise RecordError(f"record for {self.key} has a config outside its space: {e}") from None


class RecordLog:
    """An append-only JSON-lines log. Every append is one flushed write of a whole line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: Record) -> None:
        line = record.to_line().encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # a previous writer killed mid-line leaves no newline: start on a fresh line
            if os.fstat(fd).st_size > 0:
                with open(self.path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
            os.write(fd, line)
        finally:
            os.close(fd)

    def extend(self, records: Iterable[Record]) -> None:
        for r in records:
            self.append(r)

    def load(self) -> list[Record]:
        return load_records(self.path)


def load_records(path: str | os.PathLike[str], *, strict: bool = False) -> list[Record]:
    """All readable records of a log. A corrupt or truncated line is skipped with a warning
    naming the file and line (or raises with strict=True); a newer schema always raises."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise RecordError(f"no tuning log at {path}") from None
    except OSError as e:
        raise RecordError(f"cannot read tuning log {path}: {e.strerror}") from None
    out: list[Record] = []
    with f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                if len(raw) > MAX_LINE:
                    raise RecordError(f"line longer than {MAX_LINE} bytes")
                d = json.loads(raw)
                out.append(Record.from_json(d))
            except (ValueError, RecordError) as e:
                if isinstance(e, RecordError) and "newer than this autotune" in str(e):
                    raise RecordError(f"{path}:{lineno}: {e}") from None
                msg = f"{path}:{lineno}: skipped a corrupt record ({e})"
                if strict:
                    raise RecordError(msg) from None
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return out


def best_per_task(records: Iterable[Record]) -> dict[str, Record]:
    """The fastest successful record of each task key."""
    best: dict[str, Record] = {}
    for r in records:
        if r.ok and (r.key not in best or r.seconds < best[r.key].seconds):
            best[r.key] = r
    return best


def distill(records: Iterable[Record], k: int = 1) -> list[Record]:
    """The k fastest successful records of each task (distinct configs)."""
    if k < 1:
        raise ValueError(f"distill keeps k >= 1 records per task, got {k}")
    by_task: dict[str, dict[str, Record]] = {}
    for r in records:
        if r.ok:
            per = by_task.setdefault(r.key, {})
            ck = r.config_key()
            if ck not in per or r.seconds < per[ck].seconds:
                per[ck] = r
    out: list[Record] = []
    for key in sorted(by_task):
        out += sorted(by_task[key].values(), key=lambda r: r.seconds)[:k]
    return out


def filter_by_target(records: Iterable[Record], target: Mapping[str, Any]) -> list[Record]:
    """Records measured on the same kind of machine (CPU model and ISA) with the same threads."""
    from autotune.target import same_machine
    return [r for r in records if same_machine(dict(r.target), dict(target))
            and r.threads == target.get("threads", r.threads)]
