"""The compile cache is verified, not trusted: a planted or corrupt entry never runs and is
rebuilt, Numba's corrupt cache files are dropped and recompiled, and a cache that cannot be
written is one error naming the directory.

Each rebuild after tampering runs in a fresh process, as a later tuner or `load_best` would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.codegen import build
from autotune.environment import ROOT, worker_env
from autotune.errors import CacheError
from autotune.ir import expr as te
from autotune.schedule import Schedule


def _schedule() -> Schedule:
    A = te.placeholder((64,), name="A")
    return Schedule(te.compute((64,), lambda i: A[i] * 3.0 + 1.0, name="B"))


# a fresh process builds the same schedule from the cache and reports the kernel's file and output
FRESH = """
import json, sys
from pathlib import Path
import numpy as np
from autotune.codegen import build
from autotune.ir import expr as te
from autotune.schedule import Schedule
A = te.placeholder((64,), name="A")
k = build(Schedule(te.compute((64,), lambda i: A[i] * 3.0 + 1.0, name="B")), cache_dir=Path(sys.argv[1]))
print(json.dumps({"path": str(k.path), "out": k(np.arange(64, dtype=np.float32)).tolist()}))
"""


def _build_in_fresh_process(cache: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", FRESH, str(cache)], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=worker_env())
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


EXPECTED = (np.arange(64, dtype=np.float32) * 3 + 1).tolist()


@pytest.fixture
def entry(tmp_path: Path) -> Path:
    """A cache with the kernel built in it (by another process, as a tuner's worker would); the
    kernel's source file."""
    got = _build_in_fresh_process(tmp_path / "cache")
    assert got["out"] == EXPECTED
    return Path(got["path"])


def test_a_planted_entry_never_runs_and_is_rewritten(entry: Path, tmp_path: Path) -> None:
    source = entry.read_text()
    marker = tmp_path / "planted-code-ran"
    entry.write_text(f"open({str(marker)!r}, 'w').write('x')\n"
                     "def kernel(A, B):\n    B[:] = 0\n")
    got = _build_in_fresh_process(tmp_path / "cache")
    assert not marker.exists(), "code planted in the cache ran"
    assert got["path"] == str(entry) and got["out"] == EXPECTED
    assert entry.read_text() == source


def test_random_bytes_in_an_entry_are_rebuilt_not_a_compile_error(entry: Path, tmp_path: Path) -> None:
    source = entry.read_text()
    entry.write_bytes(os.urandom(4096))
    assert _build_in_fresh_process(tmp_path / "cache")["out"] == EXPECTED
    assert entry.read_text() == source
    assert not [p for p in entry.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_corrupt_numba_cache_files_are_dropped_and_recompiled(entry: Path, tmp_path: Path) -> None:
    numba_files = sorted((entry.parent / "__pycache__").glob(f"{entry.stem}.*"))
    assert {p.suffix for p in numba_files} == {".nbi", ".nbc"}
    for p in numba_files:
        p.write_bytes(os.urandom(512))
    assert _build_in_fresh_process(tmp_path / "cache")["out"] == EXPECTED
    assert _build_in_fresh_process(tmp_path / "cache")["out"] == EXPECTED  # the rebuilt files load


def test_a_cache_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = blocker / "cache"  # its parent is a file: nobody, root included, can make it
    with pytest.raises(CacheError) as e:
        build(_schedule(), cache_dir=cache)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and f"the compile cache {cache} is not writable" in msg
    assert "set AUTOTUNE_CACHE_DIR to a writable directory" in msg
