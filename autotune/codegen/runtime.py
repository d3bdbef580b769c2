"""Helpers that generated kernels import: a fixed-size stack buffer for accumulator tiles, 2**n
built from the bits of a float (the IR's `pow2`), exp, log, tanh and sigmoid as inline code that
LLVM vectorizes (`vexp`, `vlog`, `vtanh`, `vsigmoid`), the Numba pipeline they are compiled with, and
`healing_njit`, the decorator they are compiled by (numba.njit with the verified, self-healing
disk cache of autotune.codegen.healing: no Numba pickle is loaded unless its MAC checks).

RUNTIME_VERSION is part of the compile cache's key: change it whenever what a helper compiles to
changes, or kernels cached with the old helper would keep running.
"""
from __future__ import annotations

import math
import platform

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
           "stack_empty", "stream_fence", "stream_row", "vexp", "vexp_nonpos", "vlog", "vsigmoid", "vtanh", "EXP_NONPOS_LO"]

RUNTIME_VERSION = 5

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


@intrinsic(prefer_literal=True)
def stream_row(typingctx, dst, index, src, n, vector_bytes):  # type: ignore[no-untyped-def]
    """Copy src[:n] to the C-contiguous dst from dst[index] on (its last index counting up): plain
    stores up to the first address aligned to vector_bytes, then non-temporal vector stores of
    vector_bytes each (the cache lines are written without being read first), plain stores for the
    rest. n and vector_bytes must be literal integers. A kernel that streams calls stream_fence()
    before it returns. autotune.codegen.stream prints it.
    """
    if not (isinstance(n, types.IntegerLiteral) and isinstance(vector_bytes, types.IntegerLiteral)
            and isinstance(dst, types.Array) and dst.layout == "C" and isinstance(src, types.Array)
            and src.dtype == dst.dtype and isinstance(index, types.BaseTuple) and len(index) == dst.ndim
            and all(isinstance(t, types.Integer) for t in index)):
        return None
    count, vbytes = n.literal_value, vector_bytes.literal_value

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        dty, ity, sty = sig.args[:3]
        d, idx, s = args[:3]
        da = context.make_array(dty)(context, builder, d)
        sp = context.make_array(sty)(context, builder, s).data
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(cgutils.unpack_tuple(builder, idx), ity)]
        dp = cgutils.get_item_pointer2(context, builder, da.data, cgutils.unpack_tuple(builder, da.shape),
                                       cgutils.unpack_tuple(builder, da.strides), "C", inds)
        intp = context.get_value_type(types.intp)
        ety = context.get_data_type(dty.dtype)
        esize = context.get_abi_sizeof(ety)
        lanes = max(1, vbytes // esize)

        def k(v: int) -> ir.Constant:
            return ir.Constant(intp, v)
        addr = builder.ptrtoint(dp, intp)
        head = builder.udiv(builder.urem(builder.sub(k(vbytes), builder.urem(addr, k(vbytes))), k(vbytes)), k(esize))
        aligned = builder.icmp_unsigned("==", builder.urem(addr, k(esize)), k(0))  # else: all plain stores
        head = builder.select(aligned, head, k(count))
        head = builder.select(builder.icmp_unsigned("<", head, k(count)), head, k(count))
        nvec = builder.udiv(builder.sub(k(count), head), k(lanes))
        with cgutils.for_range(builder, head) as loop:
            builder.store(builder.load(builder.gep(sp, [loop.index])), builder.gep(dp, [loop.index]))
        vty = ir.VectorType(ety, lanes).as_pointer()
        nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, nvec) as loop:
            off = builder.add(head, builder.mul(loop.index, k(lanes)))
            v = builder.load(builder.bitcast(builder.gep(sp, [off]), vty), align=esize)
            builder.store(v, builder.bitcast(builder.gep(dp, [off]), vty), align=vbytes).set_metadata("nontemporal", nontemporal)
        done = builder.add(head, builder.mul(nvec, k(lanes)))
        with cgutils.for_range(builder, builder.sub(k(count), done)) as loop:
            off = builder.add(done, loop.index)
            builder.store(builder.load(builder.gep(sp, [off])), builder.gep(dp, [off]))
        return context.get_dummy_value()

    return types.void(dst, index, src, n, vector_bytes), codegen


@intrinsic(prefer_literal=True)
def prefetch_row(typingctx, src, index, n, line_bytes):  # type: ignore[no-untyped-def]
    """Prefetch src[index] and the n - 1 elements after it (its last index counting up) into every
    cache level, one llvm.prefetch per line_bytes: a hint, never a fault, no value changed. n and
    line_bytes must be literal integers. autotune.codegen.prefetch prints it.
    """
    if not (isinstance(n, types.IntegerLiteral) and isinstance(line_bytes, types.IntegerLiteral)
            and isinstance(src, types.Array) and src.layout == "C" and isinstance(index, types.BaseTuple)
            and len(index) == src.ndim and all(isinstance(t, types.Integer) for t in index)):
        return None
    count, line = n.literal_value, line_bytes.literal_value

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        aty, ity = sig.args[:2]
        a = context.make_array(aty)(context, builder, args[0])
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(cgutils.unpack_tuple(builder, args[1]), ity)]
        p = cgutils.get_item_pointer2(context, builder, a.data, cgutils.unpack_tuple(builder, a.shape),
                                      cgutils.unpack_tuple(builder, a.strides), "C", inds)
        i8p = ir.IntType(8).as_pointer()
        base = builder.bitcast(p, i8p)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fetch = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        nbytes = count * context.get_abi_sizeof(context.get_data_type(aty.dtype))
        for off in range(0, nbytes, line):  # unrolled: a row is at most a few hundred lines
            builder.call(fetch, [builder.gep(base, [ir.Constant(ir.IntType(64), off)]), ir.Constant(i32, 0),
                                 ir.Constant(i32, 3), ir.Constant(i32, 1)])  # read, keep in all levels, data
        return context.get_dummy_value()

    return types.void(src, index, n, line_bytes), codegen


@intrinsic
def stream_fence(typingctx):  # type: ignore[no-untyped-def]
    """Orders the non-temporal stores before it: they are visible to every thread after it. On x86
    an sfence (LLVM's seq_cst fence there is a locked add, which Linux's mb() does not trust to
    order streaming stores); elsewhere a seq_cst fence."""
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.sfence"), [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


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


# --- exp, log, tanh and sigmoid that LLVM vectorizes -------------------------------------------
#
# Numba lowers np.exp, np.log and np.tanh to scalar libm calls (this llvmlite has no SVML), and a
# call keeps its loop scalar. These intrinsics emit the function inline as straight-line IR
# (float arithmetic, integer bit operations on the float's bits, selects and llvm.rint), which
# LLVM's loop vectorizer turns into vector code like the rest of the loop body.
#
# Their float instructions carry the flag "contract" only (FMA contraction), never the kernel's
# fast-math flags: Numba's fastmath pass flags only instructions that have no flags yet, so
# reassoc cannot undo the Cody-Waite reduction or the log's compensated sum, and nnan/ninf cannot
# fold the handling of special values away. Special values are handled IEEE/NumPy-like:
# exp(-inf) = 0, exp(x) = inf above the largest finite result, denormal results underflow
# gradually; log(0) = log(-0) = -inf, log(x < 0) = NaN, log(inf) = inf, denormal x is accurate;
# tanh(+-inf) = +-1, tanh(-0) = -0; NaN gives NaN. (A kernel's own instructions keep their
# flags: an inf or NaN result fed to further kernel arithmetic meets nnan/ninf there.)
#
# Accuracy: max relative error against long double over all finite float32/float64 inputs (bit
# patterns drawn uniformly, a dense grid and all magnitudes near 0; tests/autotune/codegen/
# test_transcendentals.py), in units of eps (float32 1.19e-7, float64 2.22e-16), the same with and
# without the kernel's reassoc, with FMA (AVX2, AVX-512) / without (SSE4.2):
#   exp      0.63 / 0.84 (float32)   0.61 / 0.78 (float64)    NumPy: 1.7, 0.58
#   log      0.68                    0.68                     NumPy: 2.1, 0.55
#   tanh     1.80                    1.71                     NumPy: 0.91, 0.80
#   sigmoid  1.53 / 1.61             1.53                     (NumPy's 1/(1+exp(-x)): 2.1, 1.1)
# Denormal results (exp, sigmoid) are within 0.83 of a denormal step. np.sqrt (llvm.sqrt, a vector
# sqrt instruction) is correctly rounded. Where NumPy differs: sigmoid of a very negative x is
# exp(x) (a denormal, then 0) where NumPy's 1/(1+exp(-x)) overflows to 0 first.

# exp_nonpos's domain starts here: exp of it is a normal number (float32 1.183e-38, float64 2.23e-308)
EXP_NONPOS_LO = {"float32": -87.33, "float64": -708.39}

_FLAGS = ("contract",)  # the only fast-math flag on these functions' float instructions
_LN2_HI = 0.693145751953125                # ln 2 = _LN2_HI + _LN2_LO; _LN2_HI has 16 bits: n * _LN2_HI is exact (|n| <= 1076)
_LN2_LO = 1.4286068203094172321e-06

# float type: (degree of the expm1 Taylor polynomial, exp's input clamp [lo, hi], tanh's |x| clamp,
#              log's ln2 split (hi, lo), log's polynomial coefficients Lg1.. (musl/fdlibm))
_SPEC = {
    "float32": dict(degree=7, exp_lo=-104.0, exp_hi=89.0, tanh_hi=10.0,
                    # exp_nonpos's exp(r), |r| <= ln2/2: 1 + r + c2 r^2 + ... + c6 r^6, minimax for the
                    # relative error with 1 and r exact (a linear program on a grid), the coefficients
                    # rounded to float32: 5.2e-9 (the degree-7 Taylor polynomial: 7.0e-9), one FMA fewer
                    exp_poly=(1.0, 1.0, 0.4999999403953552, 0.1666647344827652, 0.041667595505714417,
                              0.00837334431707859, 0.0013886650558561087),
                    ln2=(6.9313812256e-01, 9.0580006145e-06),
                    lg=(0.66666662693, 0.40000972152, 0.28498786688, 0.24279078841)),
    "float64": dict(degree=13, exp_lo=-746.0, exp_hi=710.0, tanh_hi=20.0,
                    ln2=(6.93147180369123816490e-01, 1.90821492927058770002e-10),
                    lg=(6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
                        2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
                        1.479819860511658591e-01)),
}


class _Emit:
    """Scalar IR of one float type (float32 or float64) for the functions below."""

    def __init__(self, builder: ir.IRBuilder, fty: ir.Type) -> None:
        self.b, self.fty = builder, fty
        self.dtype = "float64" if isinstance(fty, ir.DoubleType) else "float32"
        itype, self.mant, self.emin, self.bias = POW2_FORMAT[self.dtype]
        self.ity = ir.IntType(int(itype[3:]))
        self.spec = _SPEC[self.dtype]
        nbits = self.ity.width
        self.sign = 1 << (nbits - 1)
        self.inf_bits = ((1 << (nbits - 1 - self.mant)) - 1) << self.mant  # exponent all ones

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.fty, float(v))

    def i(self, v: int) -> ir.Constant:
        return ir.Constant(self.ity, v)

    def add(self, a, b):  # type: ignore[no-untyped-def]
        return self.b.fadd(a, b, flags=_FLAGS)

    def sub(self, a, b):  # type: ignore[no-untyped-def]
        return self.b.fsub(a, b, flags=_FLAGS)

    def mul(self, a, b):  # type: ignore[no-untyped-def]
        return self.b.fmul(a, b, flags=_FLAGS)

    def div(self, a, b):  # type: ignore[no-untyped-def]
        return self.b.fdiv(a, b, flags=_FLAGS)

    def clamp(self, x, lo: float, hi: float):  # type: ignore[no-untyped-def]
        """x clamped to [lo, hi] (vector max and min); NaN gives lo."""
        x = self.b.select(self.b.fcmp_ordered(">", x, self.c(lo), flags=_FLAGS), x, self.c(lo))
        return self.b.select(self.b.fcmp_ordered("<", x, self.c(hi), flags=_FLAGS), x, self.c(hi))

    def bits(self, x):  # type: ignore[no-untyped-def]
        return self.b.bitcast(x, self.ity)

    def float(self, i):  # type: ignore[no-untyped-def]
        return self.b.bitcast(i, self.fty)

    def special(self, x, value, cond):  # type: ignore[no-untyped-def]
        """value, or x where cond(bits of |x|, bits of x) holds (integer compares: no flags to fold)."""
        return self.b.select(cond(self.b.and_(self.bits(x), self.i(self.sign - 1)), self.bits(x)), x, value)

    def keep_nan(self, x, value):  # type: ignore[no-untyped-def]
        return self.special(x, value, lambda a, _: self.b.icmp_unsigned(">", a, self.i(self.inf_bits)))

    def rint(self, x):  # type: ignore[no-untyped-def]
        fn = self.b.module.declare_intrinsic("llvm.rint", [self.fty])
        return self.b.call(fn, [x])

    def pow2i(self, k):  # type: ignore[no-untyped-def]
        """2**k for an int32 k of the normal exponents, from the bits."""
        k = self.b.sext(k, self.ity) if self.ity.width == 64 else k
        return self.float(self.b.shl(self.b.add(k, self.i(self.bias)), self.i(self.mant)))

    def reduce(self, x):  # type: ignore[no-untyped-def]
        """(n as int32, r) with x = n*ln2 + r, |r| <= ln2/2."""
        n = self.rint(self.mul(x, self.c(1.0 / math.log(2.0))))
        r = self.remainder(x, n)
        return self.b.fptosi(n, ir.IntType(32)), r

    def remainder(self, x, n):  # type: ignore[no-untyped-def]
        """x - n*ln2 for an integral float n, Cody-Waite: n*_LN2_HI is exact."""
        return self.sub(self.sub(x, self.mul(n, self.c(_LN2_HI))), self.mul(n, self.c(_LN2_LO)))

    def expm1_poly(self, r):  # type: ignore[no-untyped-def]
        """expm1(r) for |r| <= ln2/2: r * (1 + r/2! + ... + r**(d-1)/d!), Taylor (truncation
        below 1e-8 / 2e-17 relative for degree 7 / 13); exact for r = 0 and accurate for tiny r."""
        d = self.spec["degree"]
        p = self.c(1.0 / math.factorial(d))
        for k in range(d - 1, 0, -1):
            p = self.add(self.mul(p, r), self.c(1.0 / math.factorial(k)))
        return self.mul(p, r)

    def exp(self, x):  # type: ignore[no-untyped-def]
        """exp(x) for any x but NaN: 0 below exp_lo, inf above exp_hi, denormals in between."""
        x = self.clamp(x, self.spec["exp_lo"], self.spec["exp_hi"])
        n, r = self.reduce(x)
        p = self.add(self.expm1_poly(r), self.c(1.0))
        # 2**n as two normal factors: n reaches -150 / -1076 (a denormal or 0 after the second
        # product, rounded once) and 128 / 1024 (inf)
        n1 = self.b.ashr(n, ir.Constant(ir.IntType(32), 1))
        n2 = self.b.sub(n, n1)
        return self.mul(self.mul(p, self.pow2i(n1)), self.pow2i(n2))

    def exp_nonpos(self, x):  # type: ignore[no-untyped-def]
        """exp(x) for x in [EXP_NONPOS_LO, 0] only (the caller clamps x: the printer calls it for
        exp(min(max(v, lo), 0)) and exp(max(min(v, 0), lo))), where 2**n is a normal number and
        the result lies in [smallest normal, 1]: no input clamp, no NaN test, one 2**n factor, and
        n rounded by adding 1.5 * 2**mant + bias (the sum's low bits are n + bias, shifted into the
        exponent field for 2**n; no rint, no float-to-int conversion). Cody-Waite reduction and
        a polynomial of exp(r): float32 a degree-6 minimax one (`exp_poly`, as accurate as exp's
        degree 7), float64 exp's Taylor polynomial of degree 13. AVX-512, softmax's exp loop with its
        subtraction, clamps, load and store: 19 instructions per vector (2 register copies), where
        `exp` took 31."""
        magic = 1.5 * 2.0 ** self.mant + self.bias
        t = self.add(self.mul(x, self.c(1.0 / math.log(2.0))), self.c(magic))  # contracted to an FMA
        n = self.sub(t, self.c(magic))  # "contract" only: never folded into x * log2(e)
        r = self.remainder(x, n)
        cs = self.spec.get("exp_poly") or [1.0 / math.factorial(k) for k in range(self.spec["degree"] + 1)]
        p = self.c(cs[-1])
        for c in reversed(cs[:-1]):
            p = self.add(self.mul(p, r), self.c(c))
        return self.mul(p, self.float(self.b.shl(self.bits(t), self.i(self.mant))))

    def log(self, x):  # type: ignore[no-untyped-def]
        """log(x) as musl's logf/log (fdlibm): x = 2**k * (1+f), sqrt(1/2) <= 1+f < sqrt(2),
        log(1+f) = f - f*f/2 + s*(f*f/2 + R(s*s)) with s = f/(2+f), summed with k*ln2 split
        into two parts. Denormal x are scaled by 2**(mant+2) first."""
        b, i = self.b, self.i
        mant, bias = self.mant, self.bias
        xb = self.bits(x)
        # denormal (bits in [1, smallest normal)): scale into the normal range
        sub = b.icmp_unsigned("<", b.sub(xb, i(1)), i((1 << mant) - 1))
        scaled = self.bits(self.mul(x, self.c(2.0 ** (mant + 2))))
        xb = b.select(sub, scaled, xb)
        kadj = b.select(sub, ir.Constant(ir.IntType(32), -(mant + 2)), ir.Constant(ir.IntType(32), 0))
        sqrt_half = 0x3F3504F3 if self.dtype == "float32" else 0x3FE6A09E667F3BCD
        one = bias << mant
        ix = b.add(xb, i(one - sqrt_half))
        k = b.trunc(b.lshr(ix, i(mant)), ir.IntType(32)) if self.ity.width == 64 else b.lshr(ix, i(mant))
        k = b.add(b.sub(k, ir.Constant(ir.IntType(32), bias)), kadj)
        ix = b.add(b.and_(ix, i((1 << mant) - 1)), i(sqrt_half))
        f = self.sub(self.float(ix), self.c(1.0))
        dk = b.sitofp(k, self.fty)
        hfsq = self.mul(self.mul(self.c(0.5), f), f)
        s = self.div(f, self.add(self.c(2.0), f))
        z = self.mul(s, s)
        w = self.mul(z, z)
        lg = self.spec["lg"]

        def horner(cs):  # type: ignore[no-untyped-def]
            p = self.c(cs[-1])
            for c in reversed(cs[:-1]):
                p = self.add(self.mul(p, w), self.c(c))
            return p
        t1 = self.mul(w, horner(lg[1::2]))
        t2 = self.mul(z, horner(lg[0::2]))
        R = self.add(t2, t1)
        ln2_hi, ln2_lo = self.spec["ln2"]
        y = self.add(self.mul(s, self.add(hfsq, R)), self.mul(dk, self.c(ln2_lo)))
        y = self.add(self.add(self.sub(y, hfsq), f), self.mul(dk, self.c(ln2_hi)))
        # special inputs, by the bits: +inf and NaN give x, x < 0 NaN, +-0 -inf
        y = self.special(x, y, lambda a, xb: b.icmp_unsigned(">=", a, i(self.inf_bits)))
        y = b.select(b.icmp_signed("<", self.bits(x), i(0)), self.c(math.nan), y)
        return b.select(b.icmp_unsigned("==", b.and_(self.bits(x), i(self.sign - 1)), i(0)), self.c(-math.inf), y)

    def tanh(self, x):  # type: ignore[no-untyped-def]
        """tanh(|x|) = e / (e + 2) with e = expm1(2|x|) = 2**n * expm1(r) + (2**n - 1) (exact
        expm1(r) for 2|x| <= ln2/2, so tiny x keep their relative accuracy), |x| clamped to
        tanh_hi (where tanh rounds to 1); the sign of x put back by its bits (tanh(-0) = -0)."""
        b = self.b
        sign = b.and_(self.bits(x), self.i(self.sign))
        ax = self.float(b.and_(self.bits(x), self.i(self.sign - 1)))
        y = self.mul(self.clamp(ax, 0.0, self.spec["tanh_hi"]), self.c(2.0))
        n, r = self.reduce(y)
        s = self.pow2i(n)
        e = self.add(self.mul(s, self.expm1_poly(r)), self.sub(s, self.c(1.0)))
        t = self.div(e, self.add(e, self.c(2.0)))
        return self.keep_nan(x, self.float(b.or_(self.bits(t), sign)))

    def sigmoid(self, x):  # type: ignore[no-untyped-def]
        """1 / (1 + exp(-x)) as r = 1 / (1 + e), e = exp(-|x|) in (0, 1]: r for x >= 0, e * r
        for x < 0 (no overflow; sigmoid of a very negative x is exp(x), denormals included)."""
        b = self.b
        e = self.exp(self.float(b.or_(self.bits(x), self.i(self.sign))))
        r = self.div(self.c(1.0), self.add(self.c(1.0), e))
        neg = b.icmp_signed("<", self.bits(x), self.i(0))
        return self.keep_nan(x, b.select(neg, self.mul(e, r), r))


def _transcendental(func: str):  # type: ignore[no-untyped-def]
    def typer(typingctx, x):  # type: ignore[no-untyped-def]
        if x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            em = _Emit(builder, args[0].type)
            y = getattr(em, func)(args[0])
            return y if func != "exp" else em.keep_nan(args[0], y)

        return x(x), codegen
    typer.__name__ = f"v{func}"
    typer.__doc__ = f"{func}(x) for a float32 or float64 x, inline code that LLVM vectorizes (see _Emit.{func})."
    return intrinsic(typer)


vexp = _transcendental("exp")
vexp_nonpos = _transcendental("exp_nonpos")
vlog = _transcendental("log")
vtanh = _transcendental("tanh")
vsigmoid = _transcendental("sigmoid")


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
