"""The gemm sketch: a stage computing ``sum_k A[.., i, .., k ..] * B[.., k, .., j ..]`` (one
reduction over a product of two inputs, in any layout), alone or feeding an elementwise epilogue
(dense + bias + relu). It gets the BLIS blocking of templates/gemm.py: the operands packed into
MR-tall and NR-wide panels, an MR x NR accumulator tile on the stack (cache_write), k blocks, row
blocks, column blocks over the threads. An epilogue is fused: the GEMM stage is computed at the
epilogue's register tile (the accumulator tile itself, [fuse] = "tile") or at its cache block
("block"), so the output is written once, after the elementwise ops."""
from __future__ import annotations

from typing import Any

from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, Knob
from autotune.codegen.options import CodegenOptions
from autotune.space import fit

from .analysis import Gemm
from .program import Program
from .sketch import Sketch
from .vectors import lanes, vector_target


class GemmSketch(Sketch):
    """The BLIS blocking of a GEMM stage (`Gemm`), its epilogue fused if `epilogue`."""

    name = "gemm"
    nearest = {"kc": 256, "mc_panels": 16}

    def __init__(self, p: Program, gemm: Gemm, epilogue: bool) -> None:
        self.gemm = gemm
        self.epilogue = epilogue
        super().__init__(p)

    def register_tiles(self) -> list[str]:
        """The MR x NR accumulator tiles ("6x48") that fit the vector registers (accumulators,
        one row of B vectors and a broadcast of A), the larger ones first; tiles too small to
        hide the FMA latency are left out unless the matrix is that small."""
        g = self.gemm
        assert g is not None
        lane = lanes(self.p.dtype)
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

    def knobs(self) -> list[Knob]:
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
        if self.p.threads > 1:
            knobs.append(ChoiceKnob("parallel", [True, False]))
        return knobs

    def presets(self) -> list[dict[str, Any]]:
        """The largest register tiles with k blocks of 256 and 512 (and, with an epilogue, the
        first two fused at the cache block too)."""
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

    def _gemm_tiles(self, cfg: Config) -> tuple[int, int, int, int, int]:
        """(mr, nr, kc, mc, nc) of a config, cut to the matrix; NC gives each worker jc_blocks blocks."""
        g = self.gemm
        assert g is not None
        mr, nr = (int(x) for x in cfg["tile"].split("x"))
        mr, nr, kc = min(mr, g.M), min(nr, g.N), min(cfg["kc"], g.K)
        mc = min(cfg["mc_panels"] * mr, -(-g.M // mr) * mr)
        panels = -(-g.N // nr)
        nc = -(-panels // min(panels, cfg["jc_blocks"] * self.workers(cfg))) * nr
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
            p = s.pack(t, d, f, self.fresh_tensor(s, f"{t}_p"))
            if dk == s.tensors[t].ndim - 1:  # the source is contiguous along k: the panel's rows innermost
                s.reorder(p, "p_i", f"d{dk}")
            names.append(p)
        return names[0], names[1]  # type: ignore[return-value]

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

    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        g = self.gemm
        assert g is not None
        mr, nr, kc, mc, nc = self._gemm_tiles(cfg)
        ap, bp = self._pack_operands(s, cfg, mr, nr)
        parallel = self.workers(cfg) > 1
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
        out = self.p.output.name
        e_axes = [a.name for a in self.p.output.axes]
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
