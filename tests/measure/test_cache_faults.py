"""A compile cache on a disk that refuses writes is the infrastructure's fault, never a config's.

The fault is real, made by the kernel: the measurement workers run under a file-size limit
(RLIMIT_FSIZE; Python ignores SIGXFSZ, so a write past the limit fails with EFBIG, as one on a
full disk fails with ENOSPC), set by a user module every worker runs at set-up. The driver and
its log are not limited. Runs go through autotune.tuning.tune with the local runner.

- Numba's cache files cannot be written (a limit above a kernel's source, below its machine code):
  each kernel is compiled and measured, just not cached.
- The kernel's source cannot be written: an infrastructure fault, so the run stops naming it, and
  a resumed run on a working disk measures every config.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.codegen.compile import _numba_cache_files
from autotune.errors import AutotuneError
from autotune.records import load_records
from autotune.retime import FinalistOptions
from autotune.tuning import tune
from autotune.measure.local import LocalRunnerOptions
from autotune.measure.timing import TimingProtocol
from autotune.templates import USER_MODULES
from tests.measure import faulty_templates as ft

FAST = TimingProtocol(warmup=1, number=1, repeat=3, min_repeat_ms=1)
NO_FINALISTS = FinalistOptions(count=0, noisy_count=0)


def _tune(log: Path, cache: Path, shape: dict[str, int], file_size_limit: int | None, tmp_path: Path) -> object:
    """Tune both configs of the faulty template's working kernel; the workers write no file
    larger than `file_size_limit` bytes (None: no limit)."""
    script = tmp_path / f"limit_{file_size_limit}.py"
    script.write_text("import resource\n"
                      f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size_limit}, "
                      "resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n")
    if file_size_limit is not None:
        USER_MODULES.append(f"file:{script}")
    try:
        return tune(op="faulty", shape=shape, threads=1, trials=2, batch=2, log=log, progress=False,
                    runner_options=LocalRunnerOptions(compile_workers=1, protocol=FAST, cache_dir=str(cache)),
                    finalists=NO_FINALISTS)
    finally:
        if file_size_limit is not None:
            USER_MODULES.remove(f"file:{script}")


def _kernels(cache: Path) -> list[Path]:
    return sorted((cache / "kernels").glob("k_*.py"))


def test_numba_cache_files_the_disk_refuses_leave_the_kernels_measured(tmp_path: Path) -> None:
    log, cache = tmp_path / "tune.jsonl", tmp_path / "cache"
    # 4 KiB: a kernel's source (~0.5 KiB) and the key fit, its machine code (~13 KiB) does not
    result = _tune(log, cache, {"N": 61, "mode": ft.OK}, 4096, tmp_path)
    records = load_records(log)
    assert [r.error for r in records] == [None, None] and all(r.ok for r in records), [r.message for r in records]
    assert result.measured == 2 and result.infrastructure == 0  # type: ignore[attr-defined]
    kernels = _kernels(cache)
    assert len(kernels) == 2 and all(_numba_cache_files(k) == [] for k in kernels), "the disk took the cache files"


def test_a_kernel_source_the_disk_refuses_is_infrastructure_and_measured_on_resume(tmp_path: Path) -> None:
    log, cache = tmp_path / "tune.jsonl", tmp_path / "cache"
    shape = {"N": 59, "mode": ft.OK}
    with pytest.raises(AutotuneError, match="infrastructure.*a disk error while writing the kernel.*File too large"):
        _tune(log, cache, shape, 256, tmp_path)  # 256 bytes: not even a kernel's source fits
    faults = load_records(log)
    assert faults and {r.error for r in faults} == {"infrastructure"}, [(r.error, r.message) for r in faults]

    result = _tune(log, cache, shape, None, tmp_path)  # the disk works again: the same log, resumed
    assert result.measured == 2 and result.resumed == 0  # type: ignore[attr-defined]
    measured = load_records(log)[len(faults):]
    assert len(measured) == 2 and all(r.ok for r in measured), [(r.error, r.message) for r in measured]
    kernels = _kernels(cache)
    assert len(kernels) == 2 and all(_numba_cache_files(k) for k in kernels), "kernels are cached on a working disk"
