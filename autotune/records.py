"""Tuning records: one JSON line per measurement, with a schema version in every line.

A log is append-only. Each record is appended whole under an exclusive lock on the log (so
several tuners may share one), short writes are completed, and the line is fsynced before append
returns (RecordLog(fsync=False): flushed to the OS only); a write that fails (a full disk, an I/O
error) is cut back off and raised as one RecordError, so no torn line is left behind.

Loading streams the file: a line over MAX_LINE bytes is skipped without ever being held whole,
and every line that is not a valid record (bad JSON, nesting too deep, duplicate keys, NaN, a
schema version < 1 or newer than this autotune, threads < 1, costs outside physical bounds, ...)
is skipped with a warning naming the file and line; the rest of the log still loads. A log is
untrusted input: `Record.task()` and `Record.validated_config()` check the operator, shape and
every knob value against the template's declared space before anything is lowered or compiled,
and a timing faster than any machine of the record's ISA is no usable record (`check_speed`).

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

import fcntl
import json
import math
import os
import stat
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from autotune.errors import AutotuneError

SCHEMA_VERSION = 1
MAX_KERNEL_KEY = 64
ERROR_KINDS = ("compile_error", "compile_timeout", "runtime_error", "run_timeout", "wrong_answer", "worker_crashed",
               "infrastructure")
MAX_LINE = 1 << 20
MIN_SECONDS, MAX_SECONDS = 1e-9, 86400.0  # what one measured call can physically take
MAX_CONFIG_KNOBS, MAX_LIST = 256, 64  # knobs of a config; items of a list in a config or target
MAX_THREADS = 4096  # threads a record may name
MAX_NAME, MAX_TEXT, MAX_DIMS, MAX_TARGET = 64, 256, 16, 32  # names, other strings, shape dims, target entries
MAX_DEFINITION = 1 << 16  # JSON text of a definition (autotune.ir.serialize.MAX_BYTES)
MAX_NUMBA = 1 << 17  # JSON text of a hand-written kernel's data (its source at most 64 KiB)
# what a Log holds of one file: each record counted as RECORD_OVERHEAD bytes, plus LINE_FACTOR times
# its line's length, plus ELEMENT_BYTES per number or string in its costs, config and target (more
# than its Python objects take: 100 MiB were measured for 60k records of 432 bytes, counted 225 MiB)
MAX_LOG_MEMORY = 512 << 20
RECORD_OVERHEAD, LINE_FACTOR, ELEMENT_BYTES = 2048, 2, 64
MAX_CONFIG_ELEMENTS = 1024  # knobs' values, list items counted one by one
MAX_PREDICTED = 1e30  # what a cost model's score may be (a forged 1e308 would wreck a plot's axis)
MAX_SWEEP_ID, MAX_PLANNED, MAX_SWEEP_SIZE = 32, 1 << 30, 1 << 20  # a sweep's id, trials per task, tasks


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
    noisy: bool = False                    # the machine was busy: samples spread out, CPU time stolen, threads kept waiting
    version: int = SCHEMA_VERSION
    # a template-free op's compute definition as data (autotune.ir.serialize), so the record can be
    # rebuilt without the user's code; None for a template
    definition: Mapping[str, Any] | None = None
    # the measured kernel's key (Backend.kernel_key: the hash of its source), so a resumed tuner
    # knows which kernels were measured without generating their sources again; None if unknown
    kernel: str | None = None
    # what the timing saw of the machine's state (measure.timing.Timing.contention): samples'
    # spread, samples retaken, kept ones stolen from or whose threads waited for a CPU; None if unknown
    contention: Mapping[str, float] | None = None
    # a finalist's re-timing in alternating rounds (its costs: each round's median), after a tuning
    # run or by `autotune retime`; best_per_task prefers re-timings
    retimed: bool = False
    # a hand-written Numba kernel's data (autotune.codegen.handwritten: its source, globals, argument
    # shapes and dtypes), for autotune_numba's records; None otherwise. Its source is code: nothing
    # compiles it unless the user vouches for it (autotune.numba_tune.replay_record)
    numba: Mapping[str, Any] | None = None
    # a model-guided search's cost-model score of the config when it chose it (higher: predicted
    # faster; its scale is the model's own), so predictions can be held against measurements;
    # None for configs no model scored (presets, random picks before the model knows anything)
    predicted: float | None = None
    # the sweep that logged the record (autotune.distributed): {"id": the run's id, "trials": the
    # trials planned for the record's task in this log (those resumed plus the spec's), "tasks": the
    # sweep's tasks}, so a reader of the log knows how far each task is; None outside a sweep
    sweep: Mapping[str, Any] | None = None

    # ---- derived ---------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """The key of the record's task (Task.key): op, shape, dtype and threads."""
        from autotune.task import task_key
        return task_key(self.op, self.shape.items(), self.dtype, self.threads)

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
                "ts": self.timestamp, "target": dict(self.target), "strategy": self.strategy, "noisy": self.noisy,
                **({"definition": dict(self.definition)} if self.definition is not None else {}),
                **({"kernel": self.kernel} if self.kernel is not None else {}),
                **({"contention": dict(self.contention)} if self.contention is not None else {}),
                **({"retimed": True} if self.retimed else {}),
                **({"numba": dict(self.numba)} if self.numba is not None else {}),
                **({"predicted": self.predicted} if self.predicted is not None else {}),
                **({"sweep": dict(self.sweep)} if self.sweep is not None else {})}

    def to_line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, d: Any, shared: dict[str, Any] | None = None) -> "Record":
        """Parse and type-check one record (structure only; see validated_config for the space).
        shared: equal targets, shapes and definitions of earlier records, held once (`Log`)."""
        if not isinstance(d, dict):
            raise RecordError("a record must be a JSON object")
        v = d.get("v")
        if not isinstance(v, int) or isinstance(v, bool):
            raise RecordError("missing schema version 'v'")
        if v < 1:
            raise RecordError(f"schema version must be >= 1, got {v}")
        if v > SCHEMA_VERSION:
            raise RecordError(f"record has schema version {v}, newer than this autotune reads ({SCHEMA_VERSION}); "
                              "upgrade autotune to read this log")

        def need(name: str, types: type | tuple[type, ...]) -> Any:
            x = d.get(name)
            if not isinstance(x, types) or isinstance(x, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
                raise RecordError(f"field {name!r} is missing or has the wrong type ({type(x).__name__})")
            return x

        op = need("op", str)
        if not 0 < len(op) <= MAX_NAME:
            raise RecordError(f"field 'op' must be a name of 1 to {MAX_NAME} characters")
        shape = need("shape", dict)
        if len(shape) > MAX_DIMS or not all(isinstance(k, str) and len(k) <= MAX_NAME and isinstance(x, int)
                                            and not isinstance(x, bool) and 0 <= x <= 1 << 62 for k, x in shape.items()):
            raise RecordError(f"field 'shape' must map at most {MAX_DIMS} dimension names to integers")
        costs = d.get("costs")
        if costs is not None:
            if (not isinstance(costs, list) or not 0 < len(costs) <= 10000
                    or not all(_number(c) and MIN_SECONDS <= c <= MAX_SECONDS for c in costs)):
                raise RecordError(f"field 'costs' must be null or a list of seconds in [{MIN_SECONDS:g}, "
                                  f"{MAX_SECONDS:g}]")
        err = d.get("error")
        if err is not None and err not in ERROR_KINDS:
            raise RecordError(f"field 'error' must be null or one of {ERROR_KINDS}, got {err!r}")
        cs = d.get("compile_s")
        if cs is not None and not (_number(cs) and 0 <= cs <= MAX_SECONDS):
            raise RecordError(f"field 'compile_s' must be null or seconds in [0, {MAX_SECONDS:g}]")
        config = need("config", dict)
        if len(config) > MAX_CONFIG_KNOBS or sum(len(x) if isinstance(x, list) else 1 for x in config.values()) \
                > MAX_CONFIG_ELEMENTS or not all(
                isinstance(k, str) and len(k) <= MAX_NAME
                and (_scalar(x) or isinstance(x, list) and len(x) <= MAX_LIST and all(map(_scalar, x)))
                for k, x in config.items()):
            raise RecordError(f"field 'config' must map knob names to numbers, short strings, booleans or short "
                              f"lists of them, {MAX_CONFIG_ELEMENTS} values in all")
        strat = d.get("strategy")
        if isinstance(strat, str) and len(strat) > MAX_TEXT:
            raise RecordError(f"field 'strategy' must be at most {MAX_TEXT} characters")
        target = d.get("target")
        if isinstance(target, dict) and not _small(target):
            raise RecordError(f"field 'target' must map at most {MAX_TARGET} names to numbers, short strings, "
                              "booleans, or short lists or objects of them")
        if not isinstance(d.get("dtype"), str) or len(d["dtype"]) > MAX_NAME:
            raise RecordError("field 'dtype' is missing or not a dtype name")
        definition = d.get("definition")
        if definition is not None and not isinstance(definition, dict):
            raise RecordError("field 'definition' must be null or a definition object")
        if definition is not None and len(json.dumps(definition, separators=(",", ":"))) > MAX_DEFINITION:
            raise RecordError(f"field 'definition' is longer than {MAX_DEFINITION} bytes of JSON")
        kernel = d.get("kernel")
        if kernel is not None and not (isinstance(kernel, str) and 0 < len(kernel) <= MAX_KERNEL_KEY
                                       and kernel.isascii() and kernel.isalnum()):
            raise RecordError(f"field 'kernel' must be null or a kernel key of at most {MAX_KERNEL_KEY} letters "
                              "and digits")
        contention = d.get("contention")
        if contention is not None and not (isinstance(contention, dict) and len(contention) <= MAX_LIST and all(
                isinstance(k, str) and len(k) <= 32 and _number(x) and 0 <= x <= 1e9 for k, x in contention.items())):
            raise RecordError("field 'contention' must be null or an object of at most "
                              f"{MAX_LIST} short names mapped to numbers in [0, 1e9]")
        retimed = d.get("retimed", False)
        if not isinstance(retimed, bool):
            raise RecordError("field 'retimed' must be true or false")
        numba = d.get("numba")
        if numba is not None:
            if len(json.dumps(numba, separators=(",", ":"))) > MAX_NUMBA:
                raise RecordError(f"field 'numba' is longer than {MAX_NUMBA} bytes of JSON")
            from autotune.codegen.handwritten import SpecError, check_spec
            try:
                numba = check_spec(numba)
            except SpecError as e:
                raise RecordError(f"field 'numba' is no kernel data: {e}") from None
        predicted = d.get("predicted")
        if predicted is not None and not (_number(predicted) and abs(predicted) <= MAX_PREDICTED):
            raise RecordError(f"field 'predicted' must be null or a number in [-{MAX_PREDICTED:g}, {MAX_PREDICTED:g}]")
        sweep = d.get("sweep")
        if sweep is not None and not _sweep_stamp(sweep):
            raise RecordError(f"field 'sweep' must be null or an object of an 'id' (1 to {MAX_SWEEP_ID} letters and "
                              f"digits), 'trials' (0 to {MAX_PLANNED}) and 'tasks' (1 to {MAX_SWEEP_SIZE})")
        threads = need("threads", int)
        if threads < 1:
            raise RecordError(f"field 'threads' must be >= 1, got {threads}")
        if threads > MAX_THREADS:
            raise RecordError(f"field 'threads' must be at most {MAX_THREADS}, got {str(threads)[:20]}...")
        if shared is not None:
            target, shape = _shared(shared, target), _shared(shared, shape)
            definition = _shared(shared, definition) if definition is not None else None
        return cls(op=op, shape=shape, dtype=need("dtype", str), threads=threads,
                   config=config, costs=costs, error=err, message=str(d.get("message", ""))[:2000],
                   compile_seconds=cs, timestamp=float(d["ts"]) if _number(d.get("ts")) else 0.0,
                   target=target if isinstance(target, dict) else {},
                   strategy=strat if isinstance(strat, str) else None, noisy=d.get("noisy") is True, version=v,
                   definition=definition, kernel=kernel, contention=contention, retimed=retimed, numba=numba,
                   predicted=float(predicted) if predicted is not None else None,
                   sweep=_shared(shared, sweep) if shared is not None and sweep is not None else sweep)

    # ---- validation against the operator's space ----------------------------------------------
    def task(self):  # type: ignore[no-untyped-def]
        """The Task of this record, after checking the operator, shape and dtype. A record with a
        definition makes its operator known from that data (validated first: autotune.definition)."""
        from autotune.task import NumbaTask, Task
        try:
            if self.numba is not None:  # data only: a NumbaTask is never built from a record on its own say-so
                from autotune.codegen.handwritten import check_spec
                task = NumbaTask.of(check_spec(dict(self.numba)), self.threads)
                if task.key() != self.key:
                    raise AutotuneError(f"its key {self.key} is not its kernel's ({task.key()})")
                return task
            if self.definition is not None:
                from autotune.definition import register_definition
                register_definition(self.op, self.definition)
            return Task.create(self.op, self.shape, self.dtype, self.threads)
        except AutotuneError as e:
            raise RecordError(f"record for {self.op!r} is not usable: {e}") from None

    def validated_config(self):  # type: ignore[no-untyped-def]
        """The config, checked knob by knob against the template's declared space, of a record whose
        timing is physically possible (`check_speed`)."""
        try:
            task = self.task()
            cfg = task.space().validate(self.config)
        except RecordError:
            raise
        except AutotuneError as e:
            raise RecordError(f"record for {self.key} has a config outside its space: {e}") from None
        self.check_speed(task.flops())
        return cfg

    def check_speed(self, flops: float) -> None:
        """Raise RecordError when the record claims more operations per second than any machine of
        its ISA does with its threads (`autotune.isa.speed_ceiling`): a forged or corrupt timing."""
        if not self.ok or flops <= 0:
            return
        from autotune.isa import speed_ceiling
        isa = self.target.get("isa") if self.target else None
        ceiling = speed_ceiling(isa if isinstance(isa, str) else None, self.dtype, self.threads)
        if flops / self.seconds > ceiling:
            raise RecordError(f"record for {self.key} claims {flops / self.seconds / 1e9:.4g} G operations/s, "
                              f"above the {ceiling / 1e9:.4g} no {isa or 'known'} machine with {self.threads} "
                              "thread(s) reaches: a forged or corrupt timing")


class RecordLog:
    """An append-only JSON-lines log. Every append writes one whole line under an exclusive lock on
    the file, fsynced (fsync=False: left to the OS), or raises RecordError and leaves no part of it.

    >>> import tempfile, os
    >>> log = RecordLog(os.path.join(tempfile.mkdtemp(), "log.jsonl"), fsync=False)
    >>> log.fsync
    False
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: Record) -> None:
        line = record.to_line().encode()
        _regular_or_absent(self.path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise RecordError(f"cannot open the tuning log {self.path} for appending: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            # a writer killed mid-line leaves no newline: start on a fresh line
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            except OSError as e:
                try:
                    os.ftruncate(fd, size)  # no torn line behind: the log ends where it did
                except OSError:
                    pass
                raise RecordError(f"cannot append to the tuning log {self.path}: {e.strerror}; the record was not "
                                  "kept (free space or fix the disk, then resume from the log)") from None
        finally:
            os.close(fd)  # closing releases the lock

    def extend(self, records: Iterable[Record]) -> None:
        for r in records:
            self.append(r)

    def load(self) -> list[Record]:
        return load_records(self.path)


class Log:
    """A tuning log read once and then followed: `records` are its valid records so far, and
    `refresh()` reads only the lines appended since (returning the new records), so a tuner
    consulting its log every batch reads each line once.

    keep: which records to hold (a tuner: its task's); the others are read past. Memory is bounded
    per file, not per line: each record held counts RECORD_OVERHEAD bytes plus LINE_FACTOR times
    its line's length, and a log whose held records would count more than `limit` (MAX_LOG_MEMORY,
    512 MiB: some 135k records of a typical 430-byte line) is refused with a RecordError saying
    what to do. Equal targets, shapes and definitions are held once. A line that is not a valid
    record is skipped with a warning naming the file and line (strict=True: raises). A last line
    without its newline is left for the next refresh unless it is a whole record (a writer may be
    in the middle of it); a file replaced or cut shorter is read again from its start.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "log.jsonl")
    >>> log = Log(path, missing_ok=True)
    >>> RecordLog(path).append(Record(op="matmul", shape={"M": 8}, dtype="float32", threads=1, config={}, costs=[1e-6]))
    >>> len(log.records), len(log.refresh()), len(log.records)
    (0, 1, 1)
    """

    def __init__(self, path: str | os.PathLike[str], *, keep: Callable[[Record], bool] | None = None,
                 strict: bool = False, missing_ok: bool = False, follow: bool = True,
                 limit: int = MAX_LOG_MEMORY) -> None:
        """follow=False: the log is read once, its last line taken as it is (skipped with a warning
        when it is no whole record) rather than left for a writer to finish."""
        self.path, self.keep, self.strict, self.missing_ok, self.limit = Path(path), keep, strict, missing_ok, limit
        self.follow = follow
        self.records: list[Record] = []
        self._reset(None)
        self.refresh()

    def _reset(self, ident: tuple[int, int] | None) -> None:
        self.records = []
        self.used = 0  # what the records held count against `limit`
        self._ident, self._offset, self._lineno = ident, 0, 0
        self._shared: dict[str, Any] = {}

    def refresh(self) -> list[Record]:
        """Read the lines appended since the last read; return the new records (those kept)."""
        _regular_or_absent(self.path)
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            if not self.missing_ok:
                raise RecordError(f"no tuning log at {self.path}") from None
            if self._ident is not None:
                self._reset(None)
            return []
        except OSError as e:
            raise RecordError(f"cannot read tuning log {self.path}: {e.strerror}") from None
        new: list[Record] = []
        with f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != self._ident or st.st_size < self._offset:
                self._reset((st.st_dev, st.st_ino))
            f.seek(self._offset)
            while True:
                raw = f.readline(MAX_LINE + 1)
                if not raw:
                    break
                whole = raw.endswith(b"\n")
                if len(raw) > MAX_LINE and not whole:
                    while True:  # read past it in chunks, never holding it whole
                        chunk = f.readline(1 << 16)
                        if not chunk or chunk.endswith(b"\n"):
                            whole = chunk.endswith(b"\n")
                            break
                    if not whole and self.follow:
                        break  # its end is not written yet
                    self._skip(RecordError(f"line longer than {MAX_LINE} bytes"))
                elif whole:
                    self._take(raw, new)
                elif not self._take(raw, new, last=True):
                    break  # a last line not yet whole: read it again next time
                self._offset = f.tell()
        return new

    def _take(self, raw: bytes, new: list[Record], last: bool = False) -> bool:
        """Parse one line and hold its record; False (nothing consumed) for a last line that is not
        yet a whole record."""
        try:
            r = None
            if raw.strip():
                r = Record.from_json(json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constant),
                                     shared=self._shared)
        except (ValueError, RecordError, RecursionError) as e:
            if last and self.follow:
                return False
            self._skip(e)
            return True
        self._lineno += 1
        if r is not None and (self.keep is None or self.keep(r)):
            self.used += RECORD_OVERHEAD + LINE_FACTOR * len(raw) + ELEMENT_BYTES * _elements(r)
            if self.used > self.limit:
                raise RecordError(f"{self.path} holds more records than autotune reads of one log ({self.limit >> 20} "
                                  f"MiB of records, at line {self._lineno}): tune into a new log, or keep each task's "
                                  "fastest records (autotune.records.distill)")
            self.records.append(r)
            new.append(r)
        return True

    def _skip(self, e: BaseException) -> None:
        self._lineno += 1
        why = "JSON nested too deeply" if isinstance(e, RecursionError) else str(e)[:300]
        msg = f"{self.path}:{self._lineno}: skipped a record that is not valid ({why})"
        if self.strict:
            raise RecordError(msg) from None
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def load_records(path: str | os.PathLike[str], *, strict: bool = False) -> list[Record]:
    """All valid records of a log, read once (`Log`: memory bounded per file). A line that is not a
    valid record is skipped with a warning naming the file and line (strict=True: raises instead);
    the rest still loads."""
    return Log(path, strict=strict, follow=False).records


def trust(timing: Any) -> int:
    """How far a timing (a Record or a MeasureResult) can be compared with others, best first: 0 a
    finalist's re-timing in alternating rounds (a busy spell falls on every finalist alike), 1 a
    single measurement (taken at its own moment: a quiet spell favours it).

    >>> trust(Record("matmul", {}, "float32", 1, {}, [1e-3], retimed=True)), trust(Record("matmul", {}, "float32", 1, {}, [1e-3], noisy=True))
    (0, 1)
    """
    return 0 if timing.retimed else 1


def kind(timing: Any) -> str:
    """What kind of timing it is, in words: "a quiet re-timing", "a noisy timing", ..."""
    return f"a {'noisy' if timing.noisy else 'quiet'} {'re-timing' if timing.retimed else 'timing'}"


def preference(r: Record) -> tuple[int, float]:
    """The order in which records are chosen as a task's best: re-timings of finalists first
    (trust), then the fastest. A noisy timing competes by its time: contention (CPU time stolen,
    another process on the kernel's cores) only ever adds time, so a noisy timing faster than a
    quiet one still belongs to the faster kernel."""
    return trust(r), r.seconds


def best_per_task(records: Iterable[Record], *, valid: bool = True) -> dict[str, Record]:
    """The best successful record of each task key whose config is valid for its task (an invalid
    record never hides a valid one): the fastest of the most trusted timings (`preference`: the
    finalists' re-timings in alternating rounds, when the log has any, before single timings); a
    config that failed the check of a re-timing is never the best; valid=False: unchecked."""
    by_task: dict[str, list[Record]] = {}
    failed: set[tuple[str, str]] = set()  # configs that failed a re-check: never a best, whatever they did before
    for r in records:
        if r.ok:
            by_task.setdefault(r.key, []).append(r)
        elif r.retimed and r.error != "infrastructure":
            failed.add((r.key, r.config_key()))
    best: dict[str, Record] = {}
    for key, rs in by_task.items():
        for r in sorted(rs, key=preference):
            if (key, r.config_key()) in failed:
                continue
            if valid:
                try:
                    r.validated_config()
                except RecordError:
                    continue
            best[key] = r
            break
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


def _number(x: Any) -> bool:
    """A finite JSON number a float holds (an integer of hundreds of digits is not one).

    >>> _number(1.5), _number(10 ** 400), _number(True), _number(float("inf"))
    (True, False, False, False)
    """
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return math.isfinite(x) if isinstance(x, float) else abs(x) <= 1 << 53


def _sweep_stamp(x: Any) -> bool:
    """A record's `sweep` field: exactly an id, the trials planned for its task and the sweep's tasks.

    >>> _sweep_stamp({"id": "a1", "trials": 8, "tasks": 2}), _sweep_stamp({"id": "a1", "trials": -1, "tasks": 2})
    (True, False)
    """
    def count(v: Any, low: int, high: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
    return (isinstance(x, dict) and set(x) == {"id", "trials", "tasks"} and isinstance(x["id"], str)
            and 0 < len(x["id"]) <= MAX_SWEEP_ID and x["id"].isascii() and x["id"].isalnum()
            and count(x["trials"], 0, MAX_PLANNED) and count(x["tasks"], 1, MAX_SWEEP_SIZE))


def _elements(r: Record) -> int:
    """The numbers and strings of a record's costs, config and target."""
    def n(x: Any) -> int:
        if isinstance(x, dict):
            return sum(map(n, x.values()))
        return sum(map(n, x)) if isinstance(x, list) else 1
    return len(r.costs or ()) + n(dict(r.config)) + n(dict(r.target))


def _shared(table: dict[str, Any], x: Any) -> Any:
    """The object equal to `x` that `table` holds (x itself, added, the first time)."""
    if not isinstance(x, dict):
        return x
    k = repr(x)
    return table.setdefault(k, x)


def _small(x: Any, depth: int = 2) -> bool:
    """A scalar, null, or (depth > 0) a list of at most MAX_LIST or an object of at most MAX_TARGET
    named entries, each small at depth - 1."""
    if _scalar(x) or x is None:
        return True
    if depth > 0 and isinstance(x, list):
        return len(x) <= MAX_LIST and all(_small(v, depth - 1) for v in x)
    if depth > 0 and isinstance(x, dict):
        return len(x) <= MAX_TARGET and all(isinstance(k, str) and len(k) <= MAX_NAME and _small(v, depth - 1)
                                            for k, v in x.items())
    return False


def _scalar(x: Any) -> bool:
    """A number, a boolean or a string of at most MAX_TEXT characters."""
    return isinstance(x, str) and len(x) <= MAX_TEXT or isinstance(x, bool) or _number(x)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise RecordError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise RecordError(f"{name} is not a number a record may hold")


def _regular_or_absent(path: Path) -> None:
    """A log is a regular file (a FIFO or a device would block or never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise RecordError(f"cannot use tuning log {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise RecordError(f"{path} is not a regular file: a tuning log must be a file")


def from_target(records: Iterable[Record], target: Mapping[str, Any], *, any_target: bool = False,
                what: str = "isa") -> list[Record]:
    """The records measured on a machine like `target`: the same ISA (what="isa": a kernel tuned
    for another ISA is not silently applied), or the same CPU model and ISA (what="machine": the
    timings compare). A record that names no target is kept. any_target=True keeps every record
    and warns once when some came from another machine.

    >>> r = Record(op="matmul", shape={"M": 8}, dtype="float32", threads=1, config={}, costs=[1.0],
    ...            target={"cpu": "X", "isa": "avx2"})
    >>> len(from_target([r], {"cpu": "X", "isa": "avx512f"}))
    0
    """
    from autotune.target import same_isa, same_machine
    same = same_isa if what == "isa" else same_machine
    out, other = [], set()
    for r in records:
        if not r.target or same(dict(r.target), dict(target)):
            out.append(r)
        elif any_target:
            out.append(r)
            other.add(f"{r.target.get('cpu', '?')} ({r.target.get('isa', '?')})")
        else:
            other.add(f"{r.target.get('cpu', '?')} ({r.target.get('isa', '?')})")
    if other and any_target:
        warnings.warn(f"using records measured on another machine: {', '.join(sorted(other))}; this one is "
                      f"{target.get('cpu', '?')} ({target.get('isa', '?')})", RuntimeWarning, stacklevel=2)
    return out
