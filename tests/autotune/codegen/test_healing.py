"""autotune's own cached Numba functions (the kernel trampoline, the thread team) heal their disk
cache: an entry written while their module ran under another name (`python -m doctest
autotune/codegen/team.py` imports it as `team`) fails to load under the package's name, and is
dropped and compiled afresh instead of breaking every kernel call.

Both processes run with NUMBA_CACHE_DIR in a temporary directory, so the entries are planted
there and the package's own __pycache__ is never touched.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autotune.environment import ROOT, worker_env

# the same functions and signatures as the doctests of invoke.py and team.py, so the entries those
# planted are the ones looked up; then a parallel kernel built and run on two threads
CHECK = """
import json
from autotune.codegen import build
import numba, numpy as np
from autotune.codegen.invoke import invoker_for
from autotune.codegen.team import team_for
from autotune.ir import expr as te
from autotune.schedule import Schedule

@numba.njit("void(float64[::1])", no_cpython_wrapper=True)
def fill(out):
    out[:] = 7.0
filled = np.zeros(3)
invoker_for(fill)(filled)

@numba.njit("void(float64[::1], int64, int64)", nogil=True)
def count(out, lo, hi):
    for i in range(lo, hi):
        out[i] = i
counted = np.zeros(4)
team_for(2).run(count, [(counted,), (counted,)], 4)

A = te.placeholder((64,), "float64", name="A")
B = te.compute((64,), lambda i: A[i] * 3.0 + 1.0, name="B")
s = Schedule(B)
s.parallel("B", "i")
k = build(s, threads=2)
assert k.nest.main.parallel_extent == 64, k.nest.main.parallel_extent
out = k(np.arange(64, dtype=np.float64))
print(json.dumps({"filled": filled.tolist(), "counted": counted.tolist(), "kernel": out.tolist()}))
"""


def _run(args: list[str], numba_cache: Path, autotune_cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**worker_env(), "NUMBA_CACHE_DIR": str(numba_cache), "AUTOTUNE_CACHE_DIR": str(autotune_cache)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_library_functions_heal_a_cache_written_under_another_module_name(tmp_path: Path) -> None:
    numba_cache, autotune_cache = tmp_path / "numba", tmp_path / "autotune"
    codegen = ROOT / "autotune" / "codegen"
    planted = _run(["-m", "doctest", str(codegen / "invoke.py"), str(codegen / "team.py")], numba_cache, autotune_cache)
    assert planted.returncode == 0, planted.stdout[-2000:] + planted.stderr[-2000:]
    indexes = {p.name.split(".")[0] for p in numba_cache.rglob("*.nbi")}
    assert {"invoke", "team"} <= indexes, f"the doctests planted no cache entries: {sorted(indexes)}"

    p = _run(["-c", CHECK], numba_cache, autotune_cache)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"filled": [7.0, 7.0, 7.0], "counted": [0.0, 1.0, 2.0, 3.0],
                   "kernel": [i * 3.0 + 1.0 for i in range(64)]}
