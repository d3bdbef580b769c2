"""te.pow2: 2**n from the float's bits in kernels, the same in the NumPy evaluator, as data, and
vectorized (no call left in the machine code)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.codegen import build, generate_source
from autotune.ir import te
from autotune.ir.evaluate import count_flops, evaluate
from autotune.ir.serialize import from_data, to_data
from autotune.schedule import Schedule

EDGES = {  # n -> 2**n after truncation toward zero and the clamp to the normal exponents
    "float32": [(-3.0, 0.125), (0.0, 1.0), (2.7, 4.0), (-2.7, 0.25), (-126.0, 2.0 ** -126), (-127.0, 2.0 ** -126),
                (-1e30, 2.0 ** -126), (127.0, 2.0 ** 127), (1e30, 2.0 ** 127)],
    "float64": [(-3.0, 0.125), (-127.0, 2.0 ** -127), (-1022.0, 2.0 ** -1022), (-1023.0, 2.0 ** -1022),
                (-1e300, 2.0 ** -1022), (1023.0, 2.0 ** 1023), (5000.0, 2.0 ** 1023)],
}


def pow2_of(n: int, dtype: str) -> te.Tensor:
    N = te.placeholder((n,), dtype, name="N")
    return te.compute((n,), lambda i: te.pow2(N[i]) * 1.0, name="P")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_and_the_evaluator_give_exact_powers_of_two_clamped_to_normal_numbers(dtype: str) -> None:
    ns, want = (np.array(c, dtype) for c in zip(*EDGES[dtype]))
    ns, want = np.resize(ns, 64), np.resize(want, 64)      # long enough to run the vector loop
    out = pow2_of(64, dtype)
    s = Schedule(out)
    s.vectorize("P", "i")
    kernel = build(s, reassoc=True)
    np.testing.assert_array_equal(kernel(ns), want)
    np.testing.assert_array_equal(evaluate(out, {"N": ns}), want)
    assert out.dtype == dtype and count_flops(out) == 2 * 64


def test_whole_numbers_in_the_range_are_exact_and_nan_gives_the_smallest_normal() -> None:
    ns = np.arange(-126, 128, dtype=np.float32)
    kernel = build(Schedule(pow2_of(ns.size, "float32")))
    np.testing.assert_array_equal(kernel(ns), np.ldexp(np.float32(1), np.arange(-126, 128)))
    kernel = build(Schedule(pow2_of(4, "float32")))
    assert kernel(np.full(4, np.nan, np.float32)).tolist() == [2.0 ** -126] * 4


def test_the_printed_kernel_imports_pow2_only_when_it_uses_it() -> None:
    src = generate_source(Schedule(pow2_of(8, "float32")))
    assert "from autotune.codegen.runtime import KernelPipeline, healing_njit, pow2, stack_empty" in src and "pow2(N[i])" in src
    A = te.placeholder((8,), name="A")
    assert "import KernelPipeline, healing_njit, stack_empty\n" in generate_source(Schedule(te.compute((8,), lambda i: A[i] * 2.0, name="B")))


def test_an_integer_argument_is_converted_to_float64() -> None:
    K = te.placeholder((5,), "int64", name="K")
    out = te.compute((5,), lambda i: te.pow2(K[i]), name="P")
    assert out.dtype == "float64"
    k = np.array([-2, 0, 1, 10, -1030], np.int64)
    want = [0.25, 1.0, 2.0, 1024.0, 2.0 ** -1022]
    assert build(Schedule(out))(k).tolist() == want == evaluate(out, {"K": k}).tolist()


def test_pow2_round_trips_as_data() -> None:
    N = te.placeholder((6,), name="N")
    out = te.compute((6,), lambda i: te.pow2(N[i] - 1.0), name="P")
    data = to_data(out, [N])
    assert '"call": "pow2"' in json.dumps(data)
    back, ins = from_data(json.loads(json.dumps(data)))
    assert to_data(back, ins) == data


def test_the_vectorized_loop_calls_nothing() -> None:
    """pow2 is inlined as integer vector code (a shift of a vector of exponents), and the kernel
    calls no function (a call would keep the loop scalar)."""
    s = Schedule(pow2_of(256, "float32"))
    s.vectorize("P", "i")
    main = build(s, reassoc=True).main
    asm = main.inspect_asm(main.signatures[0]).split(".Lfunc_end0")[0]   # the kernel, not its wrappers
    assert "vpslld" in asm or "pslld" in asm
    assert "call" not in asm
