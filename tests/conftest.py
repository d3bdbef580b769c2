"""Shared test set-up.

AUTOTUNE_CACHE_DIR must point at a private directory before autotune (and Numba) are imported,
so the suite never reads or writes the user's kernel cache: it is set at the very top of this
file, which pytest imports before any test module.
"""
from __future__ import annotations

import os
import shutil
import tempfile

_CACHE_DIR = tempfile.mkdtemp(prefix="autotune-tests-")
os.environ["AUTOTUNE_CACHE_DIR"] = _CACHE_DIR

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Compiles cost seconds: few examples, no deadline, no example database in the checkout.
settings.register_profile("autotune", deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "autotune"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test that compiles many kernels")
    config.addinivalue_line("markers", "target: the test follows the target in force (AUTOTUNE_TARGET): .ci/run "
                            "runs these again under every other target this machine executes")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/autotune/codegen/golden/*.py.txt instead of comparing "
                          "(same as AUTOTUNE_REGEN_GOLDEN=1)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir() -> str:
    """The private AUTOTUNE_CACHE_DIR of this test session."""
    return _CACHE_DIR


@pytest.fixture
def pin_target(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """pin_target(name): make `name` the target in force for this test (AUTOTUNE_TARGET: spaces,
    presets and workers follow it) and return its description. A test that names a tile, a lane
    count or a preset pins the target it is about. executes=True (for a test that runs kernels):
    skipped where this machine cannot run the target's code."""
    from autotune.target import describe, executable

    def pin(name: str, *, executes: bool = False):  # type: ignore[no-untyped-def]
        if executes and not executable(name):
            pytest.skip(f"this machine cannot run {name} code; the test's descriptions are checked elsewhere")
        monkeypatch.setenv("AUTOTUNE_TARGET", name)
        return describe(name)
    return pin


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden")) or os.environ.get("AUTOTUNE_REGEN_GOLDEN") == "1"

