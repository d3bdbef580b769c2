"""conv2d's Winograd tiles "fMxMRxNR": a 3x3, stride-1, dilation-1 convolution as Winograd
F(m x m, 3 x 3) (Lavin & Gray), NCHW, in autotune's own IR.

The space offers m = 4 (`tiles`; m = 2 is defined too). The output is computed in m x m pixel
tiles (tile index p = th * TW + tw per image; alpha = m + 2 input pixels a side), a block of
ROWS_PER_BLOCK output rows at once; the threads split the blocks::

    U[e, f, c, k]       = (G W[k, c] G^T)[e, f]           the prologue, once per call
    Xb[C/vb, N, Hq, Wq, vb] = X zero padded, blocked by vb = NR channels  (per block)
    T1[n, p, e, j, c]   = sum_i Bt[e, i] Xb[.., th*m + i, tw*m + j, ..]      (Bt d: rows)
    V[e, f, n, p, c]    = sum_j Bt[f, j] T1[n, p, e, j, c]                   (Bt d B)
    M[e, f, n, p, k]    = sum_c V[e, f, n, p, c] U[e, f, c, k]   alpha^2 GEMMs: MR tiles x NR
                                                                  channels in registers
    O1[n, p, a, f, k]   = sum_e At[a, e] M[e, f, n, p, k]                    (At M: rows)
    Yt[n, p, a, b, k]   = sum_f At[b, f] O1[n, p, a, f, k]                   (At M A)
    Y[n, k, oh, ow]     = Yt[n, (oh // m) * TW + ow // m, oh % m, ow % m, k]

The input and weight transforms are reductions over the constant matrices Bt and G (prologue
stages): few statements, so the kernel compiles in seconds (the input transform as select chains
over the unrolled rows, only the non-zero taps, compiled in 17-20 s). The output transform is such
a select chain: each unrolled row one short vector expression. Kernels compile with NoAliasKernelPipeline
(`CodegenOptions.noalias`): without it LLVM guards every vectorized loop against overlapping
arrays and keeps the input transform's sums in memory; the kernel ran 3.2x slower (3.78 against
1.17 ms at 1x64x56x56 -> 64, Zen 3, 2 threads) and compiled 5-20% slower.

F(4x4, 3x3) does 4x fewer multiplications than the direct convolution; its error is about 20x the
direct kernel's (5.7e-6 of the output's range at 1x64x56x56 -> 64, direct 3.3e-7), well inside
the float32 check (2e-3). F(2x2, 3x3): 2.25x fewer, error as the direct kernel's.
"""
from __future__ import annotations

from fractions import Fraction as Fr
from typing import Any, Callable, Mapping

import numpy as np

from autotune.ir import te
from autotune.schedule import Schedule
from autotune.target import Target
from autotune.codegen.options import CodegenOptions

# (Bt, G, At) per m, exact
MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
         [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
ROWS_PER_BLOCK = 8  # output rows per block of tile rows (F4: 2 tile rows; on Zen 3, 2 beat 1 and 4)


def applies(shape: Mapping[str, int]) -> bool:
    """Whether Winograd tiles compute this convolution: a 3x3 window, stride 1, dilation 1."""
    return (shape["R"], shape["S"], shape["stride"], shape["dilation"]) == (3, 3, 1, 1)


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Bt, G, At) of F(m x m, 3 x 3) as float64 arrays."""
    return tuple(np.array([[float(x) for x in r] for r in mat]) for mat in MATRICES[m])  # type: ignore[return-value]


def geometry(shape: Mapping[str, int], m: int) -> dict[str, int]:
    """Output size, tiles per column and row, the padded input's size and alpha."""
    H, W, pad = shape["H"], shape["W"], shape["pad"]
    OH, OW = H + 2 * pad - 2, W + 2 * pad - 2
    TH, TW = -(-OH // m), -(-OW // m)
    return {"OH": OH, "OW": OW, "TH": TH, "TW": TW, "Hq": TH * m + 2, "Wq": TW * m + 2, "A": m + 2, "pad": pad}


def tiles(shape: Mapping[str, int], dtype: str, target: Target) -> list[str]:
    """Tiles "fMxMRxNR": F(4x4) with MR = 4 or 6 tiles x NR = two vectors of output channels per
    GEMM register tile, those that fit the target's registers (accumulators, the NR/lanes weight
    vectors and a broadcast). F(2x2) ran 1.2-1.3x the direct kernel where F(4x4) ran 1.5-1.7x
    (Zen 3), and each offered tile costs compile time: it is not offered."""
    if not applies(shape):
        return []
    vec = target.lanes(dtype)
    out = []
    for m, mr in ((4, 4), (4, 6)):
        nvec = -(-min(2 * vec, shape["K"]) // vec)
        if target.fits_tile(mr, nvec):
            out.append(f"f{m}x{mr}x{2 * vec}")
    return out


def parse_tile(tile: str) -> tuple[int, int, int]:
    """(m, mr, nr) of a tile "fMxMRxNR"."""
    m, mr, nr = (int(x) for x in tile[1:].split("x"))
    return m, mr, nr


def _rows(mat: np.ndarray, row: te.Expr, term: Callable[[int], te.Expr], dtype: str) -> te.Expr:
    """sum_i mat[row, i] * term(i) as a select chain over the row index: only the non-zero entries
    of each row appear, so a row unrolled is a short expression."""
    out: te.Expr | None = None
    for r in reversed(range(mat.shape[0])):
        e: te.Expr | None = None
        for i, v in enumerate(mat[r]):
            if v == 0:
                continue
            t = term(i) if v == 1 else (-term(i) if v == -1 else te.const(float(v), dtype) * term(i))
            e = t if e is None else e + t
        assert e is not None
        out = e if out is None else te.select(te.equal(row, r), e, out)
    assert out is not None
    return out


def _const_matrix(mat: np.ndarray, dtype: str, name: str) -> te.Tensor:
    """A constant matrix as a stage (computed at the root, in the prologue)."""
    def elem(r: te.Expr, i: te.Expr) -> te.Expr:
        out: te.Expr = te.const(0.0, dtype)
        for (a, b), v in np.ndenumerate(mat):
            if v != 0:
                out = te.select(te.all_of(te.equal(r, a), te.equal(i, b)), te.const(float(v), dtype), out)
        return out
    return te.compute(mat.shape, elem, name=name)


def define(shape: Mapping[str, int], dtype: str, m: int) -> te.Tensor:
    """The Winograd pipeline's output Y (N, K, OH, OW) from X (N, C, H, W) and W (K, C, 3, 3):
    conv2d's definition computed another way (the same inputs and output)."""
    N, C, H, W, K = (shape[d] for d in ("N", "C", "H", "W", "K"))
    g = geometry(shape, m)
    TW, Hq, Wq, pad, NT = g["TW"], g["Hq"], g["Wq"], g["pad"], g["TH"] * g["TW"]
    Bt, G, At = matrices(m)
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((K, C, 3, 3), dtype, name="W")
    Gc = _const_matrix(G, dtype, "Gc")
    gr, gs = te.reduce_axis(3, name="gr"), te.reduce_axis(3, name="gs")
    GW = te.compute((m + 2, C, 3, K), lambda e, c, s, k: te.sum(Gc[e, gr] * Wt[k, c, gr, s], axis=gr), name="GW")
    U = te.compute((m + 2, m + 2, C, K), lambda e, f, c, k: te.sum(Gc[f, gs] * GW[e, c, gs, k], axis=gs), name="U")
    zero = te.const(0, dtype)
    Xp = te.compute((N, C, Hq, Wq), lambda n, c, hp, wp: te.select(
        te.all_of(hp >= pad, hp < H + pad, wp >= pad, wp < W + pad), X[n, c, hp - pad, wp - pad], zero), name="Xp")
    Bc = _const_matrix(Bt, dtype, "Bc")
    ti, vj = te.reduce_axis(m + 2, name="ti"), te.reduce_axis(m + 2, name="vj")
    T1 = te.compute((N, NT, m + 2, m + 2, C), lambda n, p, e, j, c: te.sum(
        Bc[e, ti] * Xp[n, c, (p // TW) * m + ti, (p % TW) * m + j], axis=ti), name="T1")
    V = te.compute((m + 2, m + 2, N, NT, C), lambda e, f, n, p, c: te.sum(Bc[f, vj] * T1[n, p, e, vj, c], axis=vj),
                   name="V")
    rc = te.reduce_axis(C, name="rc")
    M = te.compute((m + 2, m + 2, N, NT, K), lambda e, f, n, p, k: te.sum(V[e, f, n, p, rc] * U[e, f, rc, k], axis=rc),
                   name="M")
    O1 = te.compute((N, NT, m, m + 2, K), lambda n, p, a, f, k: _rows(At, a, lambda e: M[e, f, n, p, k], dtype),
                    name="O1")
    Yt = te.compute((N, NT, m, m, K), lambda n, p, a, b, k: _rows(At, b, lambda f: O1[n, p, a, f, k], dtype),
                    name="Yt")
    return te.compute((N, K, g["OH"], g["OW"]),
                      lambda n, k, oh, ow: Yt[n, (oh // m) * TW + ow // m, oh % m, ow % m, k], name="Y")


def _rows_by_vectors(s: Schedule, stage: str, nr: int, row: str, col: str) -> None:
    """An output-transform stage: k in vectors of NR channels innermost, the select's row and the
    other row axis outside it, both unrolled (each copy one short expression, its select folded)."""
    s.split(stage, "k", nr, "ko", "ki")
    s.reorder(stage, "n", "p", "ko", row, col, "ki")
    s.unroll(stage, row)
    s.unroll(stage, col)
    s.vectorize(stage, "ki")


def schedule(s: Schedule, cfg: Mapping[str, Any], shape: Mapping[str, int], threads: int) -> CodegenOptions:
    """Schedule `define`'s stages for a tile "fMxMRxNR". conv2d's other knobs do not apply (their
    configs are one kernel, measured once): each Winograd candidate compiles in about 4 s, so the
    space offers two."""
    m, mr, nr = parse_tile(cfg["tile"])
    C, K = shape["C"], shape["K"]
    g = geometry(shape, m)
    TH, TW = g["TH"], g["TW"]
    R = min(max(1, ROWS_PER_BLOCK // m), TH)
    nr = min(nr, K)
    vb = min(nr, C)  # the input transform's channel block: two vectors, as NR (16, 32 and 64 ran within noise)
    # Y: blocks of R tile rows (m*R output rows), the threads' chunks contiguous
    nblk = -(-TH // R)
    per = -(-nblk // threads) if threads > 1 else nblk
    s.split("Y", "oh", m * R, "ob", "oi")
    s.split("Y", "ob", per, "ot", "om")
    s.split("Y", "oi", m, "orow", "oa")
    s.split("Y", "ow", m, "otw", "ob2")
    s.reorder("Y", "ot", "n", "om", "orow", "oa", "otw", "ob2", "k")  # Yt read along k: L1-resident
    if threads > 1 and -(-nblk // per) > 1:
        s.parallel("Y", "ot")
    # output transform per block (Yt) and per tile (O1): the select's row outer, unrolled and folded
    s.compute_at("Yt", "Y", "om")
    _rows_by_vectors(s, "Yt", nr, "b", "a")
    s.compute_at("O1", "Yt", "p")
    _rows_by_vectors(s, "O1", nr, "a", "f")
    # the alpha^2 GEMMs of the block: MR tiles x NR channels in registers
    s.compute_at("M", "Yt", "n")
    s.split("M", "p", mr, "po", "pi")
    s.split("M", "k", nr, "ko", "ki")
    s.reorder("M", "n", "e", "f", "ko", "po", "rc", "pi", "ki")  # channel blocks outer: U's panel stays in L1
    s.cache_write("M", "po")
    s.unroll("M", "pi")
    s.vectorize("M", "ki")
    # input transform of the block: V (columns) from T1 (rows) from the blocked padded input
    s.compute_at("V", "M", "n")
    s.split("V", "c", vb, "vco", "vci")
    s.reorder("V", "n", "p", "vco", "e", "f", "vj", "vci")
    s.vectorize("V", "vci")
    s.compute_at("T1", "V", "n")
    s.split("T1", "p", TW, "tr", "tc")
    s.split("T1", "c", vb, "tco", "tci")
    s.reorder("T1", "n", "tr", "tc", "tco", "e", "j", "ti", "tci")
    s.vectorize("T1", "tci")
    # U = G W G^T in the prologue, vectorized along k (U's contiguous axis), G's rows unrolled
    s.reorder("GW", "e", "c", "s", "gr", "k")
    s.vectorize("GW", "k")
    s.reorder("U", "e", "f", "c", "gs", "k")
    s.vectorize("U", "k")
    s.pack("Xp", 1, vb, "Xb")
    s.compute_inline("Xp")
    s.compute_at("Xb", "T1", "n")
    s.vectorize("Xb", "p_i")
    return CodegenOptions(noalias=True)
