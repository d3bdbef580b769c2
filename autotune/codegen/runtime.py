"""Helpers that generated kernels import: a fixed-size stack buffer for accumulator tiles, 2**n
built from the bits of a float (the IR's `pow2`), the Numba pipeline they are compiled with, and
`healing_njit`, the decorator they are compiled by (numba.njit with the verified, self-healing
disk cache of autotune.codegen.healing: no Numba pickle is loaded unless its MAC checks).

RUNTIME_VERSION is part of the compile cache's key: change it whenever what a helper compiles to
changes, or kernels cached with the old helper would keep running.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core import typed_passes as typed
from numba.core import untyped_passes as untyped
from numba.core.compiler import CompilerBase
from numba.core.compiler_machinery import PassManager
from numba.extending import intrinsic

from autotune.codegen.healing import healing_njit

__all__ = ["KernelPipeline", "NoAliasKernelPipeline", "POW2_FORMAT", "RUNTIME_VERSION", "healing_njit", "pow2",
           "stack_empty"]

RUNTIME_VERSION = 3

# float type: (integer type of its bits, mantissa bits, smallest and largest normal exponent)
POW2_FORMAT = {"float32": ("int32", 23, -126, 127), "float64": ("int64", 52, -1022, 1023)}


@intrinsic
def stack_empty(typingctx, size, dtype):  # type: ignore[no-untyped-def]
    """A pointer to `size` uninitialised elements on the stack (size must be a literal integer).

    View it with numba.carray(stack_empty(12, np.float32), (3, 4)). The buffer lives until the
    function returns: never return it.
    """
    if not isinstance(size, types.IntegerLiteral):
        return None
    n = size.literal_value
    elem = dtype.dtype

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return cgutils.alloca_once(builder, context.get_value_type(elem), size=n)

    return types.CPointer(elem)(size, dtype), codegen


@intrinsic
def pow2(typingctx, n):  # type: ignore[no-untyped-def]
    """2**n for a float32 or float64 n, in n's type: n is truncated toward zero and clamped to the
    normal exponents ([-126, 127] for float32, [-1022, 1023] for float64), so the result is never
    0, a denormal or inf; NaN gives the smallest normal number.

    Built without a call: clamp (two vector min/max), convert to an int32 (sign-extended for
    float64), add the exponent bias, shift it into the exponent field and reinterpret the bits as a float, all of which LLVM
    vectorizes. In a kernel: pow2(np.float32(-3.0)) == np.float32(0.125).
    """
    if n not in (types.float32, types.float64):
        return None
    itype, mant, lo, hi = POW2_FORMAT[str(n)]
    bits = int(itype[3:])

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        (x,) = args
        fty, ity = x.type, ir.IntType(bits)
        # fcmp+select in this order gives lo for NaN; LLVM turns them into vector max/min
        x = builder.select(builder.fcmp_ordered(">", x, ir.Constant(fty, float(lo))), x, ir.Constant(fty, float(lo)))
        x = builder.select(builder.fcmp_ordered("<", x, ir.Constant(fty, float(hi))), x, ir.Constant(fty, float(hi)))
        # through int32 for float64 too: AVX2 converts doubles to int32 only (to int64 needs AVX-512)
        e = builder.sext(builder.fptosi(x, ir.IntType(32)), ity) if bits == 64 else builder.fptosi(x, ity)
        e = builder.add(e, ir.Constant(ity, hi))  # hi is the exponent bias
        return builder.bitcast(builder.shl(e, ir.Constant(ity, mant)), fty)

    return n(n), codegen


class KernelPipeline(CompilerBase):
    """The Numba compiler pipeline of generated kernels: `@healing_njit(..., pipeline_class=KernelPipeline)`.

    Numba's default nopython pipeline also rewrites and inlines closures, literal loops, array
    expressions and constant raises, and puts the IR in SSA form; generated kernels have none of
    those constructs, and every variable keeps one type. This pipeline keeps what they need:
    bytecode to IR, type inference, overload inlining (intrinsics), legalization and lowering.
    Leaving out SSA and the rewrites made GEMM and conv2d candidates compile 10-22% faster with
    the same machine-code speed (measure/experiments/RESULTS.md). User kernels (`numba_tune`)
    keep Numba's default pipeline.
    """

    def define_pipelines(self) -> list[PassManager]:
        pm = PassManager("autotune_kernel")
        if self.state.func_ir is None:
            pm.add_pass(untyped.TranslateByteCode, "analyzing bytecode")
            pm.add_pass(untyped.FixupArgs, "fix up args")
        pm.add_pass(untyped.IRProcessing, "processing IR")
        pm.add_pass(typed.NopythonTypeInference, "nopython frontend")
        pm.add_pass(typed.InlineOverloads, "inline overloaded functions")
        pm.add_pass(typed.IRLegalization, "ensure IR is legal prior to lowering")
        pm.add_pass(typed.AnnotateTypes, "annotate types")
        pm.add_pass(typed.NativeLowering, "native lowering")
        pm.add_pass(typed.NoPythonBackend, "nopython mode backend")
        pm.finalize()
        return [pm]


class NoAliasKernelPipeline(KernelPipeline):
    """KernelPipeline with every array argument `noalias`: LLVM need not version each vectorized
    loop against overlapping arrays (a runtime check and a scalar fallback per loop). For kernels
    whose callers never pass overlapping arrays (`Kernel` rejects an output that overlaps an
    input; intermediates and scratch are its own). The Winograd convolution's kernel ran 3.2x
    faster with it (its sums kept in registers) and compiled 5-20% faster; GEMM and direct
    conv2d candidates compiled about as fast either way (-18% to +14%), so they keep KernelPipeline."""

    def define_pipelines(self) -> list[PassManager]:
        self.state.flags.noalias = True
        return super().define_pipelines()
