"""Vector ISAs: their registers, which one this machine has, which ones it can execute, and the
LLVM features that make Numba generate code for one of them.

The bottom of the target description (`autotune.target`), beneath `autotune.environment` too,
which sets Numba's CPU features from it before Numba is imported.

Example::

    >>> ISAS["avx2"][:2]                                   # vector bits, vector registers
    (256, 16)
    >>> executes("avx512f", "avx2"), executes("avx2", "avx512f"), executes("avx512f", "neon")
    (True, False, False)
    >>> numba_features("avx2", "+avx2,+fma,+avx512f,+avx512bw")
    '+avx2,+fma,-avx512f,-avx512bw,-avx512f'
"""
from __future__ import annotations

import functools
import platform

# ISA -> (vector bits, vector registers, FMA units, FMA latency in cycles); AVX and SSE have no
# FMA: a multiply and an add unit, the add's latency
ISAS: dict[str, tuple[int, int, int, int]] = {
    "avx512f": (512, 32, 2, 4),
    "avx2": (256, 16, 2, 4),
    "avx": (256, 16, 1, 4),
    "sse4.2": (128, 16, 1, 4),
    "neon": (128, 32, 2, 4),
}
FMA_ISAS = frozenset({"avx512f", "avx2", "neon"})  # those with fused multiply-add instructions
# the targets AUTOTUNE_TARGET may name -> their ISA ("host": this machine's, detected)
TARGETS: dict[str, str | None] = {"host": None, "avx512": "avx512f", "avx2": "avx2", "sse4.2": "sse4.2",
                                  "neon": "neon"}
ALIASES = {"avx512f": "avx512"}  # the ISA's own name for a target


def target_isa(name: str) -> str | None:
    """The ISA of a target name (an alias counts), this machine's for "host"; None if unknown."""
    name = ALIASES.get(name, name)
    return host_isa() if name == "host" else TARGETS.get(name)


# No machine of an ISA does more than this per thread and second: its vector lanes, an FMA (2
# operations) on each of PORTS_CEILING ports at CLOCK_CEILING_HZ, times ALGORITHM_ALLOWANCE for
# operators counted by the direct algorithm but computed with fewer operations (Winograd).
CLOCK_CEILING_HZ, PORTS_CEILING, ALGORITHM_ALLOWANCE = 6.5e9, 4, 4


def speed_ceiling(isa: str | None, dtype: str, threads: int) -> float:
    """Operations per second no machine of `isa` (unknown: the widest) reaches with `threads`
    threads: a record claiming more was forged or corrupted.

    >>> speed_ceiling("avx2", "float32", 1) / 1e9
    1664.0
    """
    bits = ISAS.get(isa or "", ISAS["avx512f"])[0]
    lanes = bits // (64 if dtype == "float64" else 32)
    return lanes * 2 * PORTS_CEILING * CLOCK_CEILING_HZ * ALGORITHM_ALLOWANCE * max(1, threads)


# x86 ISAs, each a superset of those before it
X86_LEVELS = ("sse4.2", "avx", "avx2", "avx512f")


def _above_avx2(feature: str) -> bool:
    return feature.startswith(("avx512", "amx", "avx10", "evex512"))


def _above_sse(feature: str) -> bool:
    return _above_avx2(feature) or feature.startswith("avx") or feature in (
        "fma", "fma4", "f16c", "xop", "vaes", "vpclmulqdq")


# what code for an x86 ISA may not use, beyond what the host has: (features it turns off, the
# feature whose removal makes LLVM drop every feature implying it)
_TURN_OFF = {"avx2": (_above_avx2, "avx512f"), "avx": (lambda f: _above_avx2(f) or f in ("avx2", "fma"), "avx2"),
             "sse4.2": (_above_sse, "avx")}


@functools.lru_cache(maxsize=1)
def host_features() -> str:
    """LLVM's feature string of this machine ("+avx2,+fma,-avx512f,..."); "" without llvmlite."""
    try:
        import llvmlite.binding as llvm
        return str(llvm.get_host_cpu_features().flatten())
    except Exception:  # llvmlite missing or an odd host
        return ""


@functools.lru_cache(maxsize=1)
def host_isa() -> str:
    """The widest vector ISA of this machine ("avx512f", "avx2", ..., "neon"), else its machine name."""
    feats = host_features()
    for name in ("avx512f", "avx2", "avx", "sse4.2", "neon"):
        if f"+{name}" in feats.split(","):
            return name
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "neon"
    return platform.machine()


def executes(host: str, isa: str) -> bool:
    """Whether a machine of ISA `host` runs code generated for ISA `isa`."""
    if host == isa:
        return True
    return host in X86_LEVELS and isa in X86_LEVELS and X86_LEVELS.index(isa) <= X86_LEVELS.index(host)


def numba_features(isa: str, host: str) -> str:
    """LLVM features (NUMBA_CPU_FEATURES) for code of `isa` on a machine whose features are
    `host`: the host's, with everything above `isa` turned off. `isa` must be one the host executes."""
    if isa not in _TURN_OFF:
        return host
    above, root = _TURN_OFF[isa]
    feats = [f"-{f[1:]}" if f.startswith("+") and above(f[1:]) else f for f in host.split(",") if f]
    return ",".join(feats + [f"-{root}"])
