"""The machine kernels are generated for and measured on: its vector unit, caches and cores.

`host()` describes this machine once (ISA from LLVM's host features, caches from the OS);
`Target.named(isa)` describes another ISA. `current()` is the target in force: the one
AUTOTUNE_TARGET names (`TARGETS`: host, avx512, avx2, sse4.2, neon), else this machine. Templates
derive their register tiles, vector widths and presets from it, the roofline model its peak, Numba
generates code for its ISA (autotune.environment), and every log record carries
`current_target(threads)`. A named target is a fixed description (the ISA's registers, typical
caches), so a test that pins one means the same on every machine; one this host cannot execute
(AVX-512 on an AVX2 host, NEON on x86) can be described and its source generated, but kernels for
it are not compiled here (`check_executable`).

Example::

    >>> t = Target.named("avx2")
    >>> t.lanes("float32"), t.lanes("float64"), t.registers
    (8, 4, 16)
    >>> Target.named("avx512f").fits_tile(rows=6, vectors=3)   # 18 accumulators + 3 B vectors + 1 broadcast
    True
    >>> t.fits_tile(rows=6, vectors=3)
    False
    >>> describe("avx512").isa, describe("sse4.2").lanes("float32")
    ('avx512f', 4)
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.dtypes import FLOAT_DTYPES, ITEMSIZE
from autotune.environment import settings
from autotune.errors import AutotuneError
from autotune.isa import ALIASES, FMA_ISAS, ISAS, TARGETS, executes, host_isa

__all__ = ["ISAS", "TARGETS", "Target", "cache_sizes", "check_executable", "cpu_model", "current", "current_target",
           "describe", "executable", "host", "isa", "same_isa", "same_machine", "target_name", "versions"]
_DEFAULT_CACHES = (32 << 10, 1 << 20, 32 << 20)  # L1d, L2, L3 bytes when the OS does not say


@dataclass(frozen=True)
class Target:
    """A CPU as the code generator sees it.

    isa: the widest vector ISA ("avx512f", "avx2", "avx", "sse4.2", "neon", else the machine name);
    vector_bits: the width of the vectors generated code uses; registers: vector registers;
    fma_units, fma_latency: fused multiply-add units and their latency in cycles; l1d, l2, l3:
    cache sizes in bytes (per core for L1d and L2); cores: CPUs this process may run on.
    """
    isa: str
    vector_bits: int = 128
    registers: int = 16
    fma_units: int = 2
    fma_latency: int = 4
    l1d: int = _DEFAULT_CACHES[0]
    l2: int = _DEFAULT_CACHES[1]
    l3: int = _DEFAULT_CACHES[2]
    cores: int = 1

    @classmethod
    def named(cls, isa: str, **overrides: Any) -> "Target":
        """The description of an ISA from the table (other fields: defaults, or `overrides`)."""
        if isa not in ISAS:
            raise AutotuneError(f"unknown ISA {isa!r}; known: {', '.join(ISAS)}")
        bits, regs, units, latency = ISAS[isa]
        return cls(**{"isa": isa, "vector_bits": bits, "registers": regs, "fma_units": units,
                      "fma_latency": latency, **overrides})

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` per vector register."""
        if dtype not in FLOAT_DTYPES:
            raise AutotuneError(f"dtype {dtype!r} has no vector lanes; use one of {', '.join(FLOAT_DTYPES)}")
        return max(1, self.vector_bits // 8 // ITEMSIZE[dtype])

    @property
    def fma(self) -> bool:
        """Whether the ISA has fused multiply-add instructions (SSE4.2 and AVX do not)."""
        return self.isa in FMA_ISAS

    def fits_tile(self, rows: int, vectors: int, extra: int = 1) -> bool:
        """Whether a register tile of `rows` x `vectors` accumulator vectors fits the registers,
        with the `vectors` operand vectors loaded per step and `extra` more (a broadcast)."""
        return rows * vectors + vectors + extra <= self.registers

    def to_json(self) -> dict[str, Any]:
        """The compact form a log record keeps (caches in KiB)."""
        return {"vector_bits": self.vector_bits, "registers": self.registers,
                "fma": [self.fma_units, self.fma_latency],
                "caches_kib": [self.l1d >> 10, self.l2 >> 10, self.l3 >> 10], "cores": self.cores}


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def isa() -> str:
    """The ISA of the target in force (current().isa)."""
    return current().isa


def _size(text: str) -> int:
    """'48K' -> 49152 (sysfs cache sizes)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def cache_sizes(root: str | os.PathLike[str] = "/sys/devices/system/cpu/cpu0/cache") -> tuple[int, int, int]:
    """(L1d, L2, L3) bytes from sysfs, else os.sysconf, else typical sizes."""
    found: dict[int, int] = {}
    for d in sorted(Path(root).glob("index*")):
        try:
            level = int((d / "level").read_text())
            kind = (d / "type").read_text().strip()
            size = _size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            found[level] = size
    for level, name in ((1, "SC_LEVEL1_DCACHE_SIZE"), (2, "SC_LEVEL2_CACHE_SIZE"), (3, "SC_LEVEL3_CACHE_SIZE")):
        if level not in found and name in os.sysconf_names:
            try:
                if os.sysconf(name) > 0:
                    found[level] = os.sysconf(name)
            except (OSError, ValueError):
                pass
    return found.get(1, _DEFAULT_CACHES[0]), found.get(2, _DEFAULT_CACHES[1]), found.get(3, _DEFAULT_CACHES[2])


@functools.lru_cache(maxsize=1)
def host() -> Target:
    """This machine, detected once: ISA and vector unit from LLVM's host features, caches from
    the OS, cores from the CPUs this process may run on."""
    name = host_isa()
    l1d, l2, l3 = cache_sizes()
    if name in ISAS:
        return Target.named(name, l1d=l1d, l2=l2, l3=l3, cores=_cores())
    return Target(name, l1d=l1d, l2=l2, l3=l3, cores=_cores())


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def target_name() -> str:
    """The name of the target in force (AUTOTUNE_TARGET, default "host"), checked: an unknown one
    is a one-line AutotuneError listing the names."""
    name = ALIASES.get(settings().target, settings().target)
    if name not in TARGETS:
        raise AutotuneError(f"AUTOTUNE_TARGET={name!r} is not a target; use one of {', '.join(TARGETS)} "
                            "(`autotune targets` describes them)")
    return name


@functools.lru_cache(maxsize=None)
def describe(name: str) -> Target:
    """The description of a target by name: "host" is this machine as detected; another name is
    its ISA's fixed description (typical caches), the same on every machine but for `cores`."""
    name = ALIASES.get(name, name)
    if name == "host":
        return host()
    if name not in TARGETS:
        raise AutotuneError(f"unknown target {name!r}; use one of {', '.join(TARGETS)}")
    return Target.named(TARGETS[name], cores=_cores())  # type: ignore[arg-type]


def current() -> Target:
    """The target in force: AUTOTUNE_TARGET's description, else this machine (`host()`)."""
    return describe(target_name())


def executable(name: str) -> bool:
    """Whether this machine runs code generated for the target `name` (AVX2 code runs on an
    AVX-512 machine; AVX-512 code does not run on an AVX2 one, nor NEON code on x86)."""
    return executes(host_isa(), describe(name).isa)


def check_executable() -> None:
    """Raise a one-line AutotuneError when the target in force is one this machine cannot execute
    (kernels for it can be described and printed, not compiled, checked or timed here)."""
    name = target_name()
    if not executable(name):
        runnable = ", ".join(n for n in TARGETS if executable(n))
        raise AutotuneError(f"AUTOTUNE_TARGET={name} describes {describe(name).isa} code, which this machine "
                            f"({host_isa()}) cannot run: its kernels can be shown (`autotune show`), not compiled, "
                            f"checked or timed here; use one of {runnable}")


def versions() -> dict[str, str]:
    import llvmlite
    import numba
    import numpy
    from autotune.version import __version__
    return {"autotune": __version__, "numba": numba.__version__, "llvmlite": llvmlite.__version__,
            "numpy": numpy.__version__, "python": platform.python_version()}


def current_target(threads: int) -> dict[str, Any]:
    """A JSON description of the target in force on this machine for `threads` threads (what a log
    record keeps: the CPU model, the target's ISA and description, the library versions)."""
    t = current()
    return {"cpu": cpu_model(), "isa": t.isa, "threads": threads, **t.to_json(), "versions": versions()}


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two targets are the same kind of machine (CPU model and ISA)."""
    return a.get("cpu") == b.get("cpu") and a.get("isa") == b.get("isa")


def same_isa(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two targets have the same ISA (a kernel tuned on one suits the other)."""
    return a.get("isa") == b.get("isa")
