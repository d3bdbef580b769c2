"""A template-free search space: rules derive a sketch and its knobs from a compute definition.

The rules look at the definition's stages (what each reads, along which axis each read is
contiguous, who consumes what) and pick one of four sketches, like Ansor's sketch rules:

- **gemm**: a stage computing ``sum_k A[.., i, .., k ..] * B[.., k, .., j ..]`` (one reduction over
  a product of two inputs, in any layout), alone or feeding an elementwise epilogue (dense + bias
  + relu). It gets the BLIS blocking of templates/gemm.py: the operands packed into MR-tall and
  NR-wide panels, an MR x NR accumulator tile on the stack (cache_write), k blocks, row blocks,
  column blocks over the threads. An epilogue is fused: the GEMM stage is computed at the
  epilogue's register tile (the accumulator tile itself, [fuse] = "tile") or at its cache block
  ("block"), so the output is written once, after the elementwise ops.
- **window**: a direct convolution, ``sum over c and a window of In[.., c, .., p*s + r*d, ..] *
  Wt[k, c, r, ..]`` (`match_window`; In may be a zero-padding stage). The weights are packed in
  blocks of KB output channels; a register tile of KB channels x PH x PW output pixels sized from
  the target's vector registers accumulates on the stack over the window and the channels
  (channel blocks of [cb] outside it). Either the channels are vectorised (each input pixel
  broadcast, the input packed in channel blocks along the reduction read innermost, its padding
  inlined into that pack: one pass) or, at unit stride with fewer output channels than a vector,
  the pixels (each weight broadcast, the input read in contiguous runs). The blocked or padded input is made once or per thread; one of
  the batch, channel-block or pixel-row loops runs over the threads (rows in one chunk each).
  An elementwise epilogue (conv + bias + relu) is fused as in gemm's "tile": the output is
  blocked into those register tiles and the convolution computed at each (the input made once).
- **rows**: programs whose reductions run along the contiguous axis (row sum, softmax, layernorm).
  The output's rows are split into blocks ([rows], the block loop over threads); every producer
  with one consumer is computed at a loop of it ([attach]: per block or per row), and so is one
  read only by the output and by stages computed at its block (softmax's exp), so the rows stay
  in cache; reductions along a contiguous axis are vectorised rfactor style (LLVM, allowed to
  reassociate, keeps vector partial sums and reduces them horizontally once); stages whose last
  axis is contiguous run their reductions outside it and vectorise it.
- **tiled**: anything else (stencils, column reductions, convolutions the window rule does not
  recognise): multi-level tiling of
  the output stage, S_o R_o S_m R_i S_i, with a register accumulator, the innermost spatial
  loop vectorised, the inputs read along it packed into panels, elementwise producers inlined.

Knob values are pruned by the target's vector width and register count (`vector_target`).

Example::

    >>> from autotune.ir import te
    >>> from autotune.autoschedule import AutoScheduler
    >>> A = te.placeholder((64, 64), name="A"); B = te.placeholder((64, 64), name="B")
    >>> k = te.reduce_axis(64, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> auto = AutoScheduler(C, threads=1)
    >>> auto.sketch, sorted(auto.space.by_name)[:3]
    ('gemm', ['jc_blocks', 'kc', 'mc_panels'])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from autotune.dtypes import ITEMSIZE
from autotune.ir import expr as te
from autotune.ir.affine import to_affine
from autotune.ir.expr import BinOp, Load, Reduce, Tensor, Var
from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, ConfigSpace, Knob, SplitKnob, powers_of_two
from templates.base import CodegenOptions
from templates.gemm import fit

MAX_INNER = 64
M = TypeVar("M")


def vector_target() -> tuple[int, int]:
    """(vector register bytes, vector register count) of this machine's ISA: the one place the
    auto-scheduler asks the target."""
    from autotune.target import host
    t = host()
    return t.vector_bits // 8, t.registers


def lanes(dtype: str) -> int:
    """Elements of `dtype` in one vector register."""
    return max(1, vector_target()[0] // ITEMSIZE.get(dtype, 4))


# ---- analysis ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gemm:
    """A stage C[batch.., i, j] = sum_k A[..] * B[..] where A is read at i and k, B at k and j."""
    stage: str
    a: str
    b: str
    i: str
    j: str
    k: str
    batch: tuple[str, ...]
    a_dims: tuple[int, int]   # the dims of A indexed by i and k
    b_dims: tuple[int, int]   # the dims of B indexed by j and k
    M: int
    N: int
    K: int


def match_gemm(t: Tensor) -> Gemm | None:
    """The GEMM structure of a stage, if it is one: one sum over k of a product of two
    placeholder reads, each indexed by plain axes, A by (i, k), B by (k, j), where j is the
    stage's last axis and i another (the rest are batch axes both read at the same dims)."""
    body = t.body
    if (not isinstance(body, Reduce) or body.op != "sum" or len(body.axes) != 1 or len(t.axes) < 2
            or not isinstance(body.body, BinOp) or body.body.op != "*"):
        return None
    x, y = body.body.a, body.body.b
    if not (isinstance(x, Load) and isinstance(y, Load) and x.tensor.is_placeholder and y.tensor.is_placeholder
            and x.tensor.name != y.tensor.name):
        return None
    k = body.axes[0].var
    j = t.axes[-1].var
    axes = [a.var for a in t.axes]
    if not all(isinstance(ix, Var) for ix in x.indices + y.indices):
        return None
    if y.indices.count(j) != 1 and x.indices.count(j) == 1:
        x, y = y, x
    if y.indices.count(j) != 1 or y.indices.count(k) != 1 or x.indices.count(k) != 1 or j in x.indices:
        return None
    rest = [v for v in x.indices if v != k]
    i_cands = [v for v in rest if v in axes and v != j and v not in y.indices]
    if len(i_cands) != 1:
        return None
    i = i_cands[0]
    batch = [v for v in axes if v not in (i, j)]
    if axes.index(i) != len(axes) - 2 or any(v not in x.indices or v not in y.indices for v in batch):
        return None
    if set(x.indices) != {i, k, *batch} or set(y.indices) != {j, k, *batch} or len(set(x.indices)) != len(x.indices):
        return None
    ext = {a.var: a.extent for a in t.axes}
    return Gemm(t.name, x.tensor.name, y.tensor.name, i.name, j.name, k.name, tuple(v.name for v in batch),
                (x.indices.index(i), x.indices.index(k)), (y.indices.index(j), y.indices.index(k)),
                ext[i], ext[j], body.axes[0].extent)


def contiguous_axes(t: Tensor) -> set[str]:
    """Axes of t (spatial or reduce) along which some read of a placeholder or another stage is
    contiguous: the read's last index moves by one with it."""
    if t.body is None:
        return set()
    names = {a.var: a.name for a in list(t.axes) + list(t.reduce_axes)}
    out: set[str] = set()
    for ld in te.loads(t.body):
        f = to_affine(ld.indices[-1])
        if f is None:
            continue
        for v, c in f.terms.items():
            if c == 1 and v in names:
                out.add(names[v])
    return out


def reduces_along_rows(t: Tensor) -> bool:
    """Whether t is a reduction whose every read that its reduction moves is contiguous along a
    reduction axis, with no spatial axis in the last index (a row sum; not a sliding window, not
    a matrix product's column operand)."""
    if not t.reduce_axes:
        return False
    red = {a.var for a in t.reduce_axes}
    spatial = {a.var for a in t.axes}
    moved = [ld for ld in te.loads(t.body) if any(v in red for ix in ld.indices for v in te.walk(ix))]  # type: ignore[arg-type]
    for ld in moved:
        f = to_affine(ld.indices[-1])
        if f is None or any(v in spatial for v in f.terms) or not any(f.terms.get(v) == 1 for v in red):
            return False
    return bool(moved)


def is_identity_read(consumer: Tensor, producer: Tensor) -> bool:
    """Whether every read of producer in consumer is producer[axes of consumer] (same shape)."""
    reads = [ld for ld in te.loads(consumer.body) if ld.tensor is producer]  # type: ignore[arg-type]
    axes = tuple(a.var for a in consumer.axes)
    return bool(reads) and producer.shape == consumer.shape and all(ld.indices == axes for ld in reads)


@dataclass(frozen=True)
class Window:
    """A stage Y[.., k, .., p.., ..] = sum over c and a window of In[.., c, .., p*s + r*d, ..] * Wt[k, c, r ..]:
    a direct convolution. `weight` is read at plain axes only (one spatial axis, `k`, that the
    input does not read, and reduction axes); `input` at the spatial `batch` axes, at the channel
    reduction axis `c` (which the weight reads too) and at `pixels`: indices that combine a
    spatial axis with a reduction axis (the window). `input` may be an elementwise stage
    (zero padding) or a placeholder. `unit_stride`: the input's last index moves by one with the
    last pixel axis (a run of output pixels reads a contiguous run of the input)."""
    stage: str
    input: str
    weight: str
    k: str
    c: str
    pixels: tuple[str, ...]      # spatial axes moved by a window, in the output's order
    batch: tuple[str, ...]       # the other spatial axes the input reads plainly
    window: tuple[str, ...]      # reduction axes other than c, in the definition's order
    input_c_dim: int
    weight_k_dim: int
    unit_stride: bool


def _plain_vars(ld: Load) -> list[Var] | None:
    return list(ld.indices) if all(isinstance(ix, Var) for ix in ld.indices) else None  # type: ignore[return-value]


def _window_operands(t: Tensor) -> tuple[Load, Load] | None:
    """(input read, weight read) of a sum of a product of two reads of different tensors, the
    weight read at plain axes; None if t is not such a sum."""
    body = t.body
    if (not isinstance(body, Reduce) or body.op != "sum" or not isinstance(body.body, BinOp)
            or body.body.op != "*" or not isinstance(body.body.a, Load) or not isinstance(body.body.b, Load)):
        return None
    a, b = body.body.a, body.body.b
    if a.tensor.name == b.tensor.name:
        return None
    if _plain_vars(b) is None:
        a, b = b, a
    if _plain_vars(b) is None or not b.tensor.is_placeholder or (a.tensor.body is not None and a.tensor.reduce_axes):
        return None
    return a, b


def match_window(t: Tensor) -> Window | None:
    """The direct-convolution structure of a stage (`Window`), if it has one."""
    ops = _window_operands(t)
    if ops is None:
        return None
    x, w = ops
    spatial = [a.var for a in t.axes]
    red = [a.var for a in t.reduce_axes]
    wv = _plain_vars(w)
    assert wv is not None
    ks = [v for v in wv if v in spatial]
    if len(ks) != 1 or len(set(wv)) != len(wv) or any(v not in spatial and v not in red for v in wv):
        return None
    k = ks[0]
    pixels, batch, c_dims = [], [], []
    for d, ix in enumerate(x.indices):
        f = to_affine(ix)
        if f is None or k in f.terms:
            return None
        sp = [v for v in f.terms if v in spatial]
        rd = [v for v in f.terms if v in red]
        if sp and rd:
            pixels += sp
        elif isinstance(ix, Var) and ix in spatial:
            batch.append(ix)
        elif isinstance(ix, Var) and ix in red and ix in wv:
            c_dims.append((d, ix))
    if not pixels or len(c_dims) != 1 or len(set(pixels)) != len(pixels) or set(pixels) & set(batch):
        return None
    if any(v in wv for v in pixels + batch) or set(pixels) | set(batch) | {k} != set(spatial):
        return None
    d, c = c_dims[0]
    name = {a.var: a.name for a in list(t.axes) + list(t.reduce_axes)}
    pix = [v for v in spatial if v in pixels]
    last = to_affine(x.indices[-1])
    return Window(t.name, x.tensor.name, w.tensor.name, name[k], name[c],
                  tuple(name[v] for v in pix), tuple(name[v] for v in spatial if v in batch),
                  tuple(name[v] for v in red if v is not c), d, wv.index(k),
                  last is not None and last.terms.get(pix[-1]) == 1)


# ---- the scheduler -----------------------------------------------------------------------
class AutoScheduler:
    """Derives a ConfigSpace for a compute definition and applies a Config of it to a Schedule."""

    def __init__(self, output: Tensor, threads: int = 1) -> None:
        self.output = output
        self.threads = threads
        base = Schedule(output)  # validates names
        self.tensors = {t.name: t for t in te.input_tensors(output)}
        self.stages = [n for n in base.stages if n != output.name]
        self.readers: dict[str, list[str]] = {n: [] for n in self.tensors}
        for t in self.tensors.values():
            for ld in te.loads(t.body) if t.body is not None else []:
                if t.name not in self.readers[ld.tensor.name]:
                    self.readers[ld.tensor.name].append(t.name)
        self.spatial = [(a.name, a.extent) for a in output.axes]
        self.reduce = [(a.name, a.extent) for a in output.reduce_axes]
        self.dtype = output.dtype
        self.gemm, self.epilogue = self._with_epilogue(match_gemm)
        self.window: Window | None = None
        if self.gemm is None:
            self.window, self.epilogue = self._with_epilogue(match_window)
        if self.gemm is not None:
            self.sketch = "gemm"
        elif self.window is not None:
            self.sketch = "window"
        elif self._row_like():
            self.sketch = "rows"
        else:
            self.sketch = "tiled"
        self.packable = self._packable() if self.sketch == "tiled" else {}
        self.space = ConfigSpace(self._knobs(), prune=self._window_prune if self.sketch == "window" else None)

    # -- sketch rules
    def _with_epilogue(self, match: Callable[[Tensor], M | None]) -> tuple[M | None, bool]:
        """The stage `match` recognises (a GEMM, a convolution), and whether the output is an
        elementwise epilogue of it: the output itself, or the one such stage, read only by the
        output and at the output's own indices, when every other stage is elementwise over inputs."""
        out = self.output
        m = match(out)
        if m is not None:
            return m, False
        if out.reduce_axes or out.body is None:
            return None, False
        computes = [t for t in self.tensors.values() if not t.is_placeholder and t is not out]
        found = [(t, r) for t, r in ((t, match(t)) for t in computes) if r is not None]
        if len(found) != 1:
            return None, False
        t, m = found[0]
        others = [c for c in computes if c is not t]
        if (self.readers[t.name] != [out.name] or not is_identity_read(out, t)
                or any(c.reduce_axes or any(not ld.tensor.is_placeholder for ld in te.loads(c.body))  # type: ignore[arg-type]
                       for c in others)):
            return None, False
        return m, True

    def _row_like(self) -> bool:
        """Whether some reduction of the program runs along a contiguous axis."""
        reds = [t for t in self.tensors.values() if t.reduce_axes]
        along = [reduces_along_rows(t) for t in reds]
        return any(along) and bool(self.spatial) and not (self.output.reduce_axes and not along[-1])

    def _packable(self) -> dict[str, dict[str, int]]:
        """Inputs of a reduction output read with a spatial axis as a whole index of a dimension
        that is not already contiguous in it: tensor -> {axis: dim}. Packing along that dim makes
        the axis contiguous, so it can be the vectorised one."""
        if self.output.body is None or not self.reduce:
            return {}
        axis_of = {a.var: a.name for a in self.output.axes}
        out: dict[str, dict[str, int]] = {}
        for ld in te.loads(self.output.body):
            t = ld.tensor
            if not t.is_placeholder:
                continue
            for d, ix in enumerate(ld.indices[:-1]):
                if isinstance(ix, Var) and ix in axis_of and ld.indices.count(ix) == 1:
                    out.setdefault(t.name, {}).setdefault(axis_of[ix], d)
        return out

    def vector_axes(self) -> list[str]:
        """Spatial axes the tiled sketch may vectorize (innermost): the last one, and any an input
        can be packed along."""
        last = [self.spatial[-1][0]] if self.spatial else []
        packed = sorted({a for axes in self.packable.values() for a in axes} - set(last))
        return last + packed

    # -- knobs
    def _knobs(self) -> list[Knob]:
        if self.sketch == "gemm":
            return self._gemm_knobs()
        if self.sketch == "rows":
            return self._row_knobs()
        if self.sketch == "window":
            return self._window_knobs()
        return self._tiled_knobs()

    def register_tiles(self) -> list[str]:
        """The MR x NR accumulator tiles ("6x48") that fit the vector registers (accumulators,
        one row of B vectors and a broadcast of A), the larger ones first; tiles too small to
        hide the FMA latency are left out unless the matrix is that small."""
        g = self.gemm
        assert g is not None
        lane = lanes(self.dtype)
        _, regs = vector_target()
        mrs = fit([1, 2, 3, 4, 6, 8, 12, 16], g.M)
        nrs = fit([lane, 2 * lane, 3 * lane, 4 * lane], g.N)
        pairs = []
        for mr in mrs:
            for nr in nrs:
                v = -(-nr // lane)
                if mr * v + v + 1 <= regs:
                    pairs.append((mr * v, mr, nr))
        best = max(p[0] for p in pairs)
        keep = sorted((p for p in pairs if p[0] * 2 >= best), key=lambda p: (-p[0], -p[2]))
        return [f"{mr}x{nr}" for _, mr, nr in keep]

    def _gemm_knobs(self) -> list[Knob]:
        g = self.gemm
        assert g is not None
        knobs: list[Knob] = []
        if self.epilogue:
            knobs.append(ChoiceKnob("fuse", ["tile", "block"]))
        knobs += [
            ChoiceKnob("tile", self.register_tiles()),
            ChoiceKnob("kc", fit([64, 128, 256, 384, 512, 768, 1024], g.K)),
            ChoiceKnob("mc_panels", [4, 8, 16, 32, 64]),
            ChoiceKnob("jc_blocks", [1, 2, 4, 8]),
            ChoiceKnob("order", ["jr_ir", "ir_jr"]),
            ChoiceKnob("pack_a", [True, False]),
        ]
        if self.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        return knobs

    def _row_knobs(self) -> list[Knob]:
        ext = self.spatial[0][1] if self.spatial else 1
        rows = sorted({r for r in (1, 2, 4, 8, 16, 32) if r <= ext} | {min(ext, 32)})
        knobs: list[Knob] = [ChoiceKnob("rows", rows)]
        if self._attached_stages():
            knobs.append(ChoiceKnob("attach", ["block", "row"]))
        if self.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        return knobs

    def _tiled_knobs(self) -> list[Knob]:
        knobs: list[Knob] = []
        lane = lanes(self.dtype)
        vec = self.vector_axes()
        for name, ext in self.spatial:
            inner = powers_of_two(min(ext, MAX_INNER))
            if name in vec and ext >= lane:  # may be the vectorised loop: whole vectors, up to four
                inner = sorted(set(inner) | set(fit([lane, 2 * lane, 3 * lane, 4 * lane], ext)))
            mid = powers_of_two(max(1, min(ext, 1024)))
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=2, candidates=[mid, inner], nested=False))
        for name, ext in self.reduce:
            cands = powers_of_two(min(ext, 1024))
            knobs.append(SplitKnob(f"tile_{name}", ext, levels=1, candidates=[sorted(set(cands) | {ext})]))
        if len(vec) > 1:
            knobs.append(ChoiceKnob("vector_axis", vec))
        if self.reduce:
            knobs.append(ChoiceKnob("cache", [True, False]))
        for t in sorted(self.packable):
            knobs.append(ChoiceKnob(f"pack_{t}", [True, False]))
        if len(self.spatial) >= 2:
            knobs.append(ChoiceKnob("unroll", [True, False]))
        knobs.append(ChoiceKnob("vectorize", [True, False]))
        if self.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        for st in self.stages:
            t = self.tensors.get(st)
            if t is not None and not t.reduce_axes:
                knobs.append(ChoiceKnob(f"inline_{st}", [True, False]))
        return knobs


    # -- the direct-convolution sketch
    def _extent(self, axis: str) -> int:
        """The extent of an axis of the convolution stage."""
        assert self.window is not None
        t = self.tensors.get(self.window.stage, self.output)
        return {a.name: a.extent for a in list(t.axes) + list(t.reduce_axes)}[axis]

    def _out_axes(self) -> dict[str, str]:
        """The convolution stage's spatial axis names -> the output's (the same, without an epilogue)."""
        assert self.window is not None
        t = self.tensors.get(self.window.stage, self.output)
        return {a.name: b.name for a, b in zip(t.axes, self.output.axes)}

    def window_layouts(self) -> list[str]:
        """Where the input of a direct convolution is made: blocked by channels or plain, once
        ("root") or per thread (at the output's loop over threads). A fused epilogue computes the
        convolution inside the output's register tile, out of reach of that loop: root only."""
        w = self.window
        assert w is not None
        if self.epilogue:
            return ["blocked_root", "plain"]
        return ["blocked_root", "blocked_thread", "plain"] + (["plain_thread"] if w.input in self.stages else [])

    def window_tiles(self) -> list[str]:
        """Register tiles "KBxPHxPW" of a direct convolution: KB output channels (whole vectors,
        up to four) x PH x PW output pixels (the last two pixel axes; PW a power of two or a
        divisor of its extent up to 28), whose accumulators, KB/lanes weight vectors and a
        broadcast pixel fit the vector registers; tiles with under half the accumulators of the
        largest are left out. The largest first."""
        w = self.window
        assert w is not None
        lane = lanes(self.dtype)
        _, regs = vector_target()
        K = self._extent(w.k)
        pw_ext = self._extent(w.pixels[-1])
        ph_ext = self._extent(w.pixels[-2]) if len(w.pixels) > 1 else 1
        pws = fit(sorted({2, 4, 8, 16} | {d for d in range(3, 29) if pw_ext % d == 0}), pw_ext)
        tiles = []
        for kb in fit([lane, 2 * lane, 3 * lane, 4 * lane], K):
            v = -(-min(kb, K) // lane)
            for ph in fit([1, 2, 4], ph_ext):
                for pw in pws:
                    acc = min(ph, ph_ext) * min(pw, pw_ext) * v
                    if acc + v + 1 <= regs:
                        tiles.append((acc, kb, ph, pw))
        if not tiles:
            return [f"{fit([lane], K)[0]}x1x{pws[0]}"]
        best = max(t[0] for t in tiles)
        keep = sorted((t for t in tiles if 2 * t[0] >= best), key=lambda t: (-t[0], t[1], -t[3]))
        return [f"{kb}x{ph}x{pw}" for _, kb, ph, pw in keep] + self.pixel_tiles()

    def pixel_tiles(self) -> list[str]:
        """With a unit-stride last pixel axis, tiles "pKBxPW" vectorised along the pixels instead:
        PW output pixels in whole vectors (one contiguous input run per step) x KB output channels
        unrolled (each weight broadcast), fitting the registers like `window_tiles`'. PW divides
        the row where some whole number of vectors does: a partial tile at the row's end runs
        element by element under a guard (5x slower for 24 of 56 pixels on AVX2). Offered only
        when the output channels fill less than a vector: otherwise the channel-vectorised tiles
        were faster (conv2d 64 -> 64 channels at 56x56 on AVX2: p12x8 2.10 ms, 16x1x4 1.54 ms)."""
        w = self.window
        assert w is not None
        lane = lanes(self.dtype)
        _, regs = vector_target()
        K, pw_ext = self._extent(w.k), self._extent(w.pixels[-1])
        if not w.unit_stride or K >= lane:
            return []
        tiles = []
        whole = [lane * d for d in range(1, regs) if pw_ext % (lane * d) == 0]  # rows in whole tiles
        for pw in whole or fit([lane, 2 * lane, 3 * lane, 4 * lane], pw_ext):
            v = -(-min(pw, pw_ext) // lane)
            for kb in fit([1, 2, 3, 4, 6, 8, 12, 16], K):
                if min(kb, K) * v + v + 1 <= regs:
                    tiles.append((min(kb, K) * v, kb, pw))
        best = max((t[0] for t in tiles), default=0)
        return [f"p{kb}x{pw}" for _, kb, pw in sorted((t for t in tiles if 2 * t[0] >= best),
                                                       key=lambda t: (-t[0], -t[2]))]

    def window_parallel(self) -> list[str]:
        """Loops a direct convolution may run over threads: a batch axis, the output-channel
        blocks or the rows of pixels, each only if it has more than one iteration."""
        w = self.window
        assert w is not None
        if self.threads <= 1:
            return ["none"]
        cands = [a for a in w.batch if self._extent(a) > 1][:1]
        if -(-self._extent(w.k) // lanes(self.dtype)) > 1:
            cands.append(w.k)
        rows = w.pixels[-2] if len(w.pixels) > 1 else w.pixels[-1]
        if self._extent(rows) > 1:
            cands.append(rows)
        return cands or ["none"]

    def _window_knobs(self) -> list[Knob]:
        w = self.window
        assert w is not None
        C = self._extent(w.c)
        layouts = self.window_layouts()
        return [
            ChoiceKnob("tile", self.window_tiles()),
            ChoiceKnob("cb", fit([16, 32, 64, 128, 256], C)),
            ChoiceKnob("red_order", ["window_c", "c_window"]),
            ChoiceKnob("outer", ["channels", "pixels"]),
            ChoiceKnob("input", layouts),
            ChoiceKnob("parallel", self.window_parallel()),
        ]

    def _window_presets(self) -> list[dict[str, Any]]:
        """For each number of channel vectors (the three with the largest tiles) its largest
        register tile, with the channel reduction innermost over an input blocked by the whole
        channel extent (made per thread, or once); then the two largest pixel-vectorised tiles
        over the unblocked input; channel blocks outer, rows over threads."""
        sp = self.space.by_name
        par = sp["parallel"].values()
        tiles = sp["tile"].values()  # the largest first
        plain = "plain_thread" if "plain_thread" in sp["input"].values() else "plain"
        direct: dict[int, str] = {}
        for t in tiles:
            if not t.startswith("p"):
                direct.setdefault(self._window_tile(t)[0], t)
        out = []
        for tile in list(direct.values())[:3] + [t for t in tiles if t.startswith("p")][:2]:
            pixel = tile.startswith("p")
            for layout in ((plain, "plain") if pixel else ("blocked_thread", "blocked_root")):
                if layout not in sp["input"].values():
                    continue
                cfg = {"tile": tile, "cb": max(sp["cb"].values()), "red_order": "c_window" if pixel else "window_c",
                       "outer": "channels", "input": layout, "parallel": par[-1]}
                if cfg not in out:
                    out.append(cfg)
        return out

    def _window_prune(self, cfg: Mapping[str, Any]) -> str | None:
        """Pixel-vectorised tiles read the input along its last dim: a channel-blocked input would
        make those reads strided."""
        if str(cfg.get("tile", "")).startswith("p") and str(cfg.get("input", "")).startswith("blocked"):
            return "a pixel-vectorised tile reads the input unblocked"
        return None

    # -- presets
    def presets(self) -> list[dict[str, Any]]:
        """Known-good points of the space, best guess first: for GEMM the largest register tiles
        with k blocks of 256 and 512; otherwise one sensible config."""
        if self.sketch == "tiled":
            return [self.default_config()] + self._tiled_presets()
        if self.sketch == "window":
            return self._window_presets()
        if self.sketch != "gemm":
            return [self.default_config()]
        out = []
        kcs = self.space.by_name["kc"].values()
        for tile in self.space.by_name["tile"].values()[:3]:
            for kc in (256, 512):
                cfg = self.default_config()
                cfg["tile"] = tile
                cfg["kc"] = min(kcs, key=lambda v: abs(v - kc))
                if cfg not in out:
                    out.append(cfg)
        if self.epilogue:
            out += [{**c, "fuse": "block"} for c in out[:2]]
        return out

    def _tiled_presets(self) -> list[dict[str, Any]]:
        """For each packable vector axis: two vectors of it innermost, the last axis' tile of 4 or 8
        unrolled above it (the register tile of a direct convolution), whole reduction axes,
        producers materialised or inlined."""
        out = []
        lane = lanes(self.dtype)
        last = self.spatial[-1][0]
        for vec in self.vector_axes()[1:]:
            for ow in (4, 8):
                for inline in (False, True):
                    cfg = self.default_config()
                    cfg["vector_axis"] = vec
                    for k in self.space.knobs:
                        if k.name.startswith("inline_"):
                            cfg[k.name] = inline
                        if not k.name.startswith("tile_"):
                            continue
                        axis = k.name[5:]
                        ext = dict(self.spatial + self.reduce)[axis]
                        want = ((ext,) if axis in dict(self.reduce) else
                                (1, 2 * lane) if axis == vec else (1, ow) if axis == last else (1, 1))
                        cfg[k.name] = min(k.values(), key=lambda v: sum(abs(math.log2(a) - math.log2(b))
                                                                         for a, b in zip(v, want)))
                    if cfg not in out:
                        out.append(cfg)
        return out

    def default_config(self) -> dict[str, Any]:
        """A sensible schedule: for GEMM the largest register tile, k blocks of 256, row blocks of
        16 panels, column panels outer, A packed, parallel; row programs in blocks of 8 rows;
        otherwise tiles of 8 x 16, 8 x 4 and 8 x 1 (the last axis, the one before it, the others:
        an unrolled body of at most 4 vector loops; 32 with inlined padding took LLVM 90 s),
        cache, vectorize, producers inlined."""
        cfg: dict[str, Any] = {}
        names = [a for a, _ in self.spatial]
        inner = dict(zip(reversed(names), (16, 4)))
        for k in self.space.knobs:
            vals = k.values()
            if self.sketch == "gemm" and k.name in ("kc", "mc_panels"):
                want = 256 if k.name == "kc" else 16
                cfg[k.name] = min(vals, key=lambda v: abs(v - want))
            elif k.name == "rows":
                cfg[k.name] = min(vals, key=lambda v: abs(v - 8))
            elif k.name.startswith("tile_"):
                want = (8, inner.get(k.name[5:], 1)) if getattr(k, "levels", 1) == 2 else (64,)
                cfg[k.name] = min(vals, key=lambda v: sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(v, want)))
            elif k.name.startswith("inline_"):
                cfg[k.name] = True
            else:
                cfg[k.name] = True if any(v is True for v in vals) else vals[0]
        return cfg

    # -- apply
    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """Apply the primitives a config chooses; returns the code generator's options."""
        if self.sketch == "gemm":
            return self._apply_gemm(s, cfg)
        if self.sketch == "rows":
            return self._apply_rows(s, cfg)
        if self.sketch == "window":
            return self._apply_window(s, cfg)
        return self._apply_tiled(s, cfg)

    def _workers(self, cfg: Config) -> int:
        return self.threads if cfg.get("parallel") and self.threads > 1 else 1

    def _gemm_tiles(self, cfg: Config) -> tuple[int, int, int, int, int]:
        """(mr, nr, kc, mc, nc) of a config, cut to the matrix; NC gives each worker jc_blocks blocks."""
        g = self.gemm
        assert g is not None
        mr, nr = (int(x) for x in cfg["tile"].split("x"))
        mr, nr, kc = min(mr, g.M), min(nr, g.N), min(cfg["kc"], g.K)
        mc = min(cfg["mc_panels"] * mr, -(-g.M // mr) * mr)
        panels = -(-g.N // nr)
        nc = -(-panels // min(panels, cfg["jc_blocks"] * self._workers(cfg))) * nr
        return mr, nr, kc, mc, nc

    def _pack_operands(self, s: Schedule, cfg: Config, mr: int, nr: int) -> tuple[str | None, str]:
        """Pack B into NR-wide panels along j and, with [pack_a], A into MR-tall panels along i
        (packed layout (outer, other dims..., inner)); each packing loop nest reads its source
        along the source's contiguous dim. Returns the packed names (A's or None, B's)."""
        g = self.gemm
        assert g is not None
        names = []
        for t, (d, dk), f, on in ((g.a, g.a_dims, mr, cfg["pack_a"]), (g.b, g.b_dims, nr, True)):
            if not on:
                names.append(None)
                continue
            p = s.pack(t, d, f, self._fresh_tensor(s, f"{t}_p"))
            if dk == s.tensors[t].ndim - 1:  # the source is contiguous along k: the panel's rows innermost
                s.reorder(p, "p_i", f"d{dk}")
            names.append(p)
        return names[0], names[1]  # type: ignore[return-value]

    @staticmethod
    def _fresh_tensor(s: Schedule, name: str) -> str:
        while name in s.tensors:
            name += "_"
        return name

    def _register_tiles(self, s: Schedule, stage: str, cfg: Config, mr: int, nr: int, kc: int,
                        j: str, i: str, outer: tuple[str, ...], between: tuple[str, ...] = ()) -> str:
        """Split j into NR-wide and i into MR-tall register tiles and k into kc blocks; order the
        loops (outer..., k blocks, between..., register tiles in [order], k, rows, columns);
        accumulate each tile on the stack, rows unrolled, columns vectorized. Returns the k-block loop."""
        g = self.gemm
        assert g is not None
        jr, jv = s.split(stage, j, nr, f"{g.j}_r", f"{g.j}_v")
        ko, ki = s.split(stage, g.k, kc, f"{g.k}_c", f"{g.k}_k")
        ir, iu = s.split(stage, i, mr, f"{g.i}_r", f"{g.i}_u")
        tiles = (jr, ir) if cfg["order"] == "jr_ir" else (ir, jr)
        s.reorder(stage, *outer, ko, *between, *tiles, ki, iu, jv)
        s.cache_write(stage, tiles[1])
        s.unroll(stage, iu)
        s.vectorize(stage, jv)
        return ko

    def _apply_gemm(self, s: Schedule, cfg: Config) -> CodegenOptions:
        g = self.gemm
        assert g is not None
        mr, nr, kc, mc, nc = self._gemm_tiles(cfg)
        ap, bp = self._pack_operands(s, cfg, mr, nr)
        parallel = self._workers(cfg) > 1
        if not self.epilogue:
            jc, jn = s.split(g.stage, g.j, nc, f"{g.j}_c", f"{g.j}_n")
            ic, im = s.split(g.stage, g.i, mc, f"{g.i}_c", f"{g.i}_m")
            ko = self._register_tiles(s, g.stage, cfg, mr, nr, kc, jn, im, (*g.batch, jc), (ic,))
            s.compute_at(bp, g.stage, ko)
            if ap:
                s.compute_at(ap, g.stage, ic)
            if parallel:
                s.parallel(g.stage, (*g.batch, jc)[0])
            return CodegenOptions()
        out = self.output.name
        e_axes = [a.name for a in self.output.axes]
        e_batch, ei, ej = e_axes[:-2], e_axes[-2], e_axes[-1]
        jc, jn = s.split(out, ej, nc, f"{ej}_c", f"{ej}_n")
        ic, im = s.split(out, ei, mc, f"{ei}_c", f"{ei}_m")
        blocks = (jc, ic)
        if cfg["fuse"] == "block":
            s.reorder(out, *e_batch, *blocks, im, jn)
            s.vectorize(out, jn)
            s.compute_at(g.stage, out, blocks[1])
            ko = self._register_tiles(s, g.stage, cfg, mr, nr, kc, g.j, g.i, g.batch)
            s.compute_at(bp, g.stage, ko)
            if ap:
                s.compute_at(ap, g.stage, ko)
        else:  # the GEMM stage computed at the epilogue's register tile, over the whole k
            jr, jv = s.split(out, jn, nr, f"{ej}_r", f"{ej}_v")
            ir, iu = s.split(out, im, mr, f"{ei}_r", f"{ei}_u")
            tiles = (jr, ir) if cfg["order"] == "jr_ir" else (ir, jr)
            s.reorder(out, *e_batch, *blocks, *tiles, iu, jv)
            s.unroll(out, iu)
            s.vectorize(out, jv)
            s.compute_at(g.stage, out, tiles[1])
            io, iu2 = s.split(g.stage, g.i, mr, f"{g.i}_r", f"{g.i}_u")
            jo, jv2 = s.split(g.stage, g.j, nr, f"{g.j}_r", f"{g.j}_v")
            s.reorder(g.stage, *g.batch, io, jo, g.k, iu2, jv2)
            s.cache_write(g.stage, jo)
            s.unroll(g.stage, iu2)
            s.vectorize(g.stage, jv2)
        if parallel:
            s.parallel(out, (*e_batch, blocks[0])[0])
        return CodegenOptions()

    def _attached_stages(self) -> list[str]:
        """Stages (not inlined) with one reader: each is computed at a loop of it."""
        return [n for n in self.stages if len(self.readers[n]) == 1 and not self._inline(n)]

    def _inline(self, name: str) -> bool:
        """Row programs inline an elementwise stage read at full size whose inputs are all inlined
        or inputs; a stage read broadcast (per row) is computed once per row instead."""
        t = self.tensors[name]
        if t.reduce_axes:
            return False
        for r in self.readers[name]:
            rt = self.tensors[r]
            if len(t.shape) < len(rt.shape):
                return False
        return all(ld.tensor.is_placeholder or self._inline(ld.tensor.name) for ld in te.loads(t.body))  # type: ignore[arg-type]

    def _apply_rows(self, s: Schedule, cfg: Config) -> CodegenOptions:
        out = self.output.name
        for n in self.stages:
            if self._inline(n):
                s.compute_inline(n)
        s0 = self.spatial[0][0]
        rows = min(cfg["rows"], self.spatial[0][1])
        so, si = s.split(out, s0, rows, f"{s0}_o", f"{s0}_i")
        at = so if cfg.get("attach", "block") == "block" else si
        at_out: set[str] = set()  # stages computed at the output's block (or row) loop
        for n in reversed(self.stages):  # consumers before producers
            if self._inline(n):
                continue
            readers = self.readers[n]
            if len(readers) == 1 or (out in readers and set(readers) - {out} <= at_out):
                r = readers[0] if len(readers) == 1 else out
                s.compute_at(n, r, at if r == out else self.tensors[r].axes[0].name)
                if r == out:
                    at_out.add(n)
            self._stage_loops(s, n)
        self._stage_loops(s, out)
        if self.output.reduce_axes and len(s.stages[out].order) > len(self.output.reduce_axes) + 1:
            s.cache_write(out, si if len(self.spatial) == 1 else s.stages[out].order[-len(self.reduce) - 1])
        if self._workers(cfg) > 1:
            s.parallel(out, so)
        return CodegenOptions(reassoc=True)

    def _stage_loops(self, s: Schedule, name: str) -> None:
        """Within one stage of a row program: a stage whose last spatial axis is contiguous runs its
        reductions outside it and vectorizes it; one reducing along a contiguous axis keeps the
        reduction innermost (vectorized by reassociation)."""
        t = self.tensors[name]
        if not t.axes:
            return
        last = t.axes[-1].name
        red = [a.name for a in t.reduce_axes]
        if red and reduces_along_rows(t):
            return
        st = s.stages[name]
        if last not in st.order:
            return
        if red:
            order = [x for x in st.order if x != last] + [last]
            s.reorder(name, *order)
        elif st.order[-1] != last:
            return
        s.vectorize(name, last)

    def _apply_tiled(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """S_o R_o S_m R_i S_i: every spatial axis in three levels, every reduction axis in two; the
        vector axis' inner tile innermost (vectorized, its operands packed along it), the other inner
        tiles unrolled above it, an accumulator over the S_m loops; the outer loops ordered so the
        first one has work for every thread, and it runs in parallel."""
        out = self.output.name
        for st in self.stages:
            if cfg.get(f"inline_{st}"):
                s.compute_inline(st)
        vec = cfg.get("vector_axis", self.spatial[-1][0])
        for t, axes in sorted(self.packable.items()):
            if cfg.get(f"pack_{t}") and vec in axes:
                f = min(cfg[f"tile_{vec}"][1], s.tensors[t].shape[axes[vec]])
                s.pack(t, axes[vec], f, f"{t}_pack")
        outer, mid, inner, red_o, red_i = [], [], [], [], []
        ext_of: dict[str, int] = {}
        for name, ext in self.spatial:
            m, i = cfg[f"tile_{name}"]
            i = min(i, ext)
            m = max(1, min(m, -(-ext // i)))
            o_, rest = s.split(out, name, m * i, f"{name}_o", f"{name}_r")
            m_, i_ = s.split(out, rest, i, f"{name}_m", f"{name}_i")
            outer.append(o_); mid.append(m_); inner.append(i_)
            ext_of[o_], ext_of[i_] = -(-ext // (m * i)), i
        for name, ext in self.reduce:
            (f,) = cfg[f"tile_{name}"]
            o_, i_ = s.split(out, name, min(f, ext), f"{name}_o", f"{name}_i")
            red_o.append(o_); red_i.append(i_)
        v = [a for a, _ in self.spatial].index(vec)
        unrolled = [x for k, x in enumerate(inner) if k != v]
        busy = [x for x in outer if ext_of[x] >= self.threads]
        if busy:
            outer.remove(busy[0])
            outer.insert(0, busy[0])
        s.reorder(out, *outer, *red_o, *mid, *red_i, *unrolled, inner[v])
        if self.reduce and cfg["cache"]:
            s.cache_write(out, mid[-1])
        if cfg.get("unroll"):  # the innermost tiles, as long as the unrolled body stays small
            body = 1
            for x in reversed(unrolled):
                if 1 < ext_of[x] <= 16 and body * ext_of[x] <= 32:
                    s.unroll(out, x)
                    body *= ext_of[x]
        if cfg["vectorize"]:
            s.vectorize(out, inner[v])
        if cfg.get("parallel"):
            s.parallel(out, outer[0])
        return CodegenOptions()

    def _window_layouts(self, s: Schedule, cfg: Config, kb: int, cb: int) -> str | None:
        """Pack the weights in blocks of kb output channels (the vectorised axis) and, unless
        [input] is "plain", the input in blocks of cb channels along its channel dim, so the
        innermost reduction reads it contiguously; a zero-padding stage is inlined into that pack
        (padding and layout in one pass). Returns the blocked input's name."""
        w = self.window
        assert w is not None
        s.pack(w.weight, w.weight_k_dim, kb, self._fresh_tensor(s, f"{w.weight}_p"))
        if cfg["input"].startswith("plain"):
            return None
        xb = s.pack(w.input, w.input_c_dim, cb, self._fresh_tensor(s, f"{w.input}_b"))
        if w.input in s.stages:
            s.compute_inline(w.input)
        return xb

    def _window_blocks(self, s: Schedule, cfg: Config, par: str) -> tuple[list[str], str]:
        """The loops outside the reduction, outermost first (the one over threads first, then batch
        axes, then output-channel and pixel-row blocks in [outer] order), and the pixel block loop
        the accumulator tile sits at. Rows over threads are cut into one chunk per thread, so a
        stage computed per thread covers just its rows."""
        w = self.window
        assert w is not None
        ax = self._out_axes()
        out, pix, k, par = self.output.name, [ax[p] for p in w.pixels], ax[w.k], ax.get(par, par)
        ko = f"{k}_o"
        rows = f"{pix[-2]}_o" if len(pix) > 1 else None
        blocks = [ko, rows] if cfg["outer"] == "channels" else [rows, ko]
        loops = [ax[b] for b in w.batch] + pix[:-2] + [b for b in blocks if b] + [f"{pix[-1]}_o"]
        if par == "none":
            return loops, loops[-1]
        lead = f"{par}_o" if par in (k, pix[-2] if len(pix) > 1 else pix[-1]) else par
        if lead != ko and lead != par:  # a pixel block loop: one contiguous chunk per thread
            n = s.stages[out].extents()[lead]
            t, m = s.split(out, lead, -(-n // self.threads), f"{par}_t", f"{par}_m")
            loops[loops.index(lead)] = m
            lead = t
        else:
            loops.remove(lead)
        return [lead] + loops, loops[-1]

    @staticmethod
    def _window_tile(tile: str) -> tuple[int, int, int]:
        """(KB, PH, PW) of a tile "KBxPHxPW", or of a pixel-vectorised "pKBxPW" (PH = 1)."""
        if tile.startswith("p"):
            kb, pw = (int(x) for x in tile[1:].split("x"))
            return kb, 1, pw
        kb, ph, pw = (int(x) for x in tile.split("x"))
        return kb, ph, pw

    def _window_tile_loops(self, s: Schedule, stage: str, cfg: Config, ax: Mapping[str, str]) -> list[str]:
        """Split a stage of the convolution's shape (axis names `ax` of the convolution's) into the
        register tile of [tile]: the output channels by KB, the last two pixel axes by PH and PW
        (outer loops "<axis>_o"). Returns the tile's loops, the vectorised one last."""
        w = self.window
        assert w is not None
        kb, ph, pw = self._window_tile(cfg["tile"])
        pix = list(w.pixels)
        k = ax[w.k]
        s.split(stage, k, min(kb, self._extent(w.k)), f"{k}_o", f"{k}_i")
        inner = []
        for axis, f in ((pix[-2], ph), (pix[-1], pw)) if len(pix) > 1 else ((pix[-1], pw),):
            inner.append(s.split(stage, ax[axis], min(f, self._extent(axis)), f"{ax[axis]}_o", f"{ax[axis]}_i")[1])
        return [*inner[:-1], f"{k}_i", inner[-1]] if cfg["tile"].startswith("p") else [*inner, f"{k}_i"]

    def _window_reduction(self, s: Schedule, cfg: Config) -> tuple[list[str], list[str]]:
        """The convolution stage's reduction loops: (channel blocks of [cb], if any; the window and
        the channels inside them in [red_order])."""
        w = self.window
        assert w is not None
        red_out, c_in = ([], w.c)
        if min(cfg["cb"], self._extent(w.c)) < self._extent(w.c):
            co, c_in = s.split(w.stage, w.c, cfg["cb"], f"{w.c}_o", f"{w.c}_i")
            red_out = [co]
        return red_out, [*w.window, c_in] if cfg["red_order"] == "window_c" else [c_in, *w.window]

    @staticmethod
    def _unroll_vectorize(s: Schedule, stage: str, tile: list[str]) -> None:
        for x in tile[:-1]:
            s.unroll(stage, x)
        s.vectorize(stage, tile[-1])

    def _apply_window(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """A direct convolution: weights packed along the output channels, an accumulator tile of
        KB channels x PH x PW pixels, the channels vectorised and the pixels unrolled (or, for "p"
        tiles, the pixels vectorised and the channels unrolled), the reduction over the window and
        the channels (in [red_order]; channel blocks of [cb] outside the tile), the input blocked
        or not, made once or per thread ([input]), one loop over threads ([parallel]). An
        elementwise epilogue is the output split into those tiles, with the convolution computed
        at each over the whole reduction (its own accumulator tile): the output written once."""
        w = self.window
        assert w is not None
        out = self.output.name
        kb = min(self._window_tile(cfg["tile"])[0], self._extent(w.k))
        xb = self._window_layouts(s, cfg, kb, min(cfg["cb"], self._extent(w.c)))
        tile = self._window_tile_loops(s, out, cfg, self._out_axes())
        par = cfg["parallel"] if self.threads > 1 else "none"
        if self.epilogue:
            loops, at = self._window_blocks(s, cfg, par)
            s.reorder(out, *loops, *tile)
            self._unroll_vectorize(s, out, tile)
            s.compute_at(w.stage, out, at)
            conv_tile = self._window_tile_loops(s, w.stage, cfg, {a: a for a in self._out_axes()})
            red_out, red = self._window_reduction(s, cfg)
            tiles = [*w.batch, *w.pixels[:-2], f"{w.k}_o", *(f"{p}_o" for p in w.pixels[-2:])]
            s.reorder(w.stage, *tiles, *red_out, *red, *conv_tile)
            s.cache_write(w.stage, tiles[-1])
            self._unroll_vectorize(s, w.stage, conv_tile)
        else:
            red_out, red = self._window_reduction(s, cfg)
            loops, at = self._window_blocks(s, cfg, par)
            s.reorder(out, *loops[:-1], *red_out, loops[-1], *red, *tile)
            s.cache_write(out, at)
            self._unroll_vectorize(s, out, tile)
            per_thread = {"blocked_thread": xb, "plain_thread": w.input}.get(cfg["input"])
            if per_thread is not None and par not in ("none", w.k):
                s.compute_at(per_thread, out, loops[0])
        if par != "none":
            s.parallel(out, loops[0])
        return CodegenOptions()


def auto_schedule(output: Tensor, cfg: Config, threads: int = 1) -> Schedule:
    """The schedule a config of the derived space gives."""
    auto = AutoScheduler(output, threads)
    s = Schedule(output)
    auto.apply(s, auto.space.validate(cfg))
    return s
