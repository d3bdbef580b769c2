"""The target description: the ISA table, this machine's detection, and what a log records of it."""
from __future__ import annotations

import pytest

from autotune.errors import AutotuneError
from autotune.target import ISAS, Target, cache_sizes, current_target, host, isa


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
    assert here is host() and here.isa == isa()
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


def test_every_record_carries_the_vector_unit_and_caches() -> None:
    t = current_target(2)
    assert t["isa"] == isa() and t["threads"] == 2
    assert (t["vector_bits"], t["registers"]) == (host().vector_bits, host().registers)
    assert len(t["caches_kib"]) == 3 and t["cores"] == host().cores
