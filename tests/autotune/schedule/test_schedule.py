"""Schedule primitives: validation (ScheduleError naming the step and axis), atomicity, trace replay,
deterministic lowering, and a fuzz test: random primitive sequences give ScheduleError or a kernel
that agrees with NumPy, never a wrong kernel or a Numba error."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from autotune.codegen import build, generate_source
from autotune.errors import DefinitionError, ScheduleError
from autotune.ir import te
from autotune.schedule import Schedule
from autotune.schedule.lower import lower
from autotune.schedule.schedule import MAX_UNROLL
from autotune.schedule.steps import Step
from tests.helpers import GuardedBuffers, assert_close, blis_like


def matmul(M=37, N=29, K=23, dtype="float32"):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    return te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


def dense_relu(M=9, N=13, K=7):
    """D = X @ W (reduction stage) -> Y = relu(D + bias) (elementwise epilogue)."""
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis(K, name="k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="D")
    return te.compute((M, N), lambda i, j: te.max(D[i, j] + bias[j], 0.0), name="Y")


def two_consumers(n=8):
    """P feeds both Q and Y; Q feeds Y."""
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] * 2.0, name="P")
    Q = te.compute((n,), lambda i: P[i] + 1.0, name="Q")
    return te.compute((n,), lambda i: P[i] * Q[i], name="Y")


def raises(step: str, axis: str | None, *more: str):
    """pytest.raises for a ScheduleError whose message starts with the step (and axis)."""
    head = f"{step}(axis '{axis}')" if axis is not None else step
    import re
    pattern = "^" + re.escape(head) + ".*" + ".*".join(re.escape(m) for m in more)
    return pytest.raises(ScheduleError, match=pattern)


def same_source(s1: Schedule, s2: Schedule) -> bool:
    return generate_source(s1) == generate_source(s2)


# ---------------------------------------------------------------------------------------------
# validation of each primitive
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor", [0, -4, True, 2.5, 1 << 20])
def test_split_bad_factor(factor):
    s = Schedule(matmul())
    with raises("split", "i", "factor"):
        s.split("C", "i", factor)
    assert s.trace == []


def test_unknown_stage_and_axis():
    s = Schedule(matmul())
    with raises("split", None, "no stage named 'D'", "C"):
        s.split("D", "i", 4)
    with raises("split", "x", "stage 'C' has no loop 'x'", "['i', 'j', 'k']"):
        s.split("C", "x", 4)
    s.split("C", "i", 4)
    with raises("split", "i", "has no loop 'i'"):  # i is no longer a leaf
        s.split("C", "i", 2)
    for op, call in [("unroll", lambda: s.unroll("C", "q")), ("vectorize", lambda: s.vectorize("C", "q")),
                     ("parallel", lambda: s.parallel("C", "q")), ("cache_write", lambda: s.cache_write("C", "q")),
                     ("fuse", lambda: s.fuse("C", "q", "j")), ("reorder", lambda: s.reorder("C", "j", "q"))]:
        with raises(op, "q", "no loop 'q'"):
            call()


def test_split_names():
    s = Schedule(matmul())
    with raises("split", "i", "outer and inner names must differ"):
        s.split("C", "i", 4, "a", "a")
    with raises("split", "j", "already has an axis named 'j'"):
        s.split("C", "i", 4, "j", "ii")
    with raises("split", None, "identifier", "'x; import os'"):
        s.split("C", "i", 4, "x; import os", "ii")
    assert s.trace == []


def test_fuse_rules():
    s = Schedule(matmul())
    with raises("fuse", "k", "'i' must directly enclose 'k'"):
        s.fuse("C", "i", "k")
    with raises("fuse", "i", "must directly enclose"):
        s.fuse("C", "j", "i")
    with raises("fuse", "k", "cannot fuse a spatial loop with a reduction loop"):
        s.fuse("C", "j", "k")
    s.vectorize("C", "j")
    with raises("fuse", "j", "marked vectorize"):
        s.fuse("C", "i", "j")
    with raises("fuse", "k", "must directly enclose"):
        s.fuse("C", "k", "k")


def test_reorder_rules():
    s = Schedule(matmul())
    with raises("reorder", None, "axes repeat", "['i', 'i']"):
        s.reorder("C", "i", "i")
    s.reorder("C", "k", "i")
    assert s.stages["C"].order == ["k", "j", "i"]


def test_unroll_rules():
    s = Schedule(matmul(M=100))
    with raises("unroll", "i", "extent 100 is too large", str(MAX_UNROLL)):
        s.unroll("C", "i")
    s.split("C", "i", 8)
    s.unroll("C", "i_i")
    with raises("unroll", "i_i", "already marked unroll"):
        s.unroll("C", "i_i")
    with raises("split", "i_i", "already marked unroll"):
        s.split("C", "i_i", 2)


def test_vectorize_rules():
    s = Schedule(matmul())
    with raises("vectorize", "k", "only a spatial loop"):
        s.vectorize("C", "k")
    # vectorizing a loop that is not innermost is caught when lowering, still as a ScheduleError
    s.vectorize("C", "i")
    with raises("vectorize", "i", "innermost"):
        lower(s)


def test_parallel_rules():
    out = dense_relu()
    s = Schedule(out)
    with raises("parallel", "i", "only the output stage 'Y'"):
        s.parallel("D", "i")
    with raises("parallel", "k", "only the output stage"):
        s.parallel("D", "k")
    s.parallel("Y", "i")
    with raises("parallel", "j", "already has a parallel loop"):
        s.parallel("Y", "j")
    with raises("parallel", "i", "already has a parallel loop"):
        s.parallel("Y", "i")

    s = Schedule(matmul())
    with raises("parallel", "k", "reduction loop cannot run in parallel"):
        s.parallel("C", "k")
    s.parallel("C", "j")  # not outermost: caught when lowering
    with raises("parallel", "j", "outermost"):
        lower(s)
    s = Schedule(matmul())
    s.split("C", "i", 5)
    s.parallel("C", "i_i")
    s.reorder("C", "i_i", "i_o")  # the inner part of a split, outermost: the tail clamp moves to i_o
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (37, 23)).astype(np.float32)
    b = rng.uniform(-1, 1, (23, 29)).astype(np.float32)
    assert_close(build(s, threads=2)(a, b), a @ b, "float32", 23)


def test_cache_write_rules():
    s = Schedule(matmul())
    with raises("cache_write", "k", "no loops inside it"):
        s.cache_write("C", "k")
    s.cache_write("C", "i")
    with raises("cache_write", "j", "already has a cache_write at 'i'"):
        s.cache_write("C", "j")


def test_a_cache_write_tile_with_gaps_in_an_axis_is_refused():
    """i = i_o*2 + i_i_o + i_i_i with i_o inside the tile at i_i_o: the tile holds every other row,
    and writing back its whole box overwrote the rows the other i_i_o computed (max error 1.29)."""
    s = Schedule(dense_relu(M=9, N=13, K=7))
    s.tile("D", "k", "i", 1, 2)
    s.tile("D", "i_i", "k_o", 1, 1)
    s.cache_write("D", "i_i_o")
    with raises("cache_write", "i_i_o", "cover axis 'i' with gaps ('i_o' steps by 2)", "outside 'i_i_o'"):
        lower(s)
    s = Schedule(dense_relu(M=9, N=13, K=7))  # the same loops with i_o outside the tile: accepted
    s.tile("D", "k", "i", 1, 2)
    s.tile("D", "i_i", "k_o", 1, 1)
    s.reorder("D", "i_o", "i_i_o", "k_o_o", "j", "i_i_i", "k_o_i", "k_i")
    s.cache_write("D", "i_i_o")
    rng = np.random.default_rng(8)
    x, w, b = (rng.uniform(-1, 1, sh).astype(np.float32) for sh in ((9, 7), (7, 13), (13,)))
    assert_close(build(s, threads=2)(x, w, b), np.maximum(x @ w + b, 0), "float32", 7)


def test_compute_at_rules():
    s = Schedule(two_consumers())
    with raises("compute_at", "i", "read by ['Q', 'Y']", "only consumer"):
        s.compute_at("P", "Y", "i")
    with raises("compute_at", "i", "output stage cannot be computed at"):
        s.compute_at("Y", "Q", "i")
    with raises("compute_at", "zz", "no loop 'zz'"):
        s.compute_at("Q", "Y", "zz")
    s.compute_at("Q", "Y", "i")
    with raises("compute_at", "i", "already attached"):
        s.compute_at("Q", "Y", "i")


def shared_rows(M: int = 10, N: int = 37, out_cols: int | None = None):  # type: ignore[no-untyped-def]
    """Softmax's shape of program: E is read by the row sum S and by the output Y."""
    X = te.placeholder((M, N), name="X")
    k = te.reduce_axis(N, name="k")
    E = te.compute((M, N), lambda i, j: X[i, j] * 2.0 + 1.0, name="E")
    S = te.compute((M,), lambda i: te.sum(E[i, k], axis=k), name="S")
    return te.compute((M, out_cols or N), lambda i, j: E[i, j] / S[i], name="Y")


@pytest.mark.parametrize("at", ["io", "ii"])
def test_a_stage_read_by_the_consumer_and_a_stage_at_the_same_loop_is_computed_once_there(at: str) -> None:
    s = Schedule(shared_rows())
    s.split("Y", "i", 4, "io", "ii")
    with raises("compute_at", at, "read by ['S', 'Y']", f"computed at Y.{at} first"):
        s.compute_at("E", "Y", at)                 # S still root
    s.compute_at("S", "Y", at)
    s.compute_at("E", "Y", at)
    s.vectorize("Y", "j")
    src = generate_source(s)
    assert src.count("E_local[") == 3 and "E[" not in src   # written once, read by S and Y
    assert src.index("E_local[i, j] =") < src.index("S_local[") # E before S at the loop
    x = np.random.default_rng(0).standard_normal((10, 37)).astype(np.float32)
    e = x * 2 + 1
    assert_close(build(s)(x), e / e.sum(axis=1, keepdims=True), "float32", 37)


def test_other_readers_must_be_at_the_same_loop_and_read_inside_the_computed_part() -> None:
    s = Schedule(shared_rows())
    s.split("Y", "i", 4, "io", "ii")
    s.compute_at("S", "Y", "ii")
    with raises("compute_at", "io", "computed at Y.io first"):
        s.compute_at("E", "Y", "io")
    # Y reads 5 of E's 37 columns, S all of them: E's part at Y.io is too small for S
    s = Schedule(shared_rows(out_cols=5))
    s.split("Y", "i", 4, "io", "ii")
    s.compute_at("S", "Y", "io")
    s.compute_at("E", "Y", "io")
    with raises("compute_at", "io", "'S' reads 'E' outside the part computed at Y.io"):
        lower(s)


def test_compute_inline_rules():
    s = Schedule(dense_relu())
    with raises("compute_inline", None, "'D' has a reduction and cannot be inlined"):
        s.compute_inline("D")
    with raises("compute_inline", None, "output stage cannot be inlined"):
        s.compute_inline("Y")
    s = Schedule(two_consumers())
    s.split("P", "i", 2)
    with raises("compute_inline", None, "loop transformations"):
        s.compute_inline("P")
    s = Schedule(two_consumers())
    s.compute_inline("Q")
    with raises("split", None, "was inlined"):
        s.split("Q", "i", 2)


def test_pack_rules():
    s = Schedule(matmul())
    with raises("pack", "B", "dim 2 is out of range for a 2-d tensor"):
        s.pack("B", 2, 4)
    with raises("pack", "B", "dim must be a dimension index"):
        s.pack("B", -1, 4)
    with raises("pack", "B", "factor 30 exceeds the extent 29"):
        s.pack("B", 1, 30)
    with raises("pack", "B", "factor must be an integer"):
        s.pack("B", 1, 0)
    with raises("pack", "Z", "no tensor named 'Z'"):
        s.pack("Z", 0, 4)
    with raises("pack", "C", "output cannot be packed"):
        s.pack("C", 0, 4)
    with raises("pack", "B", "name 'A' is taken"):
        s.pack("B", 1, 4, "A")
    with raises("pack", None, "identifier", "'x; import os'"):
        s.pack("B", 1, 4, "x; import os")
    s.pack("B", 1, 4)
    with raises("pack", "B", "already packed"):
        s.pack("B", 0, 4, "B2")


@pytest.mark.parametrize("bad", ["x; import os", "__class__", "a-b", "def", "_lo", "os.system"])
def test_definition_names_must_be_identifiers(bad):
    """Tensor and axis names are printed into kernel source: a Schedule refuses any that is not a plain
    identifier (this is what stops source injection through a compute definition)."""
    A = te.placeholder((4, 4), name=bad)
    B = te.compute((4,), lambda i: A[i, 0] + 1.0, name="B")
    with pytest.raises(ScheduleError, match="identifier"):
        Schedule(B)
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name=bad)
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    with pytest.raises(ScheduleError, match="identifier"):
        Schedule(B)
    with pytest.raises(ScheduleError, match="identifier"):
        Schedule(te.compute((4,), lambda i: A[i, 0], name=bad))


def test_duplicate_axis_names_rejected():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, name="i")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    with pytest.raises(DefinitionError, match="distinct"):
        Schedule(B)


# ---------------------------------------------------------------------------------------------
# a rejected step changes nothing
# ---------------------------------------------------------------------------------------------
def test_rejected_tile_leaves_schedule_unchanged():
    out = matmul()
    s = Schedule(out)
    s.reorder("C", "i", "k", "j")
    s.vectorize("C", "j")
    before = generate_source(s)
    with raises("split", "j", "already marked vectorize"):
        s.tile("C", "i", "j", 4, 4)  # splits i, then fails on j
    assert s.stages["C"].order == ["i", "k", "j"]
    assert generate_source(s) == before
    assert same_source(s, Schedule.from_trace(out, s.trace_json()))


@dataclass(frozen=True)
class Scribble(Step):
    """A step that changes every attribute of every stage, and the tensors and packs, then fails."""
    op: ClassVar[str] = "scribble"


class ScribblingSchedule(Schedule):
    def _scribble(self, step: Scribble) -> None:
        for stage in self.stages.values():
            for name, value in vars(stage).items():
                if isinstance(value, list):
                    value.append("scribbled")
                elif isinstance(value, dict):
                    value["scribbled"] = "scribbled"
                elif isinstance(value, set):
                    value.add("scribbled")
                else:
                    setattr(stage, name, "scribbled")
        self.stages["scribbled"] = self.stages[self.output.name]
        self.tensors["scribbled"] = self.output
        self.packs["scribbled"] = "scribbled"
        raise ScheduleError(step.op, None, "fails after changing everything")


def state_of(s: Schedule) -> tuple:
    """Every attribute of every stage (containers copied), the tensors, the packs and the trace."""
    stages = {n: {k: (v.copy() if isinstance(v, (list, dict, set)) else v) for k, v in vars(stage).items()}
              for n, stage in s.stages.items()}
    return stages, dict(s.tensors), dict(s.packs), list(s.trace)


def test_a_failed_step_leaves_every_field_of_the_schedule_as_it_was():
    out = dense_relu()
    s = ScribblingSchedule(out)
    s.pack("W", 1, 4)
    s.split("Y", "j", 4)
    s.compute_at("D", "Y", "j_o")
    s.cache_write("Y", "j_o")
    s.vectorize("Y", "j_i")
    before = generate_source(s)  # lowering also fills each stage's loop variables
    state = state_of(s)
    with raises("scribble", None, "fails after changing everything"):
        s.apply(Scribble())
    assert state_of(s) == state
    assert generate_source(s) == before


# ---------------------------------------------------------------------------------------------
# traces and determinism
# ---------------------------------------------------------------------------------------------
def test_trace_replay_gives_identical_source():
    out = matmul()
    s = blis_like(out)
    src = generate_source(s)
    trace = json.loads(json.dumps(s.trace_json()))
    again = Schedule.from_trace(out, trace)
    assert again.trace == s.trace
    assert generate_source(again) == src
    # steps objects replay the same way, and a fresh but equal definition gives the same bytes
    assert generate_source(Schedule.from_trace(matmul(), s.trace)) == src
    # lowering twice gives the same source
    assert generate_source(s) == src and generate_source(s, lower(s)) == src


def test_template_trace_replay_is_deterministic():
    import random
    from autotune.task import Task
    t = Task.create("matmul", {"M": 37, "N": 29, "K": 23}, threads=2)
    for seed in range(5):
        cfg = t.space().sample(random.Random(seed))
        s, _ = t.schedule(cfg)
        src = generate_source(s)
        assert t.source(cfg) == src
        out = t.template.define(t.shape_dict, t.dtype)
        assert generate_source(Schedule.from_trace(out, s.trace_json())) == src


@pytest.mark.parametrize("threads", [1, 2])
def test_blis_like_schedule_runs(threads):
    out = matmul()
    k = build(blis_like(out), threads=threads)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (37, 23)).astype(np.float32)
    b = rng.uniform(-1, 1, (23, 29)).astype(np.float32)
    assert_close(k(a, b), a @ b, "float32", 23)
    # a second call into the same output buffer is not affected by what was there before
    res = np.full((37, 29), np.nan, np.float32)
    k(a, b, out=res)
    assert_close(res, a @ b, "float32", 23)


def test_tiles_run_whole_over_a_local_buffer_but_a_reduction_tail_stays_clamped():
    """Y[i] = sum_k P[i + k] * W[k] with P computed per tile: the vectorized i loop reads only P's
    local buffer, which holds whole tiles, so it runs whole (garbage lanes are not written back);
    the k loop would add garbage to real outputs, so its tail stays clamped."""
    A = te.placeholder((40,), name="A")
    W = te.placeholder((4,), name="W")
    P = te.compute((40,), lambda i: A[i] * 2.0, name="P")
    k = te.reduce_axis(4, name="k")
    Y = te.compute((37,), lambda i: te.sum(P[i + k] * W[k], axis=k), name="Y")
    s = Schedule(Y)
    s.split("Y", "i", 8, "io", "ii")
    s.split("Y", "k", 3, "ko", "ki")
    s.reorder("Y", "io", "ko", "ki", "ii")
    s.cache_write("Y", "io")
    s.vectorize("Y", "ii")
    s.compute_at("P", "Y", "io")
    src = generate_source(s)
    assert "for ii in range(8):  # vectorize\n                    Y_acc[ii] +=" in src, src
    assert "for ki in range(min(3, 4 - ko * 3)):" in src, src
    assert "if 37 - io * 8 >= 8:" in src  # the write-back is clamped
    rng = np.random.default_rng(2)
    a, w = rng.uniform(-1, 1, 40).astype(np.float32), rng.uniform(-1, 1, 4).astype(np.float32)
    want = np.array([sum(2 * a[i + j] * w[j] for j in range(4)) for i in range(37)], np.float32)
    assert_close(build(s)(a, w), want, "float32", 4)


def test_epilogue_schedules_run():
    out = dense_relu()
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (9, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (7, 13)).astype(np.float32)
    b = rng.uniform(-1, 1, (13,)).astype(np.float32)
    want = np.maximum(x @ w + b, 0)
    s = Schedule(out)
    s.split("Y", "j", 4)
    s.compute_at("D", "Y", "j_o")
    s.split("D", "k", 3)
    assert_close(build(s)(x, w, b), want, "float32", 7)
    s = Schedule(out)
    s.split("Y", "i", 4)
    s.parallel("Y", "i_o")
    s.cache_write("D", "i")
    assert_close(build(s, threads=2)(x, w, b), want, "float32", 7)


def test_a_fused_loop_over_a_split_tail_writes_nothing_past_the_output() -> None:
    """i (13) split by 2 with its inner part fused with j, or by 8 with its two parts fused: the
    fused loop runs past row 12, and the reduction's init is guarded like its update. Unguarded,
    the init wrote zeros past the output, which corrupted the heap (found by test_fuzz_matmul)."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (13, 9)).astype(np.float32)
    b = rng.uniform(-1, 1, (9, 11)).astype(np.float32)
    for factor, fused in ((2, ("i_i", "j")), (8, ("i_o", "i_i"))):
        s = Schedule(matmul(M=13, N=11, K=9))
        s.split("C", "i", factor, "i_o", "i_i")
        s.fuse("C", *fused)
        buf = np.full(13 * 11 + 64, 7.0, np.float32)  # the output, then 64 floats that must stay 7
        got = build(s, threads=1)(a, b, out=buf[:13 * 11].reshape(13, 11))
        assert_close(got, a @ b, "float32", 9)
        assert (buf[13 * 11:] == 7.0).all(), (factor, fused)


# ---------------------------------------------------------------------------------------------
# fuzz: random primitive sequences
# ---------------------------------------------------------------------------------------------
FACTORS = [1, 2, 3, 4, 5, 8, 16, 0, 100]
OPS = ["split", "split", "tile", "fuse", "reorder", "unroll", "vectorize", "parallel", "cache_write",
       "compute_at", "compute_inline", "pack", "stream", "prefetch"]


def random_step(data, s: Schedule) -> None:
    """Apply one random primitive, mostly with arguments that make sense in the current state."""
    op = data.draw(st.sampled_from(OPS), label="op")
    stages = sorted(n for n, x in s.stages.items() if x.attach[0] != "inline")
    stage = data.draw(st.sampled_from(stages + ["nope"]), label="stage")
    order = list(s.stages[stage].order) if stage in s.stages else ["i"]
    axis = data.draw(st.sampled_from(order + ["zz"]), label="axis")
    if op == "split":
        s.split(stage, axis, data.draw(st.sampled_from(FACTORS), label="factor"))
    elif op == "tile":
        y = data.draw(st.sampled_from(order), label="y")
        s.tile(stage, axis, y, data.draw(st.sampled_from(FACTORS)), data.draw(st.sampled_from(FACTORS)))
    elif op == "fuse":
        p = order.index(axis) if axis in order else 0
        inner = order[p + 1] if p + 1 < len(order) and data.draw(st.booleans()) else data.draw(st.sampled_from(order))
        s.fuse(stage, axis, inner)
    elif op == "reorder":
        s.reorder(stage, *data.draw(st.permutations(order), label="perm")[:data.draw(st.integers(1, len(order)))])
    elif op == "unroll":
        s.unroll(stage, axis)
    elif op == "vectorize":
        s.vectorize(stage, axis if data.draw(st.booleans()) else order[-1])
    elif op == "parallel":
        s.parallel(stage, axis if data.draw(st.booleans()) else order[0])
    elif op == "cache_write":
        s.cache_write(stage, axis)
    elif op == "compute_at":
        cons = data.draw(st.sampled_from(stages), label="consumer")
        s.compute_at(stage, cons, data.draw(st.sampled_from(list(s.stages[cons].order)), label="at"))
    elif op == "compute_inline":
        s.compute_inline(stage)
    elif op == "stream":
        s.stream(stage)
    elif op == "prefetch":
        inputs = sorted(t for t, x in s.tensors.items() if x.is_placeholder) + ["nope"]
        s.prefetch(stage, axis, data.draw(st.sampled_from(inputs), label="tensor"),
                   data.draw(st.sampled_from([0, 1, 2, 4, 100]), label="rows"))
    elif op == "pack":
        names = sorted(t for t, x in s.tensors.items() if x.is_placeholder) + [s.output.name]
        tensor = data.draw(st.sampled_from(names), label="tensor")
        s.pack(tensor, data.draw(st.integers(0, 2), label="dim"), data.draw(st.sampled_from(FACTORS)),
               f"{tensor}_p{len(s.trace)}")


def fuzz(data, out: te.Tensor, inputs: list[np.ndarray], want: np.ndarray, reduction: int) -> None:
    s = Schedule(out)
    n = data.draw(st.integers(1, 7), label="steps")
    for _ in range(n):
        trace_before = list(s.trace)
        try:
            random_step(data, s)
        except ScheduleError:
            assert s.trace == trace_before  # rejected steps are not recorded
    # what was applied must equal what the trace replays to
    src = _source(s)
    replay = Schedule.from_trace(out, s.trace_json())
    event(f"steps applied: {len(s.trace)}")
    if src is None:
        event("rejected when lowering or generating code")
        with pytest.raises(ScheduleError):
            generate_source(replay)
        return
    assert generate_source(replay) == src, f"trace {s.trace_json()} does not replay to the same kernel"
    event("compiled and compared")
    with GuardedBuffers() as guards:  # a write past a buffer fails here, not as a corrupt heap later
        k = build(s, threads=2)
        got = k(*inputs)
    guards.check()
    assert_close(got, want, "float32", reduction)


def _source(s: Schedule) -> str | None:
    """The generated source, or None if lowering or a code generator pass refuses the schedule."""
    try:
        return generate_source(s)
    except ScheduleError:
        return None


FUZZ = int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "0"))  # raise for a longer hunt


@settings(max_examples=FUZZ or 15)
@given(st.data())
def test_fuzz_matmul(data):
    out = matmul(M=13, N=11, K=9)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (13, 9)).astype(np.float32)
    b = rng.uniform(-1, 1, (9, 11)).astype(np.float32)
    fuzz(data, out, [a, b], a @ b, 9)


@settings(max_examples=FUZZ or 10)
@given(st.data())
def test_fuzz_dense_relu(data):
    out = dense_relu(M=9, N=13, K=7)
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, (9, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (7, 13)).astype(np.float32)
    b = rng.uniform(-1, 1, (13,)).astype(np.float32)
    fuzz(data, out, [x, w, b], np.maximum(x @ w + b, 0), 7)


@settings(max_examples=FUZZ or 10)
@given(st.data())
def test_fuzz_shared_rows(data):
    out = shared_rows(M=10, N=37)
    x = np.random.default_rng(9).uniform(0.5, 1, (10, 37)).astype(np.float32)
    e = x * 2 + 1
    fuzz(data, out, [x], e / e.sum(axis=1, keepdims=True), 37)


def strided_conv(C: int = 3, H: int = 7, K: int = 4):  # type: ignore[no-untyped-def]
    """A 3x3 convolution of stride 2 over an input zero-padded by 1 (the stage Xp, a select)."""
    X = te.placeholder((C, H, H), name="X")
    Wt = te.placeholder((K, C, 3, 3), name="W")
    zero = te.const(0, "float32")
    Xp = te.compute((C, H + 2, H + 2), lambda c, h, w: te.select(
        te.all_of(h >= 1, h < H + 1, w >= 1, w < H + 1), X[c, h - 1, w - 1], zero), name="Xp")
    rc, rr, rs = te.reduce_axis(C, name="rc"), te.reduce_axis(3, name="rr"), te.reduce_axis(3, name="rs")
    OH = (H - 1) // 2 + 1
    return te.compute((K, OH, OH), lambda k, oh, ow: te.sum(Xp[rc, oh * 2 + rr, ow * 2 + rs] * Wt[k, rc, rr, rs],
                                                            axis=[rc, rr, rs]), name="Y")


@settings(max_examples=FUZZ or 10)
@given(st.data())
def test_fuzz_strided_conv(data):
    rng = np.random.default_rng(10)
    x = rng.uniform(-1, 1, (3, 7, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    want = np.einsum("crs...,kcrs->k...", np.stack([np.stack([xp[:, r:r + 7:2, s:s + 7:2] for s in range(3)], 1)
                                                    for r in range(3)], 1), w)
    fuzz(data, strided_conv(), [x, w], want, 27)


@settings(max_examples=FUZZ or 10)
@given(st.data())
def test_fuzz_window_relu(data):
    x = np.random.default_rng(11).uniform(-1, 1, 25).astype(np.float32)
    p = x * 2
    fuzz(data, window_relu(), [x], np.maximum(p[:-2] + p[1:-1] + p[2:] - 1, 0), 3)


def window_relu(N: int = 23):  # type: ignore[no-untyped-def]
    """relu(a 1-d window sum over a scaled input): P is read only by S, S only by the output Y."""
    X = te.placeholder((N + 2,), name="X")
    r = te.reduce_axis(3, name="r")
    P = te.compute((N + 2,), lambda i: X[i] * 2.0, name="P")
    S = te.compute((N,), lambda i: te.sum(P[i + r], axis=r), name="S")
    return te.compute((N,), lambda i: te.max(S[i] - 1.0, 0.0), name="Y")


def test_a_stage_is_computed_at_a_loop_of_its_consumers_consumer_over_what_the_consumer_reads_there() -> None:
    """P at Y.io, S (its only reader) at Y.ii inside it: P's part at io is the rows the S computed
    at each ii of that io read (4 + 2 halo), made once per io, not per ii."""
    s = Schedule(window_relu())
    s.split("Y", "i", 4, "io", "ii")
    with raises("compute_at", "io", "read by ['S']", "inside 'io'"):
        s.compute_at("P", "Y", "io")               # S still root
    s.compute_at("S", "Y", "io")
    with raises("compute_at", "io", "inside 'io'"):
        s.compute_at("P", "Y", "io")               # S at the same loop, not inside it
    s = Schedule(window_relu())
    s.split("Y", "i", 4, "io", "ii")
    s.compute_at("S", "Y", "ii")
    s.compute_at("P", "Y", "io")
    src = generate_source(s)
    assert "stack_empty(6," in src and "P[" not in src
    assert src.index("for io") < src.index("P_local[") < src.index("for ii")
    x = np.random.default_rng(0).standard_normal(25).astype(np.float32)
    p = x * 2
    want = np.maximum(p[:-2] + p[1:-1] + p[2:] - 1, 0)
    assert_close(build(s)(x), want, "float32", 3)
    s.reorder("Y", "ii", "io")                     # S now outside P's loop: lowering refuses
    with raises("compute_at", "io", "inside its loop 'io' reads 'P'"):
        lower(s)
