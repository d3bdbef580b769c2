"""The machine-wide timing lock: every timing of a kernel or a baseline holds it, so no two timings
on this machine overlap (an exclusive flock on one file in the cache directory).

    >>> import tempfile
    >>> from pathlib import Path
    >>> with TimingLock(lock_path(Path(tempfile.mkdtemp()))):
    ...     pass
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


def lock_path(cache_dir: Path) -> str:
    """The lock file of a cache directory (the settings' one is shared by every autotune process)."""
    return str(cache_dir / "timing.lock")


class TimingLock:
    """Holds the lock at `path` for the block (path None: no lock)."""

    def __init__(self, path: str | None) -> None:
        self.path, self.fd = path, -1

    def __enter__(self) -> "TimingLock":
        if self.path:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the file releases the lock
            self.fd = -1
