"""Structural analysis of a compute definition's stages: the matchers that recognise a GEMM
(`match_gemm`) and a direct convolution (`match_window`), and the read patterns the sketch rules
look at (contiguous axes, reductions along rows, identity reads)."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.ir import expr as te
from autotune.ir.affine import to_affine
from autotune.ir.expr import BinOp, Load, Reduce, Tensor, Var


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
