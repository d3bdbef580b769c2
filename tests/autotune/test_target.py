"""The target description: the ISA table, this machine's detection, the target in force
(AUTOTUNE_TARGET), the code Numba generates for it, and what a log records of it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autotune.environment import ROOT
from autotune.errors import AutotuneError
from autotune.isa import host_isa
from autotune.target import ISAS, TARGETS, Target, cache_sizes, current, current_target, describe, executable, host

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target


@pytest.mark.parametrize("name, f32, f64, regs", [("avx512f", 16, 8, 32), ("avx2", 8, 4, 16),
                                                  ("sse4.2", 4, 2, 16), ("neon", 4, 2, 32)])
def test_lanes_and_registers_follow_the_vector_width(name: str, f32: int, f64: int, regs: int) -> None:
    t = Target.named(name)
    assert (t.lanes("float32"), t.lanes("float64"), t.registers) == (f32, f64, regs)


def test_a_register_tile_fits_when_accumulators_operands_and_a_broadcast_do() -> None:
    avx2 = Target.named("avx2")
    assert avx2.fits_tile(6, 2)          # 12 + 2 + 1 = 15 of 16
    assert not avx2.fits_tile(6, 3)      # 18 accumulators alone
    assert Target.named("avx512f").fits_tile(8, 3) and not Target.named("avx512f").fits_tile(8, 4)


def test_bad_names_are_one_line_errors() -> None:
    with pytest.raises(AutotuneError, match="unknown ISA 'avx9'"):
        Target.named("avx9")
    with pytest.raises(AutotuneError, match="dtype 'int8'"):
        Target.named("avx2").lanes("int8")


def test_this_machine_is_described_once_and_consistently() -> None:
    here = host()
    assert here is host() and here.isa == host_isa()
    if here.isa in ISAS:
        assert here.vector_bits == ISAS[here.isa][0] and here.registers == ISAS[here.isa][1]
    assert 0 < here.l1d <= here.l2 <= here.l3 and here.cores >= 1


def test_caches_are_read_from_sysfs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "1024K"), (3, "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cache_sizes(tmp_path) == (48 << 10, 1 << 20, 32 << 20)


def test_every_record_carries_the_vector_unit_and_caches_of_the_target_in_force(pin_target) -> None:  # type: ignore[no-untyped-def]
    t = current_target(2)
    assert t["isa"] == current().isa and t["threads"] == 2
    assert (t["vector_bits"], t["registers"]) == (current().vector_bits, current().registers)
    assert len(t["caches_kib"]) == 3 and t["cores"] == host().cores
    pin_target("sse4.2")
    t = current_target(1)
    assert (t["isa"], t["vector_bits"], t["registers"]) == ("sse4.2", 128, 16) and t["cpu"] == current_target(1)["cpu"]


def test_the_listed_targets_are_fixed_descriptions(pin_target) -> None:  # type: ignore[no-untyped-def]
    assert {"host", "avx512", "avx2", "sse4.2", "neon"} <= set(TARGETS)
    assert describe("avx512") == describe("avx512f") and describe("avx512").isa == "avx512f"
    assert (describe("neon").lanes("float32"), describe("neon").registers) == (4, 32)
    assert describe("avx2").l1d == 32 << 10  # not this machine's: the same description everywhere
    assert current() == describe(os.environ.get("AUTOTUNE_TARGET") or "host")
    assert pin_target("avx2") is current() and current().isa == "avx2"
    assert executable("host") and executable("avx2") == (host_isa() in ("avx2", "avx512f"))
    assert executable("neon") == (host_isa() == "neon")


def test_an_unknown_target_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_TARGET", "avx9")
    with pytest.raises(AutotuneError, match=r"AUTOTUNE_TARGET='avx9' is not a target; use one of host, avx512"):
        current()


def test_a_target_this_machine_cannot_run_is_described_and_never_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.task import Task
    from autotune.measure.local import LocalRunner
    foreign = next(n for n in TARGETS if not executable(n))  # NEON on x86, AVX-512 or AVX2 on ARM
    monkeypatch.setenv("AUTOTUNE_TARGET", foreign)
    task = Task.create("matmul", "64x64x64", threads=1)
    vec = describe(foreign).lanes("float32")
    assert all(nr % vec == 0 for nr in task.space().by_name["nr"].values() if nr < 64)  # its tiles
    assert "def kernel" in task.source(task.default_config())  # its source can be shown
    with pytest.raises(AutotuneError, match=f"AUTOTUNE_TARGET={foreign} .* cannot run"):
        task.build(task.default_config())
    with pytest.raises(AutotuneError, match="cannot run"):
        LocalRunner()


ASM_PROBE = """
import json, re, sys
import autotune
from autotune.task import Task
t = Task.create("matmul", "48x64x32", threads=1)
k = t.build(t.default_config())
t.verify(k)
asm = "".join(k.main.inspect_asm().values())
print(json.dumps({"zmm": len(re.findall("%zmm", asm)), "ymm": len(re.findall("%ymm", asm)),
                  "vex": len(re.findall(r"\tv[a-z0-9]+\t", asm)), "isa": autotune.target.current().isa}))
"""


@pytest.mark.parametrize("name, zmm, ymm, vex", [("avx512", True, None, True), ("avx2", False, True, True),
                                                 ("sse4.2", False, False, False)])
def test_numba_generates_code_of_the_targets_isa(name: str, zmm: bool, ymm: bool | None, vex: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """AVX2 code on an AVX-512 machine has no zmm register; SSE4.2 code no VEX instruction at all:
    NUMBA_CPU_FEATURES turns off what lies above the target."""
    if not executable(name):
        pytest.skip(f"this machine cannot run {name} code")
    env = dict(os.environ, AUTOTUNE_TARGET=name, AUTOTUNE_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_CPU_FEATURES", None)
    out = subprocess.run([sys.executable, "-c", ASM_PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["isa"] == describe(name).isa
    assert (got["zmm"] > 0) == zmm and (got["vex"] > 0) == vex, got
    if ymm is not None:
        assert (got["ymm"] > 0) == ymm, got
