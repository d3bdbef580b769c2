"""The window sketch: a direct convolution, ``sum over c and a window of In[.., c, .., p*s + r*d, ..] *
Wt[k, c, r, ..]`` (`match_window`; In may be a zero-padding stage). The weights are packed in
blocks of KB output channels; a register tile of KB channels x PH x PW output pixels sized from
the target's vector registers accumulates on the stack over the window and the channels
(channel blocks of [cb] outside it). Either the channels are vectorised (each input pixel
broadcast, the input packed in channel blocks along the reduction read innermost, its padding
inlined into that pack: one pass) or, at unit stride with fewer output channels than a vector,
the pixels (each weight broadcast, the input read in contiguous runs). The blocked or padded input is made once or per thread; one of
the batch, channel-block or pixel-row loops runs over the threads (rows in one chunk each).
An elementwise epilogue (conv + bias + relu) is fused as in gemm's "tile": the output is
blocked into those register tiles and the convolution computed at each; the input made per
thread is then computed at the output's loop over threads, over what the convolution stages
inside it read."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from autotune.schedule import Schedule
from autotune.space import ChoiceKnob, Config, Knob
from autotune.codegen.options import CodegenOptions
from autotune.space import fit

from .analysis import Window
from .program import Program
from .sketch import Sketch
from .vectors import lanes, vector_target


class WindowSketch(Sketch):
    """A direct convolution (`Window`), its elementwise epilogue fused if `epilogue`."""

    name = "window"

    def __init__(self, p: Program, window: Window, epilogue: bool) -> None:
        self.window = window
        self.epilogue = epilogue
        super().__init__(p)

    def prune_rule(self) -> Callable[[Mapping[str, Any]], str | None]:
        """`prune`."""
        return self.prune

    def _extent(self, axis: str) -> int:
        """The extent of an axis of the convolution stage."""
        assert self.window is not None
        t = self.p.tensors.get(self.window.stage, self.p.output)
        return {a.name: a.extent for a in list(t.axes) + list(t.reduce_axes)}[axis]

    def _out_axes(self) -> dict[str, str]:
        """The convolution stage's spatial axis names -> the output's (the same, without an epilogue)."""
        assert self.window is not None
        t = self.p.tensors.get(self.window.stage, self.p.output)
        return {a.name: b.name for a, b in zip(t.axes, self.p.output.axes)}

    def window_layouts(self) -> list[str]:
        """Where the input of a direct convolution is made: blocked by channels or plain, once
        ("root") or per thread (at the output's loop over threads; with a fused epilogue over what
        the convolution, computed inside that loop, reads)."""
        w = self.window
        assert w is not None
        return ["blocked_root", "blocked_thread", "plain"] + (["plain_thread"] if w.input in self.p.stages else [])

    def window_tiles(self) -> list[str]:
        """Register tiles "KBxPHxPW" of a direct convolution: KB output channels (whole vectors,
        up to four) x PH x PW output pixels (the last two pixel axes; PW a power of two or a
        divisor of its extent up to 28), whose accumulators, KB/lanes weight vectors and a
        broadcast pixel fit the vector registers; tiles with under half the accumulators of the
        largest are left out. The largest first."""
        w = self.window
        assert w is not None
        lane = lanes(self.p.dtype)
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
        lane = lanes(self.p.dtype)
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
        if self.p.threads <= 1:
            return ["none"]
        cands = [a for a in w.batch if self._extent(a) > 1][:1]
        if -(-self._extent(w.k) // lanes(self.p.dtype)) > 1:
            cands.append(w.k)
        rows = w.pixels[-2] if len(w.pixels) > 1 else w.pixels[-1]
        if self._extent(rows) > 1:
            cands.append(rows)
        return cands or ["none"]

    def knobs(self) -> list[Knob]:
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

    def presets(self) -> list[dict[str, Any]]:
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

    def prune(self, cfg: Mapping[str, Any]) -> str | None:
        """Pixel-vectorised tiles read the input along its last dim: a channel-blocked input would
        make those reads strided."""
        if str(cfg.get("tile", "")).startswith("p") and str(cfg.get("input", "")).startswith("blocked"):
            return "a pixel-vectorised tile reads the input unblocked"
        return None

    def _window_layouts(self, s: Schedule, cfg: Config, kb: int, cb: int) -> str | None:
        """Pack the weights in blocks of kb output channels (the vectorised axis) and, unless
        [input] is "plain", the input in blocks of cb channels along its channel dim, so the
        innermost reduction reads it contiguously; a zero-padding stage is inlined into that pack
        (padding and layout in one pass). Returns the blocked input's name."""
        w = self.window
        assert w is not None
        s.pack(w.weight, w.weight_k_dim, kb, self.fresh_tensor(s, f"{w.weight}_p"))
        if cfg["input"].startswith("plain"):
            return None
        xb = s.pack(w.input, w.input_c_dim, cb, self.fresh_tensor(s, f"{w.input}_b"))
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
        out, pix, k, par = self.p.output.name, [ax[p] for p in w.pixels], ax[w.k], ax.get(par, par)
        ko = f"{k}_o"
        rows = f"{pix[-2]}_o" if len(pix) > 1 else None
        blocks = [ko, rows] if cfg["outer"] == "channels" else [rows, ko]
        loops = [ax[b] for b in w.batch] + pix[:-2] + [b for b in blocks if b] + [f"{pix[-1]}_o"]
        if par == "none":
            return loops, loops[-1]
        lead = f"{par}_o" if par in (k, pix[-2] if len(pix) > 1 else pix[-1]) else par
        if lead != ko and lead != par:  # a pixel block loop: one contiguous chunk per thread
            n = s.stages[out].extents()[lead]
            t, m = s.split(out, lead, -(-n // self.p.threads), f"{par}_t", f"{par}_m")
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

    def _input_per_thread(self, s: Schedule, cfg: Config, xb: str | None, par: str, thread_loop: str) -> None:
        """With [input] "..._thread", compute the blocked (or padded) input at the output's loop
        over threads, unless the threads split the output channels (each would make all of it)."""
        w = self.window
        per_thread = {"blocked_thread": xb, "plain_thread": w.input}.get(cfg["input"])
        if per_thread is not None and par not in ("none", w.k):
            s.compute_at(per_thread, self.p.output.name, thread_loop)

    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """A direct convolution: weights packed along the output channels, an accumulator tile of
        KB channels x PH x PW pixels, the channels vectorised and the pixels unrolled (or, for "p"
        tiles, the pixels vectorised and the channels unrolled), the reduction over the window and
        the channels (in [red_order]; channel blocks of [cb] outside the tile), the input blocked
        or not, made once or per thread ([input]), one loop over threads ([parallel]). An
        elementwise epilogue is the output split into those tiles, with the convolution computed
        at each over the whole reduction (its own accumulator tile): the output written once."""
        w = self.window
        assert w is not None
        out = self.p.output.name
        kb = min(self._window_tile(cfg["tile"])[0], self._extent(w.k))
        xb = self._window_layouts(s, cfg, kb, min(cfg["cb"], self._extent(w.c)))
        tile = self._window_tile_loops(s, out, cfg, self._out_axes())
        par = cfg["parallel"] if self.p.threads > 1 else "none"
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
            self._input_per_thread(s, cfg, xb, par, loops[0])
        else:
            red_out, red = self._window_reduction(s, cfg)
            loops, at = self._window_blocks(s, cfg, par)
            s.reorder(out, *loops[:-1], *red_out, loops[-1], *red, *tile)
            s.cache_write(out, at)
            self._unroll_vectorize(s, out, tile)
            self._input_per_thread(s, cfg, xb, par, loops[0])
        if par != "none":
            s.parallel(out, loops[0])
        return CodegenOptions()
