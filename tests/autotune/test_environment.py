"""Configuration in one place: only autotune/environment.py reads the environment, and its
docstring names every variable the code and the tests use."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from autotune import environment
from autotune.environment import ROOT, child_pythonpath, ray_runtime_env, settings, worker_env

PACKAGES = ("autotune", "measure", "templates")


def sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def test_root_is_the_directory_holding_the_packages() -> None:
    assert all((ROOT / top / "__init__.py").exists() for top in PACKAGES)


def test_only_environment_py_touches_the_environment() -> None:
    readers = [str(p.relative_to(ROOT)) for p in sources(*PACKAGES)
               if re.search(r"\benviron\b|\bgetenv\b", p.read_text())]
    assert sorted(set(readers)) == ["autotune/environment.py"]


def test_the_docstring_names_every_variable_in_use() -> None:
    used = {m for p in sources(*PACKAGES, "tests", "tutorials")
            for m in re.findall(r"\b(?:AUTOTUNE|NUMBA|RAY)_[A-Z_]+\b", p.read_text())}
    assert "AUTOTUNE_CACHE_DIR" in used
    assert sorted(v for v in used if v not in (environment.__doc__ or "")) == []


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_THREADS", "3")
    monkeypatch.delenv("AUTOTUNE_TARGET", raising=False)
    assert settings() == environment.Settings(tmp_path, 3, "host")
    monkeypatch.setenv("AUTOTUNE_TARGET", " avx2 ")
    assert settings().target == "avx2"
    monkeypatch.setenv("AUTOTUNE_THREADS", "zero")  # not a positive count: all cores
    assert settings().threads == (os.cpu_count() or 1)


def test_children_import_this_checkout_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert child_pythonpath() == str(ROOT)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert child_pythonpath() == str(ROOT) + os.pathsep + "/elsewhere"
    env = worker_env()
    assert env["PYTHONPATH"] == child_pythonpath() and env["NUMBA_OPT"] == "2"


def test_a_workers_numba_features_are_its_targets() -> None:
    from autotune.isa import host_features, host_isa
    from autotune.target import executable
    if not host_features() or host_isa() not in ("avx2", "avx512f"):
        pytest.skip("an x86 machine with AVX2 describes these")
    sse = worker_env("sse4.2")["NUMBA_CPU_FEATURES"].split(",")
    assert "-avx" in sse and "+avx2" not in sse and "+fma" not in sse and "+sse4.2" in sse
    avx2 = worker_env("avx2").get("NUMBA_CPU_FEATURES", host_features()).split(",")
    assert "+avx2" in avx2 and not any(f.startswith("+avx512") for f in avx2)
    if executable("avx512"):
        assert "-prefer-256-bit" in worker_env("avx512")["NUMBA_CPU_FEATURES"]  # 512-bit vectors
    assert "NUMBA_CPU_FEATURES" not in environment.numba_env("neon") or host_isa() == "neon"  # never compiled here


def test_ray_workers_get_autotune_and_numba_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    monkeypatch.setenv("AUTOTUNE_THREADS", "2")
    monkeypatch.setenv("NUMBA_OPT", "2")
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx512f")  # this host's: another node may lack them
    env = ray_runtime_env()["env_vars"]
    assert env["AUTOTUNE_THREADS"] == "2" and env["NUMBA_OPT"] == "2" and "SOMETHING_ELSE" not in env
    assert "NUMBA_CPU_FEATURES" not in env
    assert env["PYTHONPATH"] == child_pythonpath()
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
