"""Y[N,K,OH,OW] = conv2d(X[N,C,H,W], W[K,C,R,S]) with stride, zero padding and dilation (NCHW).

NaN/Inf: a Winograd config spreads one NaN or Inf input over whole output tiles (its transforms
add and subtract inputs); a tuned op answers such inputs with the NumPy reference instead
(check_finite, the table in templates/__init__.py).

A direct convolution blocked like a GEMM micro-kernel: the weights are repacked into blocks of
kb output channels (s.pack on W along K: Wp[K/kb, C, R, S, kb], zero padded), and each tile of
ohb x owb output pixels times kb channels accumulates in a stack tile acc[ohb, owb, kb] (pixel
loops unrolled, the channel loop vectorized innermost, so each step is one broadcast of an
input pixel times kb/lanes weight vectors). Knob names in brackets::

    Xp = zero-padded X     (a root stage computed once, per row block at oho, per thread, or
                            inlined), or Xb = the padded X blocked by cb channels,
                            Xb[C/cb, N, Hp, Wp, cb], made in one pass ("blocked_*")  [pad_at]
    for the loop chosen by [parallel] (runs over threads), then n, then ko and oho in [outer] order:
      for ko in K / kb:  for oho in OH / ohb:
        [for co in C / cb:]                           # reduction block outside the tile    [cb]
        for owo in OW / owb:
          acc[ohb, owb, kb] = 0
          for c, r, s  (or r, s, c)                                                    [red_order]
            for ohi (unrolled): for owi (unrolled): for ki (vectorized):
              acc[ohi, owi, ki] += Xp[n, c, oh*st + r*dil, ow*st + s*dil] * Wp[ko, c, r, s, ki]
                                   (or Xb[c // cb, n, ..., c % cb]: contiguous along c)
          Y[tile] (+)= acc     (clamped to the valid region: awkward shapes work)

[tile] is "KBxOHBxOWB"; only tiles whose accumulators (plus the weight vectors and a broadcast)
fit the target's vector registers are offered. With stride 1, tiles "wKBxPB" use a second definition
(define_flat): the padded image flattened row by row, so a tile is KB output channels (unrolled,
each weight broadcast) by PB consecutive pixels (vectorized) and every tap reads one contiguous
run of the input::

    Xf[n, c, q] = padded X, rows of Wp = OW + dil*(S-1) laid end to end   [pad_at: root / inline /
                                                                           else per thread]
    per thread (its rows): for po, ko (or ko, po) [outer], [co]:
      acc[kb, pb] = sum over c, r, s of Xf[n, c, p + r*dil*Wp + s*dil] * Wp[ko, c, r, s, ki]
    Y[n, k, oh, ow] = Yf[n, k, oh*Wp + ow]          (the dil*(S-1) extra columns are dropped)

A 3x3 window with stride 1 and dilation 1 also has Winograd tiles "fMxMRxNR" (define and schedule
in templates/conv2d_winograd.py): F(M x M, 3 x 3), its alpha^2 GEMMs in MR x NR register tiles,
the other knobs do not apply; the weights are transformed in the kernel's prologue, so these
kernels take the same X and W.
Shape "1x64x56x56x64x3x3x1x1" is N=1 C=64 H=W=56 K=64 R=S=3 stride 1 pad 1 (dilation 1).
"""
from __future__ import annotations

import numpy as np

from autotune.errors import ShapeError
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace
from autotune.codegen.options import CodegenOptions
from autotune.templates.base import Shape, Template
from autotune.target import Target, current
from autotune.templates import conv2d_winograd as winograd
from autotune.templates import gemm
from autotune.templates.gemm import fit as _fit


def out_size(n: int, r: int, stride: int, pad: int, dil: int) -> int:
    return (n + 2 * pad - dil * (r - 1) - 1) // stride + 1


def conv_geometry(shape: Shape, name: str) -> tuple[int, int, int, int, int, int, int]:
    """(OH, OW, Hp, Wp, stride, pad, dil): output size and the padded-input extent actually read."""
    st, pad, dil = shape["stride"], shape["pad"], shape["dilation"]
    if st < 1 or dil < 1:
        raise ShapeError(f"{name}: stride and dilation must be at least 1, got stride={st} dilation={dil}")
    H, W, R, S = shape["H"], shape["W"], shape["R"], shape["S"]
    OH, OW = out_size(H, R, st, pad, dil), out_size(W, S, st, pad, dil)
    if OH < 1 or OW < 1:
        raise ShapeError(f"{name}: the {R}x{S} window (dilation {dil}) does not fit the {H}x{W} input "
                         f"padded by {pad}; the output would be {OH}x{OW}")
    Hp, Wp = (OH - 1) * st + dil * (R - 1) + 1, (OW - 1) * st + dil * (S - 1) + 1
    return OH, OW, Hp, Wp, st, pad, dil


def padded_input(X: te.Tensor, Hp: int, Wp: int, pad: int, dtype: str, name: str = "Xp") -> te.Tensor:
    """Xp[n, c, hp, wp] = X[n, c, hp - pad, wp - pad] inside the image, 0 outside."""
    N, C, H, W = X.shape
    if pad == 0 and Hp <= H and Wp <= W:
        return X
    zero = te.const(0, dtype)
    return te.compute(
        (N, C, Hp, Wp),
        lambda n, c, hp, wp: te.select(te.all_of(hp >= pad, hp < H + pad, wp >= pad, wp < W + pad),
                                       X[n, c, hp - pad, wp - pad], zero),
        name=name)


def define(shape: Shape, dtype: str) -> te.Tensor:
    N, C, H, W, K, R, S = (shape[d] for d in ("N", "C", "H", "W", "K", "R", "S"))
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "conv2d")
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((K, C, R, S), dtype, name="W")
    Xp = padded_input(X, Hp, Wp, pad, dtype)
    rc = te.reduce_axis(C, name="rc")
    rr = te.reduce_axis(R, name="rr")
    rs = te.reduce_axis(S, name="rs")
    return te.compute(
        (N, K, OH, OW),
        lambda n, k, oh, ow: te.sum(Xp[n, rc, oh * st + rr * dil, ow * st + rs * dil] * Wt[k, rc, rr, rs],
                                    axis=(rc, rr, rs)),
        name="Y")


def define_bias_relu(shape: Shape, dtype: str) -> te.Tensor:
    """relu(conv2d(X, W) + b[k]) as one definition: a layer with its per-channel bias and relu
    (the template itself tunes the convolution alone; this is for tuning from a definition)."""
    Y = define(shape, dtype)
    b = te.placeholder((shape["K"],), dtype, name="b")
    return te.compute(Y.shape, lambda n, k, oh, ow: te.max(Y[n, k, oh, ow] + b[k], te.const(0, dtype)), name="out")


def define_flat(shape: Shape, dtype: str) -> te.Tensor:
    """The same convolution over the padded image flattened row by row (stride 1 only).

    Xf[n, c, q] is the zero-padded input with rows of Wp = OW + dil*(S-1) columns laid end to end
    (plus zeros of slack), so every kernel tap reads a contiguous run of it: output pixel
    p = oh*Wp + ow of Yf needs Xf[n, c, p + r*dil*Wp + s*dil]. Yf computes all Wp columns of each row
    (the last dil*(S-1) are garbage) and Y copies out the valid ones. A tile of consecutive pixels
    is then one vector load per tap, with each weight broadcast: vectorized along the output width
    instead of along output channels.
    """
    N, C, H, W, K, R, S = (shape[d] for d in ("N", "C", "H", "W", "K", "R", "S"))
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "conv2d")
    if st != 1:
        raise ShapeError(f"conv2d: the flattened-width layout needs stride 1, got stride {st}")
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((K, C, R, S), dtype, name="W")
    zero = te.const(0, dtype)
    vec = current().lanes(dtype)
    Xf = te.compute(  # slack for whole tiles of up to 8 vectors of pixels past the last row
        (N, C, Hp * Wp + dil * (S - 1) + 8 * vec),
        lambda n, c, q: te.select(te.all_of(q // Wp >= pad, q // Wp < H + pad, q % Wp >= pad, q % Wp < W + pad),
                                  X[n, c, q // Wp - pad, q % Wp - pad], zero),
        name="Xf")
    rc = te.reduce_axis(C, name="rc")
    rr = te.reduce_axis(R, name="rr")
    rs = te.reduce_axis(S, name="rs")
    Yf = te.compute(
        (N, K, OH * Wp),
        lambda n, k, p: te.sum(Xf[n, rc, p + rr * (dil * Wp) + rs * dil] * Wt[k, rc, rr, rs], axis=(rc, rr, rs)),
        name="Yf")
    return te.compute((N, K, OH, OW), lambda n, k, oh, ow: Yf[n, k, oh * Wp + ow], name="Y")


def is_pointwise(shape: Shape) -> bool:
    """A 1x1 window, stride 1, no padding: the convolution is a GEMM over channels per image."""
    return shape["R"] == 1 and shape["S"] == 1 and shape["stride"] == 1 and shape["pad"] == 0


def define_gemm(shape: Shape, dtype: str) -> te.Tensor:
    """A pointwise convolution as a GEMM per image: C[n, i, j] = sum_k A[i, k] * B[n, k, j] with
    A = W viewed as (K, C) and B = X viewed as (N, C, H*W) (both inlined into their packed panels),
    then Y[n, k, oh, ow] = C[n, k, oh*W + ow]. The names (A, B, C; i, j, k) are templates.gemm's."""
    if not is_pointwise(shape):
        raise ShapeError("conv2d: the GEMM layout needs a 1x1 window, stride 1 and no padding, "
                         f"got {shape['R']}x{shape['S']} stride {shape['stride']} pad {shape['pad']}")
    N, C, H, W, K = (shape[d] for d in ("N", "C", "H", "W", "K"))
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((K, C, 1, 1), dtype, name="W")
    A = te.compute((K, C), lambda i, c: Wt[i, c, 0, 0], name="A")
    B = te.compute((N, C, H * W), lambda n, c, q: X[n, c, q // W, q % W], name="B")
    k = te.reduce_axis(C, name="k")
    Cm = te.compute((N, K, H * W), lambda n, i, j: te.sum(B[n, k, j] * A[i, k], axis=k), name="C")  # X first: the inputs keep their order
    return te.compute((N, K, H, W), lambda n, kk, oh, ow: Cm[n, kk, oh * W + ow], name="Y")


def define_pointwise(shape: Shape, dtype: str) -> te.Tensor:
    """A pointwise convolution on flattened images: Y[n, k, p] = sum over c of X[n, c, p] * W[k, c]
    with X viewed as (N, C, H*W) and Y as (N, K, H*W), the same elements in the same order as NCHW,
    so nothing is copied, padded or gathered (the kernel is handed reshaped views). The window's
    1x1 reduction axes stay, so the schedule reads like define_flat's."""
    if not is_pointwise(shape):
        raise ShapeError("conv2d: the flat pointwise layout needs a 1x1 window, stride 1 and no padding, "
                         f"got {shape['R']}x{shape['S']} stride {shape['stride']} pad {shape['pad']}")
    N, C, H, W, K = (shape[d] for d in ("N", "C", "H", "W", "K"))
    X = te.placeholder((N, C, H * W), dtype, name="X")
    Wt = te.placeholder((K, C, 1, 1), dtype, name="W")
    rc = te.reduce_axis(C, name="rc")
    rr = te.reduce_axis(1, name="rr")
    rs = te.reduce_axis(1, name="rs")
    return te.compute((N, K, H * W), lambda n, k, p: te.sum(X[n, rc, p] * Wt[k, rc, rr, rs], axis=(rc, rr, rs)),
                      name="Y")


def define_for(shape: Shape, dtype: str, cfg: Config) -> te.Tensor:
    """define_gemm for the GEMM tiles ("g..."); for the flattened-width tiles ("w..."),
    define_pointwise when the window is 1x1 without padding or stride, else define_flat; the
    Winograd pipeline for "f..." tiles; else define."""
    if cfg["tile"].startswith("f"):
        return winograd.define(shape, dtype, winograd.parse_tile(cfg["tile"])[0])
    if cfg["tile"].startswith("g"):
        return define_gemm(shape, dtype)
    if cfg["tile"].startswith("w"):
        return define_pointwise(shape, dtype) if is_pointwise(shape) else define_flat(shape, dtype)
    return define(shape, dtype)


def tiles(shape: Shape, dtype: str, target: Target | None = None) -> list[str]:
    """Register tiles "KBxOHBxOWB" (output channels x rows x columns) that fit the target's vector
    registers (larger ones spill), then the flattened-width tiles "wKBxPB" (stride 1), then the
    Winograd tiles "fMxMRxNR" (3x3, stride 1, dilation 1)."""
    target = target or current()
    K = shape["K"]
    OH, OW = conv_geometry(shape, "conv2d")[:2]
    vec = target.lanes(dtype)
    ows = _fit(sorted({4, 8, 16} | {d for d in range(3, 29) if OW % d == 0}), OW)
    out = []
    for kb in _fit([vec, 2 * vec, 3 * vec, 4 * vec], K):
        nvec = -(-min(kb, K) // vec)
        for ohb in _fit([1, 2, 4], OH):
            for owb in ows:
                # accumulators + the kb/vec weight vectors + one broadcast pixel must fit
                if target.fits_tile(min(ohb, OH) * min(owb, OW), nvec):
                    out.append(f"{kb}x{ohb}x{owb}")
    if not out:  # even the smallest tile spills (a tiny register file): offer just it
        out.append(f"{_fit([vec], K)[0]}x1x{min(ows)}")
    if is_pointwise(shape):  # GEMM register tiles "gMRxNR": MR output channels x NR pixels
        for mr in _fit([4, 6, 8], K):
            for nr in _fit([2 * vec, 3 * vec, 4 * vec], OH * OW):
                if target.fits_tile(min(mr, K), -(-min(nr, OH * OW) // vec)):
                    out.append(f"g{mr}x{nr}")
    if shape["stride"] == 1:  # flattened-width tiles "wKBxPB": channels x consecutive pixels of Yf
        Wp = conv_geometry(shape, "conv2d")[3]
        for kb in _fit([4, 6, 8, 16], K):
            for pb in _fit([vec, 2 * vec, 3 * vec, 4 * vec, 6 * vec, 7 * vec], OH * Wp):
                if min(kb, K) * -(-pb // vec) <= target.registers - 4:  # + a pixel vector and weights
                    out.append(f"w{kb}x{pb}")
    return out + winograd.tiles(shape, dtype, target)


def space(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> ConfigSpace:
    N, C, K = shape["N"], shape["C"], shape["K"]
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "conv2d")
    vec = (target or current()).lanes(dtype)
    has_pad = Hp > shape["H"] or Wp > shape["W"] or pad > 0
    par = ["none"]
    if threads > 1:
        par = [a for a, e in (("n", N), ("k", -(-K // vec)), ("oh", OH)) if e > 1] or ["none"]
    return ConfigSpace([
        ChoiceKnob("tile", tiles(shape, dtype, target)),              # register tile: channels x rows x columns
        ChoiceKnob("cb", _fit([16, 32, 64, 128, 256], C)),    # input channels per reduction block
        ChoiceKnob("red_order", ["crs", "rsc"]),              # reduction loop order inside the tile
        ChoiceKnob("outer", ["oh_k", "k_oh"]),                # order of the row-block and channel-block loops
        ChoiceKnob("pad_at", input_placements(has_pad)),      # layout and place of the (padded) input
        ChoiceKnob("parallel", par),                          # which outer loop runs over threads
    ])


def input_placements(has_pad: bool) -> list[str]:
    """[pad_at] values. Xp (NCHW, zero padded) at root / rows / thread, or inline (read X directly);
    "blocked_*": instead one pass makes the channel-blocked padded copy Xb[C/cb, N, Hp, Wp, cb], so
    the broadcast input of each reduction step is contiguous along the channel loop (the pointwise
    "w" tiles: pixel panels, see schedule_pointwise)."""
    blocked = ["blocked_root", "blocked_rows", "blocked_thread"]
    return (["root", "rows", "inline", "thread"] if has_pad else ["none"]) + blocked


def schedule(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    if cfg["tile"].startswith("f"):
        return winograd.schedule(s, cfg, shape, threads)
    if cfg["tile"].startswith("g"):
        return schedule_gemm(s, cfg, shape, threads)
    if cfg["tile"].startswith("w"):
        if is_pointwise(shape):
            return schedule_pointwise(s, cfg, shape, threads)
        return schedule_flat(s, cfg, shape, threads)
    N, C, K = shape["N"], shape["C"], shape["K"]
    OH, OW, Hp, Wp, st, pad, dil = conv_geometry(shape, "conv2d")
    kb, ohb, owb = (int(x) for x in cfg["tile"].split("x"))
    kb, ohb, owb, cb = min(kb, K), min(ohb, OH), min(owb, OW), min(cfg["cb"], C)
    par = cfg["parallel"] if threads > 1 else "none"
    s.pack("W", 0, kb, "Wp")                   # Wp[K/kb, C, R, S, kb]
    if cfg["pad_at"].startswith("blocked_"):
        xin = "Xp" if "Xp" in s.stages else "X"
        s.pack(xin, 1, cb, "Xb")               # Xb[C/cb, N, Hp, Wp, cb]: padding and layout in one pass
        if xin == "Xp":
            s.compute_inline("Xp")
    s.split("Y", "k", kb, "ko", "ki")
    s.split("Y", "oh", ohb, "oho", "ohi")
    s.split("Y", "ow", owb, "owo", "owi")
    outer_red, red = reduction_loops(s, "Y", cfg, cb, C)
    oh_loop = "oho"
    if par == "oh" and cfg["pad_at"] in ("thread", "blocked_thread"):
        # one contiguous chunk of row blocks per thread, so each thread pads just its rows, once
        n_oho = -(-OH // ohb)
        s.split("Y", "oho", -(-n_oho // threads), "oht", "ohm")
        oh_loop = "ohm"
    outer = ["ko", oh_loop] if cfg["outer"] == "k_oh" else [oh_loop, "ko"]
    outer = ["n"] + outer
    if par != "none":
        p = {"n": "n", "k": "ko", "oh": "oht" if oh_loop == "ohm" else "oho"}[par]
        outer = [p] + [a for a in outer if a != p]
    s.reorder("Y", *outer, *outer_red, "owo", *red, "ohi", "owi", "ki")
    s.cache_write("Y", "owo")
    s.unroll("Y", "ohi")
    s.unroll("Y", "owi")
    s.vectorize("Y", "ki")
    place_padding_and_threads(s, cfg, par, outer[0], oh_loop)
    return CodegenOptions()


def schedule_flat(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    """Schedule define_flat: Y (the copy of the valid columns) runs over threads, each thread
    computing the rows of Yf (and the stretch of Xf) its rows need; Yf in tiles of kb channels x pb
    pixels accumulated in registers (channels unrolled, pixels vectorized), the weights packed
    in blocks of kb channels. [outer] orders the pixel and channel blocks; [pad_at] "root" or
    "inline" places Xf there, other values per thread (or per image)."""
    N, C, K = shape["N"], shape["C"], shape["K"]
    OH, _, _, Wp = conv_geometry(shape, "conv2d")[:4]
    kb, pb = (int(x) for x in cfg["tile"][1:].split("x"))
    kb, cb = min(kb, K), min(cfg["cb"], C)
    pb = min(pb, OH * Wp)
    par = cfg["parallel"] if threads > 1 else "none"
    s.pack("W", 0, kb, "Wp")                   # Wp[K/kb, C, R, S, kb]
    # Y: the threads split output rows (or images, or channel blocks); Yf is computed per thread
    at = "n"
    if par == "oh":
        s.split("Y", "oh", -(-OH // threads), "oht", "ohm")
        s.reorder("Y", "oht", "n", "k", "ohm", "ow")
        at = "oht"
    elif par == "k":
        s.split("Y", "k", -(-K // (kb * threads)) * kb, "kt", "km")
        s.reorder("Y", "kt", "n", "km", "oh", "ow")
        at = "kt"
    s.vectorize("Y", "ow")
    s.compute_at("Yf", "Y", at)
    if par != "none":
        s.parallel("Y", at)
    pixel_tiles(s, "Yf", cfg, kb, pb, cb, C, "k", "p", ["n"])
    where = cfg["pad_at"].removeprefix("blocked_")
    if where == "inline":
        s.compute_inline("Xf")
    elif where != "root":
        s.compute_at("Xf", "Yf", "n")
    if where != "inline":
        s.split("Xf", "q", Wp, "qh", "qw")     # rows of the padded image: q // Wp and q % Wp simplify
    return CodegenOptions()


def pixel_tiles(s: Schedule, stage: str, cfg: Config, kb: int, pb: int, cb: int, C: int,
                k_axis: str, p_axis: str, outer: list[str]) -> None:
    """The register tiling of the flattened-image stages (define_flat's Yf, define_pointwise's Y):
    kb channels ("ki", unrolled) x pb consecutive pixels ("pi", vectorized) accumulated on the
    stack over the reduction (channel blocks of cb outside the tile, [red_order] inside), the
    pixel and channel block loops in [outer] order inside `outer`."""
    s.split(stage, k_axis, kb, "ko", "ki")
    s.split(stage, p_axis, pb, "po", "pi")
    outer_red, red = reduction_loops(s, stage, cfg, cb, C)
    blocks = ["po", "ko"] if cfg["outer"] == "oh_k" else ["ko", "po"]
    s.reorder(stage, *outer, blocks[0], *outer_red, blocks[1], *red, "ki", "pi")
    s.cache_write(stage, blocks[1])
    s.unroll(stage, "ki")
    s.vectorize(stage, "pi")


def schedule_pointwise(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    """Schedule define_pointwise like define_flat's Yf, straight into the output: tiles of kb
    channels x pb consecutive pixels accumulated in registers (channels unrolled, pixels
    vectorized), each weight broadcast, the weights packed in blocks of kb channels. The threads
    split the pixels in whole tiles ([parallel] "oh"), the channel blocks ("k") or the images ("n").
    [pad_at] "blocked_*" reads the image through panels Xq[P/pb, N, C, pb] (a tile's pixels
    contiguous per channel: 56x56 images put the channels of a tile 12,544 bytes apart, in 16 of
    L1's 64 sets), copied per pixel tile ("rows"), per thread or once ("root")."""
    C, K = shape["C"], shape["K"]
    P = shape["H"] * shape["W"]
    kb, pb = (int(x) for x in cfg["tile"][1:].split("x"))
    kb, pb, cb = min(kb, K), min(pb, P), min(cfg["cb"], C)
    par = cfg["parallel"] if threads > 1 else "none"
    s.pack("W", 0, kb, "Wp")                   # Wp[K/kb, C, 1, 1, kb]
    k_axis, p_axis, outer = "k", "p", ["n"]
    if par == "oh":
        s.split("Y", "p", -(-P // (threads * pb)) * pb, "pt", "pm")
        p_axis, outer = "pm", ["pt", "n"]
    elif par == "k":
        s.split("Y", "k", -(-K // (kb * threads)) * kb, "kt", "km")
        k_axis, outer = "km", ["kt", "n"]
    if cfg["pad_at"].startswith("blocked_"):
        s.pack("X", 2, pb, "Xq")               # Xq[P/pb, N, C, pb]: a tile's pixels contiguous per channel
    pixel_tiles(s, "Y", cfg, kb, pb, cb, C, k_axis, p_axis, outer)
    at = {"blocked_rows": "po", "blocked_thread": outer[0] if par != "none" else None}.get(cfg["pad_at"])
    if at is not None:
        s.compute_at("Xq", "Y", at)
    if par != "none":
        s.parallel("Y", outer[0])
    return CodegenOptions()


def schedule_gemm(s: Schedule, cfg: Config, shape: Shape, threads: int) -> CodegenOptions:
    """Schedule define_gemm with templates.gemm's blocking: Y (the copy into NCHW) runs over
    threads in chunks of whole MR-row panels of output channels ([parallel] "k" or "oh"; "n": per
    image), each computing its rows of C with an MR x NR register tile, k blocks of [cb]
    channels, B's panels packed per k block and A's per row block; [outer] orders the register
    tiles (pixel panels outer for "oh_k")."""
    N, C, K = shape["N"], shape["C"], shape["K"]
    OH, OW = conv_geometry(shape, "conv2d")[:2]
    mr, nr = (int(x) for x in cfg["tile"][1:].split("x"))
    g = {"M": K, "N": OH * OW, "K": C}
    gcfg = {"mr": mr, "nr": nr, "kc": cfg["cb"], "mc_panels": 64, "order": "jr_ir" if cfg["outer"] == "oh_k" else "ir_jr",
            "pack_a": True}
    mr, nr, kc, mc = gemm.tiles(gcfg, g)
    par = cfg["parallel"] if threads > 1 else "none"
    at = "n"
    if par in ("k", "oh"):  # whole panels per thread, so the panels' indices stay affine
        s.split("Y", "kk", -(-K // (mr * threads)) * mr, "kt", "km")
        s.reorder("Y", "kt", "n", "km", "oh", "ow")
        at = "kt"
        mc = min(mc, -(-K // (mr * threads)) * mr)
    s.vectorize("Y", "ow")
    s.compute_at("C", "Y", at)
    if par != "none":
        s.parallel("Y", at)
    b_panels = gemm.pack_panels(s, gcfg, mr, nr, "A", "B")
    s.compute_inline("A")
    s.compute_inline("B")
    gemm.blocked(s, "C", gcfg, mr, nr, kc, mc, nc=-(-OH * OW // nr) * nr, outer=("n", "jc"), b_panels=b_panels)
    return CodegenOptions()


def reduction_loops(s: Schedule, stage: str, cfg: Config, cb: int, C: int) -> tuple[list[str], list[str]]:
    """Split the channel reduction into blocks of cb ([cb]) when cb < C: (loops outside the register
    tile, loops inside it in [red_order])."""
    red = ["rc", "rr", "rs"] if cfg["red_order"] == "crs" else ["rr", "rs", "rc"]
    if cb >= C:
        return [], red
    s.split(stage, "rc", cb, "co", "ci")
    return ["co"], ["ci" if a == "rc" else a for a in red]


def place_padding_and_threads(s: Schedule, cfg: Config, par: str, outermost: str, rows: str = "oho") -> None:
    """Where the padded input (Xp, or its channel-blocked copy Xb) is computed ([pad_at]): root (once,
    before the threads start), rows (per row block), thread (per thread, inside the parallel loop,
    when that loop splits rows or images; else root) or inline; and the parallel outermost loop."""
    where = cfg["pad_at"].removeprefix("blocked_")
    name = "Xb" if "Xb" in s.stages else "Xp" if "Xp" in s.stages else None
    if name is not None:
        if where == "inline" and name == "Xp":
            s.compute_inline("Xp")
        elif where == "rows":
            s.compute_at(name, "Y", rows)
        elif where == "thread" and par in ("oh", "n"):
            # (the packed weights stay a root stage: packing them per thread too put a second heap
            # buffer in the kernel, and LLVM then kept the accumulator tile in memory: 3-4x slower)
            s.compute_at(name, "Y", outermost)
    if par != "none":
        s.parallel("Y", outermost)


def reference(X: np.ndarray, W: np.ndarray, stride: int = 1, pad: int = 0, dilation: int = 1) -> np.ndarray:
    """Exact NCHW conv2d: one (N,C,OH,OW) x (K,C) contraction per kernel tap (r, s)."""
    N, C, H, Wd = X.shape
    K, _, R, S = W.shape
    OH, OW = out_size(H, R, stride, pad, dilation), out_size(Wd, S, stride, pad, dilation)
    Xp = np.pad(X, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((N, OH, OW, K), dtype=np.result_type(X, W))
    for r in range(R):
        for q in range(S):
            h0, w0 = r * dilation, q * dilation
            win = Xp[:, :, h0:h0 + (OH - 1) * stride + 1:stride, w0:w0 + (OW - 1) * stride + 1:stride]
            out += np.tensordot(win, W[:, :, r, q], axes=([1], [1]))  # (N, OH, OW, K)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def reference_bias_relu(X: np.ndarray, W: np.ndarray, b: np.ndarray, stride: int = 1, pad: int = 0,
                        dilation: int = 1) -> np.ndarray:
    """relu(conv2d(X, W) + b[k]) (define_bias_relu's), NCHW."""
    return np.maximum(reference(X, W, stride, pad, dilation) + b[:, None, None], 0)


def presets(shape: Shape, dtype: str, threads: int, target: Target | None = None) -> list[dict]:
    """For a 3x3 window with stride 1 and dilation 1, first the Winograd tile F(4x4) (4 tiles x 2
    vectors of channels). Then configs that were fast on a 2-core AVX-512 machine at the default shape: for a pointwise
    window, 4 (then 6) channels x 2 vectors of pixels on the flattened image (define_pointwise); with stride 1, the
    flattened-width layout with 8 channels x 3 vectors of pixels (its input padded per thread, or
    once on one thread), first with the channel block whose window fits a quarter of L1
    (`l1_channel_block`), then unsplit; then the channel-blocked input (padded per thread, or once
    before the threads start), 2 x 7 or 1 x 14 pixels by 2 vectors of channels, unsplit (cb = C).
    Tiles the target's registers cannot hold become the nearest that fit (`nearest_tile`)."""
    target = target or current()
    vec = target.lanes(dtype)
    sp = space(shape, dtype, threads, target)
    offered = sp.by_name["tile"].values()
    cbs = sp.by_name["cb"].values()
    out: list[dict] = []
    flat: list[tuple[str, str, str, str, int | None]] = []
    if shape["stride"] == 1:
        tile = nearest_tile(f"w8x{3 * vec}", offered, vec)
        pad_at = "root" if threads == 1 else "blocked_thread"
        flat = [(tile, pad_at, "crs", "oh_k", l1_channel_block(shape, dtype, tile, target, cbs)),
                (tile, pad_at, "crs", "oh_k", None)]
    if is_pointwise(shape):  # straight on the flattened image: 4 and 6 channels x 2 vectors (on AVX2,
        # 1x256x56x56 -> 64, 6 x 2 vectors was the best kernel of three tuning runs: 1.10-1.31x torch)
        flat = [(f"w4x{2 * vec}", "none", "rsc", "oh_k", None), (f"w6x{2 * vec}", "none", "crs", "oh_k", None)] + flat
    wino = [t for t in offered if t.startswith("f4x4x")]
    if wino:  # F(4x4, 3x3), 4 tiles x 2 vectors (on Zen 3 at 2 threads,
        # 1x64x56x56 -> 64: 1.5-1.7x the direct kernel, 1.7-2.0x torch)
        flat = [(wino[0], "blocked_thread", "crs", "k_oh", min(cbs))] + flat
    for tile, pad_at, red, outer, cb in flat + [
            (f"{2 * vec}x2x7", "blocked_thread", "rsc", "k_oh", None), (f"{2 * vec}x2x7", "blocked_root", "rsc", "k_oh", None),
            (f"{2 * vec}x1x14", "blocked_thread", "rsc", "k_oh", None), (f"{2 * vec}x2x4", "blocked_root", "rsc", "k_oh", None)]:
        cfg = {"tile": nearest_tile(tile, offered, vec), "cb": cb or max(cbs), "red_order": red,
               "outer": outer, "pad_at": pad_at, "parallel": "oh"}
        fixed = {}
        for k in sp.knobs:  # snap each value into this shape's space
            vals = k.values()
            fixed[k.name] = cfg[k.name] if cfg[k.name] in vals else vals[0]
        if fixed not in out:
            out.append(fixed)
    return out


def l1_channel_block(shape: Shape, dtype: str, tile: str, target: Target, cbs: list[int]) -> int:
    """The largest channel block whose share of one flattened-width tile, the input window (cb
    channels x R rows x PB + S - 1 pixels) and the weights (cb x R x S x KB), fills at most a
    quarter of the target's L1 (on AVX2, 3x3 tiles of 4 x 24: 16 channels ran 12% faster than 64).
    The smallest block when none does.

    >>> from autotune.target import Target
    >>> l1_channel_block({"R": 3, "S": 3}, "float32", "w4x24", Target.named("avx2", l1d=32 << 10), [16, 32, 64])
    16
    """
    kb, pb = (int(x) for x in tile[1:].split("x"))
    per_channel = (shape["R"] * (pb + shape["S"] - 1) + shape["R"] * shape["S"] * kb) * np.dtype(dtype).itemsize
    fits = [cb for cb in cbs if cb * per_channel <= target.l1d // 4]
    return max(fits) if fits else min(cbs)


def nearest_tile(tile: str, offered: list[str], vec: int) -> str:
    """`tile` if the space offers it, else the offered tile of the same kind (GEMM "g",
    flattened-width "w" or direct) with the most accumulator vectors, then the pixel (or column)
    block nearest to tile's, then the channel block (on AVX2, "w8x24" becomes w4x24, not the
    w6x16 of as many vectors: 1.3-1.6x slower on a 3x3 window).

    >>> nearest_tile("32x2x7", ["16x1x4", "16x2x4", "32x1x4", "w8x32"], 16)
    '32x1x4'
    >>> nearest_tile("w8x24", ["w4x16", "w4x24", "w6x16", "w8x8"], 8)
    'w4x24'
    """
    if tile in offered:
        return tile
    kind = lambda t: t[0] if t[0] in "fgw" else ""  # noqa: E731
    dims = lambda t: [int(x) for x in t[len(kind(t)):].split("x")]  # noqa: E731
    want = dims(tile)

    def size(t: str) -> tuple[int, int, int]:
        d = dims(t)
        vectors = d[0] * -(-d[1] // vec) if kind(t) else -(-d[0] // vec) * d[1] * d[2]
        return vectors, -abs(d[-1] - want[-1]), -abs(d[0] - want[0])
    same = [t for t in offered if kind(t) == kind(tile)]
    return max(same, key=size) if same else offered[0]


def torch_reference(X, W, stride=1, pad=0, dilation=1):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F
    return F.conv2d(X, W, stride=stride, padding=pad, dilation=dilation)


TEMPLATE = Template(
    name="conv2d", description="Y[N,K,OH,OW] = conv2d(X[N,C,H,W], W[K,C,R,S]), NCHW, stride/pad/dilation",
    dims=("N", "C", "H", "W", "K", "R", "S"), extra_dims={"stride": 1, "pad": 0, "dilation": 1},
    define=define, space=space, schedule=schedule, reference=reference,
    flops=lambda s: 2.0 * s["N"] * s["K"] * s["C"] * s["R"] * s["S"]
    * out_size(s["H"], s["R"], s["stride"], s["pad"], s["dilation"])
    * out_size(s["W"], s["S"], s["stride"], s["pad"], s["dilation"]),
    default_shape="1x64x56x56x64x3x3x1x1", presets=presets, torch_reference=torch_reference,
    define_for=define_for)
