"""Every tutorial runs to the end in its fast mode, as a user would run it (a fresh process)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("script", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs_in_fast_mode(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(script), "--fast"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "ok" in p.stdout or "GFLOP/s" in p.stdout
