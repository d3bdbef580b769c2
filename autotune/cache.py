"""The kernel cache ($AUTOTUNE_CACHE_DIR, autotune.environment): how big it is, and pruning it.

Every kernel autotune generates stays in `<cache>/kernels/k_<hash>.py`, with Numba's compile cache
files beside it in `kernels/__pycache__/k_<hash>.*` (.nbi, .nbc): a busy afternoon leaves hundreds.
`prune` removes whole kernels (the source and its Numba files), least recently used first (a file's
access or modification time, whichever is later), until the cache is at most a size cap; `autotune
cache --prune` does it by hand, and every tuning session starts with `prune_on_start` (the cap:
AUTOTUNE_CACHE_MAX_MB, default 500 MB; 0: none). A kernel pruned is generated and compiled again
when it is needed. Nothing else is ever removed: the cache's keys (`autotune-cache.key`), the
timing lock and the machine's peak (peak.json) stay. Symbolic links are never followed, counted or
removed: whatever one points at, inside the cache or out of it, is left alone.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> usage(root).total_bytes
    0
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from autotune.codegen.verified_cache import KEY_NAME
from autotune.environment import cache_max_mb, settings

MB = 1_000_000
PROTECTED = frozenset({KEY_NAME, "timing.lock", "peak.json"})  # never removed, wherever they are


@dataclass
class Kernel:
    """One generated kernel's files (its source and Numba's files), their bytes and its last use."""
    name: str
    files: list[Path] = field(default_factory=list)
    bytes: int = 0
    last_used: float = 0.0


@dataclass(frozen=True)
class Usage:
    """A cache's size: every regular file under it (links not followed), and of those the kernels'."""
    root: Path
    total_bytes: int
    files: int
    kernel_bytes: int
    kernels: int

    def describe(self) -> str:
        return (f"{self.root}: {self.total_bytes / MB:.1f} MB in {self.files} files; {self.kernels} generated "
                f"kernels with their Numba cache files: {self.kernel_bytes / MB:.1f} MB")


@dataclass(frozen=True)
class Pruned:
    """What a prune removed, and the cache's size after it."""
    kernels: int
    bytes: int
    after: Usage


def _files(directory: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """The regular files under a directory, recursively, never through a symbolic link."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _files(Path(e.path))
        elif stat.S_ISREG(st.st_mode):
            yield Path(e.path), st


def _real_dir(path: Path) -> bool:
    """A directory, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def kernels(root: Path) -> dict[str, Kernel]:
    """The generated kernels of a cache by name (k_<hash>), each with its files."""
    out: dict[str, Kernel] = {}
    kdir = root / "kernels"
    if not _real_dir(root) or not _real_dir(kdir):
        return out
    places = [(kdir, (".py",)), (kdir / "__pycache__", (".nbi", ".nbc"))]
    for directory, suffixes in places:
        if not _real_dir(directory):
            continue
        for e in os.scandir(directory):
            name = e.name
            if not name.startswith("k_") or name in PROTECTED or not name.endswith(suffixes):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            k = out.setdefault(name.split(".")[0], Kernel(name.split(".")[0]))
            k.files.append(Path(e.path))
            k.bytes += st.st_size
            k.last_used = max(k.last_used, st.st_atime, st.st_mtime)
    return out


def usage(root: Path | None = None) -> Usage:
    """The size of the cache at root (default: AUTOTUNE_CACHE_DIR's)."""
    root = Path(root) if root is not None else settings().cache_dir
    total = files = 0
    if _real_dir(root) or root.is_dir():  # the cache dir itself may be a link the user chose
        for _, st in _files(root):
            total += st.st_size
            files += 1
    ks = kernels(root.resolve()) if root.exists() else {}
    return Usage(root, total, files, sum(k.bytes for k in ks.values()), len(ks))


def prune(root: Path | None = None, max_bytes: int = 500 * MB, *, dry_run: bool = False) -> Pruned:
    """Remove generated kernels, least recently used first, until the cache holds at most max_bytes
    (or no kernel is left). dry_run: say what would go, remove nothing."""
    root = Path(root) if root is not None else settings().cache_dir
    before = usage(root)
    real = root.resolve()
    excess = before.total_bytes - max(0, max_bytes)
    removed = removed_bytes = 0
    for k in sorted(kernels(real).values(), key=lambda k: (k.last_used, k.name)):
        if excess <= 0:
            break
        for f in k.files:
            if dry_run:
                continue
            try:  # checked again just before: a regular file, directly in the cache's kernel folders
                if not stat.S_ISREG(os.lstat(f).st_mode) or f.name in PROTECTED or \
                        f.parent.resolve() not in (real / "kernels", real / "kernels" / "__pycache__"):
                    continue
                f.unlink()
            except FileNotFoundError:
                continue
        excess -= k.bytes
        removed += 1
        removed_bytes += k.bytes
    after = before if dry_run else usage(root)
    return Pruned(removed, removed_bytes, after)


def prune_on_start() -> Pruned | None:
    """Keep the cache under AUTOTUNE_CACHE_MAX_MB as a tuning session starts (None: no cap, or
    the cache could not be read). Never raises: a cache that cannot be pruned is no reason to stop."""
    try:
        cap = cache_max_mb()
        if cap <= 0:
            return None
        root = settings().cache_dir
        if usage_bytes_fast(root) <= cap * MB:
            return None
        return prune(root, int(cap * MB))
    except OSError:
        return None


def usage_bytes_fast(root: Path) -> int:
    """The cache's bytes (as usage(), without the kernels' grouping)."""
    return sum(st.st_size for _, st in _files(root)) if root.is_dir() else 0


__all__ = ["MB", "PROTECTED", "Kernel", "Pruned", "Usage", "kernels", "prune", "prune_on_start", "usage"]
