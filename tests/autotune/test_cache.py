"""`autotune cache`: the kernel cache's size, pruned least recently used first to a cap, by hand
or as a tuning session starts; keys, the timing lock and peak.json stay; links are never followed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.cache import MB, prune, prune_on_start, usage
from autotune.cli import main
from autotune.environment import cache_max_mb


def _kernel(root: Path, name: str, size: int, used: float) -> list[Path]:
    files = [root / "kernels" / f"{name}.py", root / "kernels" / "__pycache__" / f"{name}.kernel-10.py311.nbi",
             root / "kernels" / "__pycache__" / f"{name}.kernel-10.py311.1.nbc"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * size)
        os.utime(f, (used, used))
    return files


def _cache(root: Path) -> dict[str, list[Path]]:
    """Four kernels of 3 x 100 kB each, k_0 used longest ago; the files that must stay."""
    ks = {f"k_{i}": _kernel(root, f"k_{i}", 100_000, 1_000_000.0 + i) for i in range(4)}
    keep = [root / "kernels" / "__pycache__" / "autotune-cache.key", root / "timing.lock", root / "peak.json"]
    for f in keep:
        f.write_bytes(b"k" * 10)
        os.utime(f, (1.0, 1.0))  # older than every kernel: still never removed
    return {**ks, "keep": keep}


def test_prune_removes_the_least_recently_used_kernels_down_to_the_cap(tmp_path: Path) -> None:
    files = _cache(tmp_path)
    before = usage(tmp_path)
    assert before.kernels == 4 and before.kernel_bytes == 1_200_000 and before.files == 15
    done = prune(tmp_path, max_bytes=700_000)
    assert done.kernels == 2 and done.bytes == 600_000
    assert not any(f.exists() for f in files["k_0"] + files["k_1"])
    assert all(f.exists() for f in files["k_2"] + files["k_3"] + files["keep"])
    assert done.after.total_bytes <= 700_000
    prune(tmp_path, max_bytes=0)  # everything prunable: the kernels, never the key, lock or peak
    assert all(f.exists() for f in files["keep"]) and usage(tmp_path).kernels == 0


def test_prune_never_follows_a_link_out_of_the_cache(tmp_path: Path) -> None:
    root, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    precious = outside / "k_precious.py"
    precious.write_bytes(b"p" * 500_000)
    os.utime(precious, (1.0, 1.0))
    _cache(root)
    (root / "kernels" / "k_link.py").symlink_to(precious)
    (root / "kernels" / "__pycache__" / "k_dir").symlink_to(outside, target_is_directory=True)
    assert usage(root).total_bytes < 1_300_000  # links are not counted
    prune(root, max_bytes=0)
    assert precious.exists() and (root / "kernels" / "k_link.py").is_symlink()
    # a kernel folder that is itself a link to elsewhere: nothing in it is touched
    other = tmp_path / "other"
    files = _cache(other)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "kernels").symlink_to(other / "kernels", target_is_directory=True)
    assert prune(tmp_path / "linked", max_bytes=0).kernels == 0
    assert all(f.exists() for f in files["k_0"])


def test_a_tuning_session_prunes_to_the_cap_of_the_environment(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    files = _cache(tmp_path)
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_CACHE_MAX_MB", "0.95")
    assert cache_max_mb() == 0.95
    done = prune_on_start()
    assert done is not None and done.kernels == 1 and not files["k_0"][0].exists() and files["k_1"][0].exists()
    monkeypatch.setenv("AUTOTUNE_CACHE_MAX_MB", "0")  # no cap
    assert prune_on_start() is None and files["k_1"][0].exists()
    monkeypatch.setenv("AUTOTUNE_CACHE_MAX_MB", "lots")
    with pytest.warns(RuntimeWarning, match="AUTOTUNE_CACHE_MAX_MB='lots' is not a size"):
        assert cache_max_mb() == 500.0
    monkeypatch.delenv("AUTOTUNE_CACHE_MAX_MB")
    assert cache_max_mb() == 500.0


def test_the_cache_command_shows_the_size_and_prunes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    files = _cache(tmp_path)
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"cache {tmp_path}: 1.2 MB in 15 files; 4 generated kernels" in out and "500 MB" in out
    assert main(["cache", "--max-mb", "0.5"]) == 0  # without --prune: only says what would go
    assert "would remove 3 least recently used kernels (0.9 MB)" in capsys.readouterr().out
    assert files["k_0"][0].exists()
    assert main(["cache", "--prune", "--max-mb", "0.5"]) == 0
    assert "removed 3 least recently used kernels (0.9 MB)" in capsys.readouterr().out
    assert not files["k_2"][0].exists() and files["k_3"][0].exists() and all(f.exists() for f in files["keep"])
    assert main(["cache", "--max-mb", "-1"]) == 2
    assert "argument --max-mb: must be a size in MB >= 0" in capsys.readouterr().err
    assert MB == 1_000_000
