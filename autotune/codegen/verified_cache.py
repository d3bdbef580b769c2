r"""Numba's disk cache, verified before Numba reads it: the file format, the key of each cache
directory, and the cache file class `autotune.codegen.healing` gives Numba.

Verified. Numba's cache files (an index `.nbi` per function, a data file `.nbc` per compiled
signature) are pickles, and unpickling runs whatever code the pickle names: bytes planted in a
cache directory would run in the process that loads them. So autotune writes each file as
`MAGIC + HMAC-SHA256(key, MAGIC + file name + payload) + payload`, and the index also holds the
SHA-256 of each data file's payload. A load reads the whole file (at most MAX_CACHE_FILE bytes,
a regular file only) and checks the magic and the MAC (hmac.compare_digest), and for a data file
the digest in the index, before anything is unpickled. A file that fails (planted, corrupt,
another key's, too large) is treated as missing: the function is compiled afresh and the file
overwritten.

The key: KEY_BYTES random bytes in the file KEY_NAME in the directory the cache files are in
(made on the first save there, mode 0600, atomically). One key per cache directory, not per
AUTOTUNE_CACHE_DIR: the library functions' cache (NUMBA_CACHE_DIR, or `__pycache__` beside
autotune/codegen/*.py) is shared by every AUTOTUNE_CACHE_DIR, and a key per AUTOTUNE_CACHE_DIR
would have them recompiled under each one. A key is used only if it is a regular file (not a
symbolic link) owned by this user (os.geteuid()) with no permission for group or others, of
KEY_BYTES bytes. Any other key is refused safely: nothing in that directory is loaded or saved
(its functions compile afresh in each process) and a one-line CacheWarning names the key and the
fix, once per process. A key of another user is no attack on this one (a shared cache directory
has one), and the cache only saves compile time, so no error stops the work.

Disk faults. A cache file that cannot be written (a full disk, a quota, a read-only file system,
an I/O error, the file-size limit) is no fault of the function: it runs, not cached, and a
one-line CacheWarning says so (once per directory and cause). A file that cannot be read is
missing.

Example (a cache file in the format above: it reads back; with one byte changed, it is missing)::

    >>> import hashlib, hmac, tempfile
    >>> from pathlib import Path
    >>> tmp = tempfile.TemporaryDirectory()
    >>> key = directory_key(tmp.name, create=True)
    >>> len(key) == KEY_BYTES and directory_key(tmp.name) == key
    True
    >>> f = Path(tmp.name) / "f.nbc"
    >>> _ = f.write_bytes(MAGIC + hmac.new(key, MAGIC + b"f.nbc\0" + b"data", hashlib.sha256).digest() + b"data")
    >>> read_verified(f, key)
    b'data'
    >>> _ = f.write_bytes(f.read_bytes()[:-1] + b"!")
    >>> read_verified(f, key) is None
    True
    >>> tmp.cleanup()
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import io
import itertools
import os
import pickle
import secrets
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

from autotune.environment import configure_numba

configure_numba()
from numba.core.caching import IndexDataCacheFile  # noqa: E402

__all__ = ["KEY_BYTES", "KEY_NAME", "MAGIC", "MAX_CACHE_FILE", "CacheWarning", "NoKey", "VerifiedCacheFile",
           "directory_key", "read_verified", "warn_not_cached"]

MAGIC = b"autotune verified numba cache 1\n"
KEY_NAME = "autotune-cache.key"
KEY_BYTES = 32
MAX_CACHE_FILE = 256 << 20  # bytes: a bigger cache file is not read (treated as missing)
_TAG = hashlib.sha256().digest_size


class CacheWarning(RuntimeWarning):
    """Numba's disk cache of a function is not used: its key is unsafe, or a file cannot be written."""


class NoKey(Exception):
    """The cache directory's key is unsafe (already warned about): nothing is saved there. Raised by
    VerifiedCacheFile's saves; the caller leaves the function uncached, without another warning."""


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheWarning, stacklevel=3)


def _refuse(directory: Path, key: Path, why: str, fix: str) -> None:
    _warn_once(f"autotune: Numba's cache in {directory} is not used (what is cached there compiles afresh): "
               f"its key {key} {why}; {fix}")


_REMAKE = "delete it (autotune makes a new private key; entries cached under the old one compile afresh)"


def _read_key(directory: Path) -> bytes | None:
    """The key of `directory` if it has a usable one; None if it has none (FileNotFoundError) or
    an unusable one (refused with a warning, and None)."""
    path = directory / KEY_NAME
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        _refuse(directory, path, f"cannot be examined ({e.strerror})", _REMAKE)
        return None
    if stat.S_ISLNK(st.st_mode):
        _refuse(directory, path, "is a symbolic link", _REMAKE)
        return None
    if not stat.S_ISREG(st.st_mode):
        _refuse(directory, path, "is not a regular file", _REMAKE)
        return None
    if st.st_uid != os.geteuid():
        _refuse(directory, path, f"belongs to another user (uid {st.st_uid}, not {os.geteuid()})",
                "delete it, or point NUMBA_CACHE_DIR (library functions) or AUTOTUNE_CACHE_DIR (kernels) "
                "at a directory of your own")
        return None
    if st.st_mode & 0o077:
        _refuse(directory, path, f"can be read or written by other users (mode {stat.S_IMODE(st.st_mode):04o})",
                _REMAKE)
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        _refuse(directory, path, f"cannot be read ({e.strerror})", _REMAKE)
        return None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):  # replaced between the checks: look again later
            return None
        key = os.read(fd, KEY_BYTES + 1)
    except OSError as e:
        _refuse(directory, path, f"cannot be read ({e.strerror})", _REMAKE)
        return None
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        _refuse(directory, path, f"is not a {KEY_BYTES}-byte key ({len(key)} bytes)", _REMAKE)
        return None
    return key


def _make_key(directory: Path) -> None:
    """Make the key of `directory` unless another process made it first. OSError when it cannot
    be written (a full disk): the caller does not cache."""
    path = directory / KEY_NAME
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{KEY_NAME}.")  # mode 0600 whatever the umask
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, path)  # appears complete or not at all; fails if there is one already
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            try:
                fd2 = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                return
            try:
                with os.fdopen(fd2, "wb") as f:
                    f.write(secrets.token_bytes(KEY_BYTES))
            except OSError:  # no half-written key left behind
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def directory_key(directory: str | os.PathLike[str], *, create: bool = False) -> bytes | None:
    """The secret that authenticates Numba's cache files in `directory` (see the module docstring).

    None when the directory has no key (and create is False) or an unsafe one (refused: a one-line
    CacheWarning names the key and the fix). create=True makes a key where there is none; OSError
    if it cannot be written.
    """
    d = Path(directory)
    key = _read_key(d)  # read each time: a key deleted or replaced since is never used from memory
    if key is None and create and not os.path.lexists(d / KEY_NAME):
        _make_key(d)
        key = _read_key(d)
    return key


def _tag(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, MAGIC + name.encode() + b"\0" + payload, hashlib.sha256).digest()


def read_verified(path: str | os.PathLike[str], key: bytes) -> bytes | None:
    """The payload of the cache file at `path` if it is a regular file of at most MAX_CACHE_FILE
    bytes that carries MAGIC and a valid MAC under `key` for its name; None otherwise (nothing of
    it is unpickled or trusted). A file that cannot be read is None too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_FILE:
                return None
            blob = f.read(MAX_CACHE_FILE + 1)
        except OSError:
            return None
    head = len(MAGIC) + _TAG
    if len(blob) > MAX_CACHE_FILE or len(blob) < head or not blob.startswith(MAGIC):
        return None
    tag, payload = blob[len(MAGIC):head], blob[head:]
    if not hmac.compare_digest(tag, _tag(key, os.path.basename(path), payload)):
        return None
    return payload


class VerifiedCacheFile(IndexDataCacheFile):
    """Numba's index and data files, each written as MAGIC + MAC + payload and verified before it
    is unpickled (see the module docstring). The index maps a key to (data file name, SHA-256 of
    its payload); the data file is written before the index that names it."""

    def _key(self, create: bool) -> bytes | None:
        return directory_key(self._cache_path, create=create)

    def _write(self, path: str, payload: bytes) -> None:
        key = self._key(create=True)
        if key is None:
            raise NoKey(path)
        with self._open_for_write(path) as f:
            f.write(MAGIC + _tag(key, os.path.basename(path), payload) + payload)

    def _load_index(self) -> dict[Any, Any]:
        key = self._key(create=False)
        payload = read_verified(self._index_path, key) if key is not None else None
        if payload is None:
            return {}
        stream = io.BytesIO(payload)
        if pickle.load(stream) != self._version:  # another Numba's: do not unpickle the rest
            return {}
        stamp, overloads = pickle.loads(stream.read())
        return overloads if stamp == self._source_stamp else {}

    def _save_index(self, overloads: dict[Any, Any]) -> None:
        self._write(self._index_path, pickle.dumps(self._version, protocol=-1)
                    + self._dump((self._source_stamp, overloads)))

    def load(self, key: Any) -> Any:
        entry = self._load_index().get(key)
        secret = self._key(create=False)
        if secret is None or not (isinstance(entry, tuple) and len(entry) == 2):
            return None
        name, digest = entry
        if not (isinstance(name, str) and os.path.basename(name) == name and isinstance(digest, bytes)):
            return None
        payload = read_verified(self._data_path(name), secret)
        if payload is None or not hmac.compare_digest(hashlib.sha256(payload).digest(), digest):
            return None
        return pickle.loads(payload)

    def save(self, key: Any, data: Any) -> None:
        payload = self._dump(data)
        overloads = self._load_index()
        entry = overloads.get(key)
        if isinstance(entry, tuple) and len(entry) == 2:
            name = entry[0]
        else:
            taken = {v[0] for v in overloads.values() if isinstance(v, tuple)}
            name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
        self._write(self._data_path(name), payload)
        overloads[key] = (name, hashlib.sha256(payload).digest())
        self._save_index(overloads)


def warn_not_cached(where: str, e: OSError) -> None:
    """Say that a cache file in the directory `where` could not be written (`e`: the disk's fault): a
    one-line CacheWarning, once per directory and cause; the function runs, not cached."""
    cause = errno.errorcode.get(e.errno or 0, type(e).__name__)
    _warn_once(f"autotune: a compiled function was not cached (it runs; each process compiles it afresh): "
               f"cannot write Numba's cache in {where} ({e.strerror or e}) [{cause}]")
