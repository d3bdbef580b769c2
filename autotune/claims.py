"""Claims: the configs running tuners are measuring now, so two tuners on one log never measure
the same config.

The claims live in a sidecar file beside the log (`LOG.claims`), one JSON line per claim: task
key, config key, pid, host, process start time and claim time. Every change takes an exclusive
`fcntl` lock on it and replaces it whole (written aside, then renamed), so a process killed
mid-change leaves the old claims intact. A claim of a process that is gone (on this host: no such
process, or the pid was reused; on another host: older than CLAIM_TTL_S) has expired. The log
itself is unchanged: a config the log already holds is never claimed, and a claim is released
once its record is logged.

Example::

    >>> import os, tempfile
    >>> log = os.path.join(tempfile.mkdtemp(), "tune.jsonl")
    >>> mine = Claims(log)
    >>> mine.claim("matmul|M=8", ["a", "b", "c"], logged=lambda: {"b"})
    ['a', 'c']
    >>> mine.release("matmul|M=8", ["a", "c"])
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Sequence

from autotune.errors import AutotuneError

CLAIM_TTL_S = 3600.0  # a claim of another host expires after this long (a batch takes minutes at most)


class ClaimError(AutotuneError):
    """The claims file beside a log cannot be used."""


def _start_time(pid: int) -> int | None:
    """The kernel's start time of a process (clock ticks since boot), None if it is gone or not knowable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
    if fields and fields[0] in ("Z", "X"):  # a zombie has finished
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def alive(pid: int, start: int | None) -> bool:
    """Whether the process `pid` that started at `start` (None: unknown) still runs on this host.

    >>> alive(os.getpid(), _start_time(os.getpid()))
    True
    """
    if os.path.isdir("/proc/self"):
        now = _start_time(pid)
        return now is not None and (start is None or now == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Claims:
    """The claims beside one log, held by this process under one owner id."""

    def __init__(self, log: str | os.PathLike[str], *, ttl: float = CLAIM_TTL_S) -> None:
        self.path = Path(str(log) + ".claims")
        self.ttl = ttl
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.start = _start_time(self.pid)
        self.owner = uuid.uuid4().hex[:12]  # two tuners of one process hold claims apart

    def claim(self, task: str, configs: Sequence[str], logged: Callable[[], Collection[str]]) -> list[str]:
        """Claim the configs (keys) of `task` that no live process claims and the log does not hold;
        return them, in order. logged() gives the config keys of `task` the log holds; it is read
        under the lock, after every other tuner released the claims of what it logged."""
        def change(claims: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
            live = [c for c in claims if self._live(c)]
            taken = {c["config"] for c in live if c["task"] == task}
            if any(k not in taken for k in configs):
                taken |= set(logged())
            got = [k for k in dict.fromkeys(configs) if k not in taken]
            now = time.time()
            live += [{"task": task, "config": k, "pid": self.pid, "host": self.host, "start": self.start,
                      "owner": self.owner, "time": now} for k in got]
            return live, got
        return self._update(change)

    def release(self, task: str, configs: Iterable[str]) -> None:
        """Drop this owner's claims of these configs (their records are logged, or they were not measured)."""
        done = set(configs)
        if not done:
            return

        def change(claims: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], None]:
            return [c for c in claims if self._live(c) and not (
                c["owner"] == self.owner and c["task"] == task and c["config"] in done)], None
        self._update(change)

    def held(self) -> list[dict[str, Any]]:
        """The live claims (of every process), as stored."""
        return self._update(lambda claims: (claims, [c for c in claims if self._live(c)]), write=False)

    def _live(self, c: dict[str, Any]) -> bool:
        if c["host"] == self.host:
            return c["owner"] == self.owner or alive(c["pid"], c.get("start"))
        return time.time() - c["time"] < self.ttl

    def _update(self, change: Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], Any]],
                write: bool = True) -> Any:
        fd = self._locked()
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                claims = _parse(f.read())
            new, answer = change(claims)
            if write and new != claims:
                aside = self.path.with_name(f"{self.path.name}.{self.pid}.{self.owner}.tmp")
                try:
                    aside.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in new))
                    os.replace(aside, self.path)  # whole or not at all; waiters see the new file
                except OSError as e:
                    aside.unlink(missing_ok=True)
                    raise ClaimError(f"cannot write the claims file {self.path}: {e.strerror}") from None
            return answer
        finally:
            os.close(fd)

    def _locked(self) -> int:
        """An fd of the current claims file with the exclusive lock held."""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise ClaimError(f"cannot open the claims file {self.path}: {e.strerror}; make the log's "
                                 "directory writable") from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not replaced while we waited for the lock
                return fd
            os.close(fd)


def _parse(data: bytes) -> list[dict[str, Any]]:
    """The well-formed claims of a claims file (anything else is dropped: a claim is only a hint)."""
    out = []
    for line in data.splitlines():
        try:
            c = json.loads(line)
        except ValueError:
            continue
        if (isinstance(c, dict) and isinstance(c.get("task"), str) and isinstance(c.get("config"), str)
                and isinstance(c.get("pid"), int) and isinstance(c.get("host"), str)
                and isinstance(c.get("owner"), str) and isinstance(c.get("time"), (int, float))
                and isinstance(c.get("start"), (int, type(None)))):
            out.append(c)
    return out
