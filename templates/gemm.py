"""The BLIS-like GEMM schedule that matmul, batch_matmul and dense_bias_relu share.

`blocked` schedules a stage computing C[..., i, j] = sum_k A[..., i, k] * B[..., k, j] whose
operands `pack_panels` packed (knob names in brackets)::

    for <outer>:                        # jc in N / NC, and any loops of the caller (e.g. a batch)
      for kc in K / [kc]:
        pack B[kc block, jc block] into NR-wide panels          (compute_at kc)
        for ic in M / MC:               # MC = [mc_panels] * MR
          pack A[ic block, kc block] into MR-tall panels        (compute_at ic)   [pack_a]
          for jr, ir in panels:                                  [order]   <- register_tiles
            acc[MR, NR] = 0                                      (cache_write, on the stack)
            for kk in kc: for ii in MR (unrolled): for ji in NR (vectorized): acc += Ap * Bp
            C[tile] += acc   (clamped to the valid region: awkward shapes work)

Example::

    >>> from autotune.schedule import Schedule
    >>> from autotune.templates import gemm, matmul
    >>> shape = {"M": 64, "N": 64, "K": 64}
    >>> cfg = {"mr": 4, "nr": 16, "kc": 32, "mc_panels": 4, "order": "jr_ir", "pack_a": True}
    >>> s = Schedule(matmul.define(shape, "float32"))
    >>> mr, nr, kc, mc = gemm.tiles(cfg, shape)
    >>> gemm.pack_panels(s, cfg, mr, nr, "A", "B")
    'Bp'
    >>> gemm.blocked(s, "C", cfg, mr, nr, kc, mc, nc=64, outer=("jc",), b_panels="Bp")
    >>> s.stages["C"].order
    ['jc', 'kc', 'ic', 'jr', 'ir', 'kk', 'ii', 'ji']
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, ConfigSpace, fit
from autotune.target import Target, current

Cfg = Mapping[str, Any]


def tile_knobs(shape: Mapping[str, int], dtype: str, mr: Sequence[int] = (1, 2, 4, 6, 8, 12),
               target: Target | None = None) -> list[ChoiceKnob]:
    """The knobs of the register tile (mr x nr: nr in whole vectors of the target), the k block
    (kc) and the row block (mc_panels). `tile_prune` leaves out tiles the registers cannot hold."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    vec = (target or current()).lanes(dtype)
    return [
        ChoiceKnob("mr", fit(list(mr), M)),
        ChoiceKnob("nr", fit([vec, 2 * vec, 3 * vec, 4 * vec], N)),
        ChoiceKnob("kc", fit([64, 128, 256, 384, 512, 768, 1024], K)),
        ChoiceKnob("mc_panels", [4, 8, 16, 32, 64]),    # MC = mc_panels * MR
    ]


def tile_vectors(mr: int, nr: int, shape: Mapping[str, int], dtype: str, target: Target) -> tuple[int, int]:
    """(rows, vectors per row) of an mr x nr register tile at this shape (cut to the matrix)."""
    return min(mr, shape["M"]), -(-min(nr, shape["N"]) // target.lanes(dtype))


def tile_prune(shape: Mapping[str, int], dtype: str, target: Target | None = None) -> Callable[[Cfg], str | None]:
    """The space's prune rule: an mr x nr tile whose accumulators, the row of B vectors and a
    broadcast of A do not fit the target's vector registers would spill."""
    target = target or current()

    def prune(cfg: Cfg) -> str | None:
        rows, vecs = tile_vectors(cfg["mr"], cfg["nr"], shape, dtype, target)
        if target.fits_tile(rows, vecs):
            return None
        return (f"the {cfg['mr']}x{cfg['nr']} register tile needs {rows * vecs + vecs + 1} vector registers; "
                f"{target.isa} has {target.registers}")
    return prune


# preset register tiles as (MR, NR in vectors, kc, mc_panels), best first, measured per register file:
# 32 registers of 16 lanes (AVX-512: 6x48 / 8x48 / 4x64 ...); 16 of 8 (AVX2, Zen 3: 6x16 with the
# whole K in one block and small row blocks was within 5% of OpenBLAS at 1024^3 and 768x3072x768)
PRESET_TILES = {32: ((6, 3, 512, 16), (8, 3, 512, 8), (4, 4, 512, 16), (6, 2, 512, 16), (6, 3, 256, 32),
                     (8, 2, 384, 16), (4, 3, 512, 16), (6, 2, 256, 32), (4, 2, 512, 32), (2, 4, 512, 16)),
                16: ((6, 2, 1024, 4), (6, 2, 256, 4), (6, 2, 512, 16), (4, 3, 1024, 8), (4, 3, 512, 16),
                     (4, 2, 512, 32))}


def preset_tiles(dtype: str, target: Target | None = None, n: int = 6) -> list[dict[str, int]]:
    """The first `n` preset tiles (of the largest register file the target has, else of the
    smaller) that fit the target's registers, as mr / nr / kc / mc_panels."""
    target = target or current()
    vec = target.lanes(dtype)
    files = sorted(PRESET_TILES, reverse=True)
    regs = next((r for r in files if r <= target.registers), files[-1])
    tiles = PRESET_TILES[regs] + tuple(t for r in files if r != regs for t in PRESET_TILES[r])
    return [{"mr": mr, "nr": nv * vec, "kc": kc, "mc_panels": mcp}
            for mr, nv, kc, mcp in dict.fromkeys(tiles) if target.fits_tile(mr, nv)][:n]


def snap(cfg: Cfg, space: ConfigSpace) -> dict[str, Any]:
    """Each value of cfg moved into the space: kept if allowed, else the nearest number (else the
    knob's first value)."""
    out = {}
    for k in space.knobs:
        vals, v = k.values(), cfg[k.name]
        out[k.name] = v if v in vals else min(vals, key=lambda x: abs(x - v) if isinstance(x, int) else 0)
    return out


def tiles(cfg: Cfg, shape: Mapping[str, int]) -> tuple[int, int, int, int]:
    """(mr, nr, kc, mc) of a config, cut to the matrix: a block is never larger than needed."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    mr, nr, kc = min(cfg["mr"], M), min(cfg["nr"], N), min(cfg["kc"], K)
    mc = min(cfg["mc_panels"] * mr, -(-M // mr) * mr)
    return mr, nr, kc, mc


def panels(cfg: Cfg) -> tuple[str, str]:
    """The two register-tile loops in the order [order] gives: column panels outer or row panels outer."""
    return ("jr", "ir") if cfg["order"] == "jr_ir" else ("ir", "jr")


def pack_panels(s: Schedule, cfg: Cfg, mr: int, nr: int, a: str, b: str) -> str:
    """Pack `b` into NR-wide column panels and, with [pack_a], `a` into MR-tall row panels (named Ap).
    The matrices are the last two dimensions of each tensor. Returns the name of b's panels."""
    if cfg["pack_a"]:
        s.pack(a, s.tensors[a].ndim - 2, mr, "Ap")   # (M / MR, ..., K, MR)
    b_panels = f"{b}p"
    s.pack(b, s.tensors[b].ndim - 1, nr, b_panels)  # (N / NR, ..., K, NR)
    return b_panels


def register_tiles(s: Schedule, stage: str, cfg: Cfg, mr: int, nr: int, kc: int, j: str, i: str,
                   outer: Sequence[str]) -> None:
    """Split `j` into NR-wide and `i` into MR-tall register tiles and k into kc blocks; order the loops
    (outer..., register tiles in [order], kk, ii, ji); accumulate each tile on the stack, its rows
    unrolled and its columns vectorized."""
    s.split(stage, j, nr, "jr", "ji")
    s.split(stage, "k", kc, "kc", "kk")
    s.split(stage, i, mr, "ir", "ii")
    tile_loops = panels(cfg)
    s.reorder(stage, *outer, *tile_loops, "kk", "ii", "ji")
    s.cache_write(stage, tile_loops[1])
    s.unroll(stage, "ii")
    s.vectorize(stage, "ji")


def a_panels_at(s: Schedule, stage: str, axis: str) -> None:
    """Pack A's panels inside `axis` of `stage`, each panel's rows innermost-but-one (A read row by row)."""
    s.compute_at("Ap", stage, axis)
    s.reorder("Ap", "p_i", f"d{s.tensors['Ap'].ndim - 2}")


def blocked(s: Schedule, stage: str, cfg: Cfg, mr: int, nr: int, kc: int, mc: int, nc: int,
            outer: Sequence[str], b_panels: str) -> None:
    """The whole blocking of the module docstring: NC-wide column blocks (loop jc) and MC-tall row
    blocks (ic) around `register_tiles`, loops (outer..., kc, ic, ...) where `outer` holds jc;
    B's panels packed per kc block and A's (with [pack_a]) per ic block."""
    s.split(stage, "j", nc, "jc", "jn")
    s.split(stage, "i", mc, "ic", "im")
    register_tiles(s, stage, cfg, mr, nr, kc, "jn", "im", (*outer, "kc", "ic"))
    s.compute_at(b_panels, stage, "kc")
    if cfg["pack_a"]:
        a_panels_at(s, stage, "ic")
