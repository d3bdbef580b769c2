"""Features of TPU tile configs: the 24 per-config numbers (TpuGraphs' config_feat width), the
kernel's size, and the roofline estimate an analytical model uses. Also its op graph.

config_feat: log2 of the tile (bm, bn, bk) and of its padded size, log2 grid dims (4), log2
steps, VMEM fraction, log2 bytes of the A/B/C blocks, log2 total DMA bytes with re-fetches,
log2 flops, padding waste, log2 arithmetic intensity, log2 fetch periods of A and B,
elementwise ops, row reduction, window reuse.
Kernel part: log2 of B, M, N, K, and log2 of the roofline compute and memory seconds.
Relative part (scale-free): log2 of the padded MXU time, the granule-rounded DMA time and the
per-step overhead over all steps, each over the roofline estimate; log2 of per-step compute over
per-step DMA; log2 of the overlapped step time over the roofline estimate.
"""
from __future__ import annotations

import math

import numpy as np

from autotune.backends.tpu.emulator import PRESETS, TiledKernel, fetch_period, step_compute_seconds, vmem_usage
from autotune.cost_model.graph import NODE_FEATS, OPCODE, ProgramGraph

TPU_FEATURE_VERSION = 1  # of tpu_features; bump it when the columns change
CONFIG_FEAT = 24
ROOFLINE_COLS = (28, 29)  # log2 compute seconds, log2 memory seconds
STEPS_COL = 10            # log2 grid steps
CORE = PRESETS["v4"]


def _l2(x: float) -> float:
    return math.log2(max(x, 0.0) + 1.0)


def roofline(k: TiledKernel) -> tuple[float, float]:
    """(compute s, memory s): FLOPs over peak and bytes over bandwidth, with re-fetches of tiles
    but no padding, granularity or pipeline detail (what a compiler's simple model does)."""
    peak = CORE.mxu_count * 128 * 128 * 2 * CORE.clock_ghz * 1e9
    n = k.steps
    mem = 0.0
    for b in (*k.inputs, k.output):
        fetches = n // fetch_period(b.axes, k.grid)
        mem += fetches * b.block[0] * b.block[1] * b.itemsize
    return k.flops / peak, mem / (CORE.hbm_gbps * 1e9)


def tpu_features(task, cfg) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The feature vector of a tile config (see the module docstring)."""
    from autotune.backends.tpu.templates import kernel_ops, tiled_kernel
    k = tiled_kernel(task, cfg)
    s = task.shape_dict
    bm, bk, bn = k.mxu or (1, 1, 1)
    pm, pk, pn = -(-bm // 8) * 8, -(-bk // 128) * 128, -(-bn // 128) * 128
    a, b, c = k.inputs[0], k.inputs[1], k.output
    n = k.steps
    dma = sum(n // fetch_period(x.axes, k.grid) * x.block[0] * x.block[1] * x.itemsize for x in (a, b, c))
    grid = (list(k.grid) + [1, 1, 1, 1])[:4]
    waste = (pm * pk * pn) / max(bm * bk * bn, 1)
    cf = [_l2(bm), _l2(bn), _l2(bk), _l2(pm), _l2(pn), _l2(pk), *[_l2(g) for g in grid], _l2(n),
          vmem_usage(k) / (CORE.vmem_mib * (1 << 20)), _l2(a.vmem_bytes()), _l2(b.vmem_bytes()), _l2(c.vmem_bytes()),
          _l2(dma), _l2(k.flops), waste, math.log2(k.flops / max(dma, 1) + 1), _l2(fetch_period(a.axes, k.grid)),
          _l2(fetch_period(b.axes, k.grid)), float(s.get("ew", 0)),
          float(any(op.kind == "reduce" for op in kernel_ops(task))),
          float(a.shape[0] and (a.block[0] < bm))]
    comp, mem = roofline(k)
    kern = [_l2(s.get("B", 1)), _l2(s.get("M", a.shape[0])), _l2(s.get("N", c.shape[1])), _l2(a.shape[1]),
            math.log2(comp), math.log2(mem)]
    # per-step ingredients, relative to the roofline (scale-free, so they transfer across kernel sizes)
    step_c = step_compute_seconds(k, CORE)
    g, ov = CORE.dma_granule_bytes, CORE.dma_row_overhead_bytes
    step_d = sum((n // fetch_period(x.axes, k.grid)) * x.dma_bytes(g, ov) for x in (a, b, c)) / n / (CORE.hbm_gbps * 1e9)
    over = CORE.step_overhead_us * 1e-6
    best = max(comp, mem)
    rel = [math.log2(n * step_c / best), math.log2(n * step_d / best), math.log2(n * over / best),
           math.log2(step_c / max(step_d, 1e-12)), math.log2(n * max(step_c, step_d) / best)]
    return np.asarray(cf + kern + rel, np.float32)


def tpu_graph(task, cfg) -> ProgramGraph:  # type: ignore[no-untyped-def]
    """The kernel's op graph (nodes: ops; edges: data flow) with the config features joined."""
    from autotune.backends.tpu.templates import kernel_ops
    ops = kernel_ops(task)
    codes, feats, edges = [], [], []
    for i, op in enumerate(ops):
        codes.append(OPCODE.get(op.kind, OPCODE["other"]))
        dims = (list(op.shape) + [1, 1, 1])[:3]
        elems = math.prod(op.shape)
        f = [*(_l2(d) for d in dims), _l2(elems), _l2(elems * 2), float(op.kind == "parameter"),
             float(op.kind == "output"), float(len(op.inputs))]
        feats.append((f + [0.0] * NODE_FEATS)[:NODE_FEATS])
        edges += [(j, i) for j in op.inputs]
    return ProgramGraph(np.asarray(codes, np.int64), np.asarray(feats, np.float32),
                        np.asarray(edges, np.int64).reshape(-1, 2), tpu_features(task, cfg))


# ---- kernels as XLA describes them (autotune.backends.tpu.hlo) ---------------------------------

HLO_ROOFLINE_COLS = (36, 37)  # log2 compute seconds, log2 memory seconds
HLO_STEPS_COL = 24            # log2 grid steps
HLO_FEAT = 38


def hlo_features(kernel, cfg, space=None) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Features of an HLO kernel's tile config: the dataset's 24 config_feat (log2(1 + x)), then
    counts of the lowered kernel (no emulator constants): log2 steps, log2 of 4 grid dims, log2
    padded DMA bytes with re-fetches, log2 contiguous DMA runs, VMEM fraction, log2 vector-register
    ops per step and over all steps, log2 MXU weight tiles, whether it has a matmul, and the roofline
    compute and memory seconds (HLO_ROOFLINE_COLS) an analytical model reads."""
    from autotune.backends.tpu.lowering import lower
    k = lower(kernel, cfg, CORE, space)
    n = k.steps
    blocks = (*k.inputs, *k.outputs)
    dma = sum(n // fetch_period(b.axes, k.grid) * b.vmem_bytes() for b in blocks)
    runs = sum(n // fetch_period(b.axes, k.grid) * b.runs() for b in blocks)
    raw = sum(n // fetch_period(b.axes, k.grid) * math.prod(min(x, s) for x, s in zip(b.block, b.shape)) * b.itemsize
              for b in blocks)
    grid = (sorted(k.grid, reverse=True) + [1, 1, 1, 1])[:4]
    vregs = k.vpu_vreg_ops + k.epilogue_vreg_ops / fetch_period(k.output.axes, k.grid)  # the epilogue, per step
    tiles = 0.0
    if k.mxu is not None:
        bm, bk, bn = k.mxu
        tiles = math.ceil(bk / 128) * math.ceil(bn / 128) * n
    peak = CORE.mxu_count * 128 * 128 * 2 * CORE.clock_ghz * 1e9
    comp = max(k.flops / peak, 1e-12)
    mem = max(raw / (CORE.hbm_gbps * 1e9), 1e-12)
    f = [_l2(x) for x in cfg.config_feat()] + [
        _l2(n), *(_l2(g) for g in grid), _l2(dma), _l2(runs), vmem_usage(k) / (128 * (1 << 20)),
        _l2(vregs), _l2(vregs * n), _l2(tiles), float(k.mxu is not None), math.log2(comp),
        math.log2(mem)]
    return np.asarray(f, np.float32)
