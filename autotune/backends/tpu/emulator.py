"""An emulated TPU core: the runtime of a tiled kernel for a tile-size config, or an error when
its tiles do not fit. A measure backend like any other (TpuRunner), so every search strategy and
cost model works on it.

The kernel model (a Pallas-style tiled kernel): a grid of sequential steps, iterated row-major
(last axis fastest). Each operand is a 2-D array moved in blocks; a block's index depends on a
subset of the grid axes. Per step the core runs the matrix unit (MXU) on the step's block
matmul and the vector unit (VPU) on elementwise work, while the DMA engine brings the next step's
blocks (double buffering). Modelled effects, each with its source or the real runs that show it:

- MXU: `mxu_count` systolic arrays of 128x128 bf16 multiply-accumulate with fp32 accumulation
  (Norrie et al. 2021, Jouppi et al. 2023); a step's matmul of (bm, bk, bn) costs pad8(bm) *
  ceil(bk/128) * ceil(bn/128) / mxu_count cycles plus `weight_load_cycles` per weight tile, times
  `f32_mxu_passes` for f32 operands (dtype-aware); each MXU step also pays `mxu_step_overhead_us`.
- Bytes by dtype and layout: blocks are N-D in the array's physical order (minor_to_major) and
  pad to its memory tile in VMEM and in HBM, so a dim of 5 on sublanes costs 8 rows. The memory
  tile is the layout's first tile: XLA applies tiles repeatedly ("Tiled layout",
  openxla.org/xla/tiled_layout), the first pads and orders the array, the later ones only order
  elements inside it, so bf16 T(8,128)(2,1) and pred T(8,128)(4,1) are 8 x 128 elements like f32
  (2 KiB and 1 KiB tiles; 16 and 32 rows before 2026-11-27: copy.24's tau 0.82 -> 0.87). Vector
  work counts the dtype's vector-register tile instead (hlo.ArrayShape.vreg_tile: a 32-bit
  sublane packs 2 bf16 or 4 pred rows, so 16 x 128 and 32 x 128).
- VPU: `vpu_ops` per output element or `vpu_vreg_ops` per step, one (8, 128) vector op each at
  `vpu_ops_per_cycle`; transcendentals cost `transcendental_cost` (see lowering.py).
- HBM: one core's share of the chip's bandwidth (`hbm_gbps`); a DMA moves whole 4 KiB granules,
  and each contiguous run of a block costs `dma_row_overhead_bytes` more: HBM holds arrays tile by
  tile, so a block spanning whole rows of tiles is one run and a narrow one a run per tile row
  (DMA row contiguity). A run costs more the further it starts from where the last one ended
  (DRAM locality: a nearby run reuses open pages and banks), modelled as (gap / 4 KiB) **
  `dma_gap_exponent` times the run overhead (Block.run_cost; the gap of each step of the walk
  from Block.run_gaps). The real runs show it (bytes moved over the runtime): 4 KiB runs 4 KiB
  apart (fusion.232's 128-lane blocks of 32 rows) at 310-360 GB/s (but see "Not modelled"), 28
  KiB apart (its 8-row ones) 220-310, 124 KiB apart (fusion.261's (256, 128) blocks of a
  4096-lane array) ~190; 16 KiB runs 16 KiB apart (fusion.232, whole lanes, 16 rows) ~360-400.
  The exponent is fixed at 0.25, not fitted: the squared-log-error fit prefers 0, the
  leave-one-kernel-out ranking 0.125-0.25 (chosen on that table, so it is not held out).
- Double-buffered DMA: a block is not fetched again when consecutive steps use the same block
  index (Pallas pipelining docs); several outputs (multi-output fusions) are each written when
  their index changes.
- DMA lookahead across a block's whole window (`overlapped_seconds`): a block moved every p steps
  (an output block accumulated over p contraction steps, and the operands that share its index) is
  fetched into the buffer freed at the start of the previous p-step window, so its DMA overlaps
  all p steps of compute, not only the last; a window lasts max(its steps, all its DMA). (The real
  runs of fusion.261 suggest it: the same output tile takes the same time whether the contraction is
  one step or split in two, 99.0 vs 97.8 us; with one-step lookahead the split was 27% slower.)
- Epilogue once per output block: the fusion's work on a contraction's or reduction's finished
  sum (lowering.epilogue_ids: e.g. the scale-and-subtract of a weight update) runs once per output
  block, not at every contraction step.
- Pipeline fill and drain: the first step's inputs are fetched before compute starts and the last
  output blocks are written after it ends, without overlap.
- Per-step overhead `step_overhead_us` (grid loop and DMA issue), not overlapped.
- Convolution tiles with their spatial shape and halo (lowering.Windowed): an output tile of t rows
  of a window of size r, stride s and dilation d reads (t - 1) * s + (r - 1) * d + 1 input rows,
  so neighbouring input blocks overlap and re-read the halo (in DMA bytes and in the VMEM
  footprint, padded to the memory tile like any block); the step's matmul has the batch times the
  output spatial tile as rows and runs one MXU pass per window position.
- Edge blocks (Block.mean_padded): where a tile does not divide an array dim, the grid's last block
  along it holds only the remainder; its DMA moves only that (padded to the memory tile) and the
  vector work covers only that, while its VMEM buffer is still a whole block. A block's DMA bytes and
  vector-register ops are its average over the blocks of the array. (Pallas "Grids and BlockSpecs",
  docs.jax.dev/en/latest/pallas/grid_blockspec.html: blocks that do not divide the array are
  partial at the edge.) For a convolution input's windowed dim the average is approximate (its
  blocks overlap by the halo, so their count is the output's, not ceil(input / block)).
- VMEM capacity per generation (`vmem_mib`: 16 MiB v3/v4, 128 MiB v5e and the calibrated core):
  double-buffered input and output blocks plus an fp32 accumulator for reductions must fit, else
  the config is an error result (like a compile failure).

HLO kernels (convolutions with their dimension numbers, reductions, copies, elementwise fusions)
reach this model through autotune.backends.tpu.lowering. The "calibrated" preset's constants are
fitted to the real runs of ../shared/tpu_real by autotune.backends.tpu.calibration (a coordinate
search over six global constants, `dma_gap_exponent` fixed at 0.25; fit and leave-one-kernel-out
check in measure/experiments/RESULTS.md).

Leave-one-kernel-out (constants refitted by calibration.calibrate(sweeps=3) without the held-out
kernel; Kendall tau per kernel with >= 10 configs; `autotune evaluate-tiles --real ... --loko`):
fusion.232 0.782, fusion.261 0.867, fusion.209 0.950, fusion.205 0.917, fusion.245 0.818, copy.24
0.867, copy.25 1.000 (before the 8-row tiles and the gap cost: 0.785, 0.850, 0.900, 0.883, 0.816,
0.822, 1.000): short of 0.85 on fusion.232 and .245. The chosen tile is the best one on all 14
kernels (fusion.245 and copy.24 were +1.9% and +2.5%). The preset's constants are calibrate() on
all 14 kernels (sweeps=3). With the exponent at 0.1875 or 0.3125 instead of 0.25, fusion.232's
held-out tau falls to 0.75 (the coordinate search lands elsewhere): its figure moves by +-0.03
with small changes of the constants. The real runs hold no
spatial convolution (their convolutions are 1x1 matmuls), so the halo and window-position effects
are pinned by tests (tests/autotune/backends/test_tpu_conv_halo.py, test_tpu_conv_model.py), not
by real runs.

Not modelled: the XLU's transposes, bank conflicts, HBM read/write turnaround, padding at the
image border (an edge tile reads its clipped halo like an inner one). Nor what slows some
lane-split blocks in the real runs of fusion.232 and .245 (column reductions whose 128-lane block
takes every other (8, 128) tile of HBM): with a per-kernel fit of the constants the emulator's tau
is at most 0.78 on fusion.232 and 0.82 on .245, and their largest errors are all lane-split. A
lane-split block is 1.4-1.7x slower than the model when its most major tile is 9 or more and the
next dim's 7 or less ((26, 6, 4, 1) 106 us, (13, 2, 4, 1) 100, (9, 7, 2, 1) 106, (12, 6, 2, 1)
of .245 21.7) and on time otherwise ((7, 6, 4, 1) 71, (26, 13, 4, 1) 64, (13, 26, 2, 1) 78). The
pair (7, 6, 4, 1) / (26, 6, 4, 1) moves the same bytes and (i0, i1) slabs with the same gaps, the
faster one in more runs (6720 against 6240) and more steps (40 against 10), so no per-byte,
per-run, per-gap, per-slab or per-step cost can separate it. Tried and rejected
(tau on the two kernels did not rise, in-sample or held out): a run cost per (rows x lanes) slab
instead of per contiguous run, a per-loop-iteration VPU cost over the block's major dims, the
step overhead hidden under the DMA, HBM channel/bank imbalance of a block's tiles under modular
interleaving, the reduced dims walked in another order (better on .245, worse on .232), and
learned corrections of the emulator (ridge or boosted trees on DMA-pattern features, held out:
min tau 0.74-0.77).

Example::

    >>> from autotune.backends.tpu.emulator import Block, TiledKernel, emulate, PRESETS
    >>> k = TiledKernel(grid=(4, 4, 8), inputs=(Block("A", (512, 1024), (128, 128), (0, 2)),
    ...                                         Block("B", (1024, 512), (128, 128), (2, 1))),
    ...                 output=Block("C", (512, 512), (128, 128), (0, 1)), mxu=(128, 128, 128), reduction_axes=(2,))
    >>> t = emulate(k, PRESETS["v4"]); t.seconds > 0
    True
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from autotune.errors import AutotuneError


@dataclass(frozen=True)
class TpuCoreConfig:
    """One TPU core. `hbm_gbps` is one core's share of the chip's HBM bandwidth; `vmem_mib` the
    generation's VMEM per core; `dma_row_overhead_bytes` what each contiguous run of a DMA costs
    beyond its bytes, scaled by (gap / 4 KiB) ** `dma_gap_exponent` with the bytes it skips from the
    last run (0: a flat cost per run); `f32_mxu_passes` the bf16 passes an f32 matmul takes on the MXU."""
    name: str
    mxu_count: int
    clock_ghz: float
    hbm_gbps: float
    vmem_mib: float = 16.0
    vpu_ops_per_cycle: float = 1.0
    step_overhead_us: float = 0.35
    dma_granule_bytes: int = 4096
    dma_row_overhead_bytes: int = 64
    weight_load_cycles: int = 128
    f32_mxu_passes: int = 3
    transcendental_cost: float = 4.0
    mxu_step_overhead_us: float = 0.0
    dma_gap_exponent: float = 0.0


PRESETS = {
    # public figures: chip HBM bandwidth over the TensorCores sharing it, VMEM per core
    "v3": TpuCoreConfig("v3", mxu_count=2, clock_ghz=0.94, hbm_gbps=450.0, vmem_mib=16.0),
    "v4": TpuCoreConfig("v4", mxu_count=4, clock_ghz=1.05, hbm_gbps=600.0, vmem_mib=16.0),
    "v5e": TpuCoreConfig("v5e", mxu_count=4, clock_ghz=1.5, hbm_gbps=819.0, vmem_mib=128.0),
    # v4's MXUs and clock, the other constants fitted to the real runs of ../shared/tpu_real by
    # autotune.backends.tpu.calibration.calibrate (the fit: measure/experiments/RESULTS.md)
    "calibrated": TpuCoreConfig("calibrated", mxu_count=4, clock_ghz=1.05, hbm_gbps=437.0, vmem_mib=128.0,
                                vpu_ops_per_cycle=1.0, step_overhead_us=0.1627, dma_row_overhead_bytes=882,
                                f32_mxu_passes=3, mxu_step_overhead_us=0.05, dma_gap_exponent=0.25),
}


class TileError(AutotuneError, ValueError):
    """A tile config that cannot run: blocks that do not fit VMEM, or a malformed kernel."""


@dataclass(frozen=True)
class Block:
    """An operand: an array of physical `shape` (major to minor), moved in blocks of `block`,
    whose block index is a function of the grid axes `axes` (one per dim, or None for a fixed 0).
    `tile`: the stored memory tile of the minor dims in elements ((8, 128) for f32, (16, 128) for
    bf16, (1024,) for a rank-1 array); HBM holds the array tile by tile, row-major over tiles."""
    name: str
    shape: tuple[int, ...]
    block: tuple[int, ...]
    axes: tuple[int | None, ...]
    itemsize: int = 2  # bf16
    tile: tuple[int, ...] = (8, 128)

    def _tile(self) -> tuple[int, ...]:
        t = self.tile[-len(self.shape):] if self.shape else ()
        return (1,) * (len(self.shape) - len(t)) + tuple(t)

    def padded(self) -> tuple[int, ...]:
        return tuple(-(-min(b, s) // t) * t for b, s, t in zip(self.block, self.shape, self._tile()))

    def vmem_bytes(self) -> int:
        return math.prod(self.padded()) * self.itemsize

    def mean_padded(self) -> tuple[float, ...]:
        """The padded block extent per dim averaged over the blocks of the array: where the block
        does not divide the dim, the last block along it holds only the remainder (padded to the
        memory tile), and its DMA and its vector work cover only that (edge blocks)."""
        out = []
        for b, s, t in zip(self.block, self.shape, self._tile()):
            b = min(b, s)
            n = -(-s // b)
            last = s - (n - 1) * b
            out.append(((n - 1) * (-(-b // t) * t) + -(-last // t) * t) / n)
        return tuple(out)

    def moved_bytes(self) -> float:
        """Bytes one block's DMA moves on average (edge blocks included), padded to memory tiles."""
        return math.prod(self.mean_padded()) * self.itemsize

    def runs(self) -> int:
        """Contiguous runs of HBM one block's DMA reads: whole tiles, merged along the minor tile
        dims as long as the block spans them completely."""
        t = self._tile()
        tb = [-(-min(b, s) // x) for b, s, x in zip(self.block, self.shape, t)]
        ts = [-(-s // x) for s, x in zip(self.shape, t)]
        partial = [i for i in range(len(ts)) if tb[i] < ts[i]]
        return math.prod(tb[:partial[-1]]) if partial else 1

    def run_gaps(self) -> list[tuple[int, float]]:
        """(count, bytes) of the gaps between consecutive contiguous runs of one block's DMA, walked
        row-major: moving to the next run along dim j skips that dim's stride less what the block
        covers of the dims inside it."""
        t = self._tile()
        tb = [-(-min(b, s) // x) for b, s, x in zip(self.block, self.shape, t)]
        ts = [-(-s // x) for s, x in zip(self.shape, t)]
        partial = [i for i in range(len(ts)) if tb[i] < ts[i]]
        if not partial:
            return []
        p = partial[-1]
        tile_bytes = math.prod(t) * self.itemsize
        stride = [math.prod(ts[j + 1:]) for j in range(len(ts))]
        run = tb[p] * stride[p]
        out = []
        for j in range(p):
            if tb[j] < 2:
                continue
            back = sum((tb[m] - 1) * stride[m] for m in range(j + 1, p))
            out.append(((tb[j] - 1) * math.prod(tb[:j]), (stride[j] - back - run) * tile_bytes))
        return out

    def run_cost(self, gap_exponent: float = 0.0) -> float:
        """Contiguous runs weighted by how far each jumps from the last: (gap / 4 KiB) ** e per run
        (e = 0: every run costs the same)."""
        return _run_cost(self, gap_exponent)

    def _run_cost(self, gap_exponent: float) -> float:
        n = self.runs()
        if gap_exponent == 0.0 or n <= 1:
            return float(n)
        gaps = self.run_gaps()
        cnt = sum(c for c, _ in gaps)
        if not cnt:
            return float(n)
        mean = sum(c * max(gap, 4096.0) ** gap_exponent for c, gap in gaps) / cnt / 4096.0 ** gap_exponent
        return n * mean

    def dma_bytes(self, g: int, overhead: int, gap_exponent: float = 0.0) -> float:
        base = math.ceil(self.moved_bytes() / g) * g
        return base + self.run_cost(gap_exponent) * overhead


@functools.lru_cache(maxsize=1 << 16)
def _run_cost(b: Block, gap_exponent: float) -> float:
    return b._run_cost(gap_exponent)


@dataclass(frozen=True)
class TiledKernel:
    """grid: steps per axis; mxu: the (bm, bk, bn) matmul each step runs, or None, in `mxu_passes`
    passes (the bf16 passes of its dtype times a convolution's window positions); vpu_ops: elementwise ops per output element per step; vpu_vreg_ops: further
    vector-register ops per step; reduction_axes: axes over which the output block accumulates
    (it is written when its index changes); extra_outputs: further outputs of a multi-output fusion;
    epilogue_vreg_ops: vector-register ops on the finished sum (a fusion's work after its contraction
    or reduction), once per output block."""
    grid: tuple[int, ...]
    inputs: tuple[Block, ...]
    output: Block
    mxu: tuple[int, int, int] | None = None
    vpu_ops: float = 0.0
    reduction_axes: tuple[int, ...] = ()
    name: str = "kernel"
    flops: float = 0.0
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    extra_outputs: tuple[Block, ...] = ()
    vpu_vreg_ops: float = 0.0
    mxu_passes: int = 1
    epilogue_vreg_ops: float = 0.0

    @property
    def steps(self) -> int:
        return math.prod(self.grid)

    @property
    def outputs(self) -> tuple[Block, ...]:
        return (self.output, *self.extra_outputs)


@dataclass(frozen=True)
class TpuTiming:
    seconds: float
    compute_s: float
    dma_s: float
    vmem_bytes: int
    steps: int


def fetch_period(axes: tuple[int | None, ...], grid: tuple[int, ...]) -> int:
    """Steps between fetches of a block whose index depends on these grid axes (row-major)."""
    used = [a for a in axes if a is not None and grid[a] > 1]
    if not used:
        return math.prod(grid)  # fetched once
    last = max(used)
    return math.prod(grid[last + 1:])


def vmem_usage(k: TiledKernel) -> int:
    acc = 0
    if k.reduction_axes:
        acc = math.prod(k.output.padded()) * 4
    return 2 * (sum(b.vmem_bytes() for b in k.inputs) + sum(b.vmem_bytes() for b in k.outputs)) + acc


def step_compute_seconds(k: TiledKernel, core: TpuCoreConfig) -> float:
    cycles = 0.0
    if k.mxu is not None:
        bm, bk, bn = k.mxu
        tiles = math.ceil(bk / 128) * math.ceil(bn / 128) * k.mxu_passes
        cycles += (-(-bm // 8) * 8) * tiles / core.mxu_count + core.weight_load_cycles * tiles / core.mxu_count
    if k.vpu_ops:
        cycles += k.vpu_ops * math.prod(k.output.padded()) / (8 * 128) / core.vpu_ops_per_cycle
    cycles += k.vpu_vreg_ops / core.vpu_ops_per_cycle
    # the epilogue runs once per output block: spread over the steps that accumulate it
    cycles += k.epilogue_vreg_ops / core.vpu_ops_per_cycle / fetch_period(k.output.axes, k.grid)
    return cycles / (core.clock_ghz * 1e9)


def overlapped_seconds(step_compute: float, transfers: list[tuple[int, float]], steps: int) -> tuple[float, float]:
    """(seconds, DMA seconds) of `steps` grid steps of `step_compute` each, with the transfers
    (period in steps, seconds) overlapped with compute. A block moved every p steps goes into the
    buffer its predecessor-but-one used, free from the start of the previous p-step window, so its
    DMA overlaps that whole window (not only its last step), and the DMA engine works through all
    of the window's transfers meanwhile. Periods nest (each divides the next): a window of p steps
    lasts the longer of its sub-windows and its DMA. With every period 1 this is the sum over steps
    of max(compute, DMA)."""
    window, dma, p_prev = step_compute, 0.0, 1
    for p in sorted({p for p, _ in transfers}):
        r = p // p_prev
        dma = r * dma + sum(t for q, t in transfers if q == p)
        window = max(r * window, dma)
        p_prev = p
    return steps // p_prev * window, steps // p_prev * dma


def emulate(k: TiledKernel, core: TpuCoreConfig) -> TpuTiming:
    """The runtime of kernel k on the core, or TileError when it cannot run."""
    if any(g < 1 for g in k.grid):
        raise TileError(f"{k.name}: grid {k.grid} has an empty axis")
    for b in (*k.inputs, *k.outputs):
        if any(x < 1 for x in b.block):
            raise TileError(f"{k.name}: block of {b.name} is empty: {b.block}")
    vmem = vmem_usage(k)
    cap = int(core.vmem_mib * (1 << 20))
    if vmem > cap:
        raise TileError(f"{k.name}: tiles need {vmem / (1 << 20):.1f} MiB of VMEM with double buffering; the "
                        f"{core.name} core has {core.vmem_mib:g} MiB")
    n = k.steps
    bw = core.hbm_gbps * 1e9
    g, ov, ge = core.dma_granule_bytes, core.dma_row_overhead_bytes, core.dma_gap_exponent
    c = step_compute_seconds(k, core)
    # (period, seconds) for every transfer: inputs fetched, and the output written back
    transfers = [(fetch_period(b.axes, k.grid), b.dma_bytes(g, ov, ge) / bw) for b in k.inputs]
    transfers += [(fetch_period(b.axes, k.grid), b.dma_bytes(g, ov, ge) / bw) for b in k.outputs]
    total, dma_total = overlapped_seconds(c, transfers, n)
    fill = sum(b.dma_bytes(g, ov, ge) for b in k.inputs) / bw  # first inputs, before any compute
    drain = sum(b.dma_bytes(g, ov, ge) for b in k.outputs) / bw  # last output blocks, after it
    overhead = core.step_overhead_us + (core.mxu_step_overhead_us if k.mxu is not None else 0.0)
    total += fill + drain + n * overhead * 1e-6
    return TpuTiming(total, c * n, dma_total, vmem, n)
