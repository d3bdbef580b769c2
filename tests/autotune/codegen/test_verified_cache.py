"""Numba's disk cache is verified before Numba reads it (autotune.codegen.verified_cache): bytes planted
in the cache files of a kernel or of a library function (the trampoline of invoke.py, the thread
team of team.py) never run, genuine files still load, and a key that other users can read (or
that is a symbolic link, another user's, the wrong size) is never used.

Fault injection by planting files between processes: each build after tampering runs in a fresh
process, as a later tuner, worker or `load_best` would. The planted pickles would create a marker
file when unpickled.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.codegen import build
from autotune.codegen.verified_cache import KEY_BYTES, KEY_NAME, MAGIC, CacheWarning, directory_key, read_verified
from autotune.environment import ROOT, worker_env
from autotune.ir import expr as te
from autotune.schedule import Schedule


class _Plant:
    """Unpickled, it opens (creates) `marker`: what a pickle planted in a cache file could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (self.marker, "w")


def _planted(marker: Path) -> bytes:
    return pickle.dumps(_Plant(marker))


# a parallel kernel on two threads: the kernel, invoke._invoke and team._call/_now all load or compile
PROBE = """
import json
import numpy as np
from autotune.codegen import build
from autotune.codegen.invoke import _invoke
from autotune.codegen.team import _call, _now
from autotune.ir import expr as te
from autotune.schedule import Schedule
A = te.placeholder((96,), "float64", name="A")
s = Schedule(te.compute((96,), lambda i: A[i] * 7.0 - 2.0, name="B"))
s.parallel("B", "i")
k = build(s, threads=2)
out = k(np.arange(96, dtype=np.float64)).tolist()
fns = {"kernel": k.main, "invoke": _invoke, "call": _call, "now": _now}
print(json.dumps({"ok": out == [i * 7.0 - 2.0 for i in range(96)],
                  "hits": {n: sum(f.stats.cache_hits.values()) for n, f in fns.items()},
                  "misses": {n: sum(f.stats.cache_misses.values()) for n, f in fns.items()}}))
"""


def _probe(numba_cache: Path, autotune_cache: Path) -> dict[str, Any]:
    env = {**worker_env(), "NUMBA_CACHE_DIR": str(numba_cache), "AUTOTUNE_CACHE_DIR": str(autotune_cache)}
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_bytes_planted_in_the_numba_cache_never_run(tmp_path: Path) -> None:
    numba_cache, autotune_cache = tmp_path / "numba", tmp_path / "autotune"
    cold = _probe(numba_cache, autotune_cache)
    assert cold["ok"] and all(cold["misses"].values()), cold
    warm = _probe(numba_cache, autotune_cache)  # genuine files: everything loads, nothing compiles
    assert warm["ok"] and all(warm["hits"].values()) and not any(warm["misses"].values()), warm

    files = [p for p in numba_cache.rglob("*") if p.suffix in (".nbi", ".nbc")]
    kernel = [p for p in files if p.name.startswith("k_")]
    library = [p for p in files if p.name.startswith(("invoke._invoke", "team._call", "team._now"))]
    assert {p.suffix for p in kernel} == {p.suffix for p in library} == {".nbi", ".nbc"}, sorted(map(str, files))
    marker = tmp_path / "planted-code-ran"
    for p in kernel:  # Numba's own format: a bare pickle
        p.write_bytes(_planted(marker))
    for p in library:  # autotune's format, by someone without the key
        p.write_bytes(MAGIC + bytes(hashlib.sha256().digest_size) + _planted(marker))

    tampered = _probe(numba_cache, autotune_cache)
    assert not marker.exists(), "a pickle planted in Numba's cache ran"
    assert tampered["ok"], tampered
    assert all(tampered["misses"][n] for n in ("kernel", "invoke", "call", "now")), tampered  # compiled afresh
    assert all(p.read_bytes().startswith(MAGIC) for p in kernel + library)  # and the planted files overwritten


def _forged(key: bytes, path: Path, payload: bytes) -> bytes:
    """A cache file for `path` made with `key` (the format in autotune.codegen.verified_cache)."""
    return MAGIC + hmac.new(key, MAGIC + path.name.encode() + b"\0" + payload, hashlib.sha256).digest() + payload


# a fresh process builds the kernel of test_a_key_others_could_read_* from the cache and runs it
FRESH = """
import json, sys
from pathlib import Path
import numpy as np
from autotune.codegen import build
from autotune.ir import expr as te
from autotune.schedule import Schedule
A = te.placeholder((77,), name="A")
k = build(Schedule(te.compute((77,), lambda i: A[i] * 5.5 + 2.0, name="B")), cache_dir=Path(sys.argv[1]))
print(json.dumps(k(np.arange(77, dtype=np.float32)).tolist()))
"""


def test_a_key_others_could_read_is_refused_and_what_it_signs_never_runs(tmp_path: Path) -> None:
    """Whoever could read the key could sign a planted pickle: with a key of mode 0644 nothing in
    its directory is loaded (nor saved), one line says so and how to fix it, and the kernel runs."""
    A = te.placeholder((77,), name="A")
    k = build(Schedule(te.compute((77,), lambda i: A[i] * 5.5 + 2.0, name="B")), cache_dir=tmp_path / "cache")
    expected = k(np.arange(77, dtype=np.float32)).tolist()
    where = Path(k.main._cache.cache_path)
    key_file = where / KEY_NAME
    key = key_file.read_bytes()
    key_file.chmod(0o644)
    marker = tmp_path / "planted-code-ran"
    planted = {p: _forged(key, p, _planted(marker)) for p in where.glob(f"{k.path.stem}.*")
               if p.suffix in (".nbi", ".nbc")}
    assert {p.suffix for p in planted} == {".nbi", ".nbc"}
    for p, blob in planted.items():
        p.write_bytes(blob)
        assert read_verified(p, key) == _planted(marker)  # the forgery is good: only the key's refusal stops it

    p = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "cache")], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=worker_env())
    assert p.returncode == 0, p.stderr[-3000:]
    assert not marker.exists(), "a pickle signed with a key others could read ran"
    assert json.loads(p.stdout.strip().splitlines()[-1]) == expected
    said = [line for line in p.stderr.splitlines() if "CacheWarning" in line]
    assert len(said) == 1 and str(key_file) in said[0] and "mode 0644" in said[0] and "delete it" in said[0], p.stderr
    assert all(p.read_bytes() == blob for p, blob in planted.items()), "saved where the key is refused"


def _unsafe_key(kind: str, d: Path) -> Path:
    key = d / KEY_NAME
    if kind == "symlink":
        real = d.parent / "elsewhere.key"
        real.write_bytes(os.urandom(KEY_BYTES))
        real.chmod(0o600)
        key.symlink_to(real)
        return key
    key.write_bytes(os.urandom(KEY_BYTES // 2 if kind == "short" else KEY_BYTES))
    key.chmod(0o644 if kind == "mode" else 0o600)
    if kind == "owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(key, 54321, -1)
    return key


@pytest.mark.parametrize("kind, why", [("mode", "mode 0644"), ("symlink", "symbolic link"),
                                       ("owner", "belongs to another user"), ("short", f"not a {KEY_BYTES}-byte key")])
def test_an_unsafe_key_is_never_used_and_one_line_names_it(tmp_path: Path, kind: str, why: str) -> None:
    d = tmp_path / "cache"
    d.mkdir()
    key = _unsafe_key(kind, d)
    before = os.readlink(key) if key.is_symlink() else key.read_bytes()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert directory_key(d, create=True) is None
    (w,) = [w for w in seen if issubclass(w.category, CacheWarning)]
    msg = str(w.message)
    assert "\n" not in msg and str(key) in msg and why in msg and "delete it" in msg, msg
    assert (os.readlink(key) if key.is_symlink() else key.read_bytes()) == before  # left as it was


def test_a_new_key_is_private_and_kept(tmp_path: Path) -> None:
    key = directory_key(tmp_path, create=True)
    st = (tmp_path / KEY_NAME).lstat()
    assert key is not None and len(key) == KEY_BYTES and st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    assert directory_key(tmp_path, create=True) == key
    assert [p.name for p in tmp_path.iterdir()] == [KEY_NAME]  # no temporary file left
