"""Ray is the [ray] extra: without it, everything but sweeps and runner="ray" works, and those two
say in one line which extra to install. Ray is installed here, so each check runs in a fresh
Python that refuses to import it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autotune.environment import worker_env

BLOCK_RAY = """
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoRay())
"""
NEEDS_RAY = "Ray sweeps and runner='ray' need Ray: pip install '.[ray]' in autotune's checkout (or: pip install ray)"


def without_ray(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_RAY + code], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=worker_env())


def test_the_blocker_blocks_ray(tmp_path: Path) -> None:
    proc = without_ray("import ray", tmp_path)
    assert proc.returncode == 1 and "No module named 'ray'" in proc.stderr


def test_the_cli_lists_without_ray_and_a_sweep_says_which_extra_it_needs(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('[[task]]\nop = "matmul"\nshapes = ["8x8x8"]\ntrials = 1\n')
    proc = without_ray(f"""
from autotune.cli import main
assert main(["list"]) == 0
sys.exit(main(["sweep", {str(spec)!r}, "--log", {str(tmp_path / "log.jsonl")!r}, "--no-progress"]))
""", tmp_path)
    assert "matmul" in proc.stdout, proc.stderr
    assert proc.returncode == 2 and proc.stderr == f"autotune: error: {NEEDS_RAY}\n"
    assert not (tmp_path / "log.jsonl").exists()  # nothing started


def test_runner_ray_without_ray_is_the_same_one_line_error(tmp_path: Path) -> None:
    proc = without_ray(f"""
import autotune
from autotune.measure.ray_runner import RayRunner
try:
    RayRunner()
except autotune.AutotuneError as e:
    print(e)
""", tmp_path)
    assert proc.stdout == NEEDS_RAY + "\n", proc.stderr
