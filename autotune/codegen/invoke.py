"""Call a generated kernel from Python without a Python wrapper of its own.

Numba gives every compiled function a CPython wrapper (unboxing each array argument), compiled
with it: for a kernel of seven arrays that wrapper was a third of the machine code and about a
tenth of the compile time. Generated kernels are compiled without it (`no_cpython_wrapper`), and
Python calls them through a small trampoline compiled once per kernel signature (and cached on
disk), which calls the kernel's C entry point at its address. A tuned op's call checks its inputs
for NaN and Inf in the same trampoline (`Invoker.checked`): one call from Python instead of one
per input and one for the kernel.

Example::

    >>> import numba, numpy as np
    >>> @numba.njit("void(float64[::1])", no_cpython_wrapper=True)
    ... def fill(out):
    ...     out[:] = 7.0
    >>> out = np.zeros(3)
    >>> invoker_for(fill)(out)
    >>> out.tolist()
    [7.0, 7.0, 7.0]
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from autotune.environment import configure_numba

configure_numba()
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.experimental.function_type import _get_wrapper_address  # noqa: E402
from numba import literal_unroll  # noqa: E402
from numba.extending import intrinsic, overload  # noqa: E402

from autotune.codegen.healing import healing_njit  # noqa: E402


@intrinsic
def _call_at(typingctx, address, args):  # type: ignore[no-untyped-def]
    """Call the C entry point at `address` (a void function of the types of the tuple `args`)."""
    def codegen(context, builder, sig, llargs):  # type: ignore[no-untyped-def]
        tup = sig.args[1]
        values = [builder.extract_value(llargs[1], i) for i in range(len(tup))]
        fnty = ir.FunctionType(context.get_value_type(types.none), [context.get_value_type(t) for t in tup.types])
        builder.call(builder.inttoptr(llargs[0], fnty.as_pointer()), values)
        return context.get_dummy_value()
    return types.void(types.int64, args), codegen


@healing_njit(nogil=True, cache=True)
def _invoke(address, args):  # type: ignore[no-untyped-def]
    _call_at(address, args)


def finite(a: np.ndarray) -> bool:
    """True unless `a` holds NaN or ±Inf: NumPy's answer when called from Python (any array); in
    compiled code (the overload below) one read of a C-contiguous `a` and no allocation.
    autotune.codegen.finite chooses between them for a call path."""
    return bool(np.isfinite(a).all())


@overload(finite, jit_options={"fastmath": {"reassoc"}})
def _finite_compiled(a):  # type: ignore[no-untyped-def]
    if isinstance(a, types.Array) and isinstance(a.dtype, types.Float):
        def check(a):  # type: ignore[no-untyped-def]
            flat = a.reshape(a.size)  # C-contiguous: a view
            zero = flat.dtype.type(0)
            s = zero
            for i in range(flat.size):
                s += flat[i] * zero  # 0 for a finite value, NaN for NaN or ±Inf (no nnan/ninf here)
            return s == zero
        return check
    return lambda a: True  # integers and booleans are always finite


# Both compiled users of the check live in this module: Numba's cache of a function is keyed on its
# own file only, so a user in another file would keep an old check's code after this one changed.
@healing_njit(nogil=True, cache=True)
def compiled_finite(a):  # type: ignore[no-untyped-def]
    """finite(a), compiled: a C-contiguous float array's check, called from Python."""
    return finite(a)


FINITE_CHUNK = 1 << 16  # elements a thread checks at a time in finite_chunks


def _finite_chunks(flat, bad, lo, hi):  # type: ignore[no-untyped-def]
    """bad[c] = 1 where chunk c (FINITE_CHUNK elements) of `flat` holds NaN or ±Inf, for c in [lo, hi)."""
    for c in range(lo, hi):
        start = c * FINITE_CHUNK
        bad[c] = not finite(flat[start:min(start + FINITE_CHUNK, flat.size)])


@functools.cache
def finite_chunks(dtype: str) -> Any:
    """The chunked check of a float32 or float64 array as a team kernel (autotune.codegen.team: its
    last two arguments are the range), compiled (or loaded from the disk cache) on first use."""
    return healing_njit(f"void({dtype}[::1], uint8[::1], int64, int64)", nogil=True, cache=True)(_finite_chunks)


RAN, NONFINITE, OVERLAP, STRIDED = 0, 1, 2, 3  # what a call into an output did (Invoker.checked and others)


@healing_njit(nogil=True, cache=True)
def _strided(inputs):  # type: ignore[no-untyped-def]
    """Whether one of the arrays `inputs` is not C-contiguous (by its strides, as NumPy's flag: a
    dimension of extent 1 takes any stride; an empty array is contiguous). The compiled entry's
    own types say C-contiguous, but its unboxing copies whatever strides an array has."""
    strided = False
    for a in literal_unroll(inputs):
        if a.size > 0:
            step = a.itemsize
            for d in range(a.ndim - 1, -1, -1):
                if a.shape[d] != 1 and a.strides[d] != step:
                    strided = True
                step *= a.shape[d]
    return strided


@healing_njit(nogil=True, cache=True)
def _overlaps(inputs, out):  # type: ignore[no-untyped-def]
    """Whether C-contiguous `out` shares a byte with one of the C-contiguous arrays `inputs`."""
    lo = out.ctypes.data
    hi = lo + out.nbytes
    apart = True
    for a in literal_unroll(inputs):
        start = a.ctypes.data
        apart = apart and (a.nbytes == 0 or out.nbytes == 0 or start + a.nbytes <= lo or hi <= start)
    return not apart


@healing_njit(nogil=True, cache=True)
def _refused(inputs, out):  # type: ignore[no-untyped-def]
    """STRIDED or OVERLAP when a call of `inputs` into `out` must not run; RAN when it may."""
    if _strided(inputs):
        return STRIDED
    if _overlaps(inputs, out):
        return OVERLAP
    return RAN


@healing_njit(nogil=True, cache=True)
def _invoke_checked(address, inputs, rest):  # type: ignore[no-untyped-def]
    refused = _refused(inputs, rest[0])
    if refused != RAN:
        return refused
    ok = True
    for a in literal_unroll(inputs):
        ok = ok and finite(a)
    if not ok:
        return NONFINITE
    _call_at(address, inputs + rest)
    return RAN


@healing_njit(nogil=True, cache=True)
def _invoke_checked_output(address, inputs, rest):  # type: ignore[no-untyped-def]
    refused = _refused(inputs, rest[0])
    if refused != RAN:
        return refused
    _call_at(address, inputs + rest)
    return RAN if finite(rest[0]) else NONFINITE


@healing_njit(nogil=True, cache=True)
def _invoke_apart(address, inputs, rest):  # type: ignore[no-untyped-def]
    refused = _refused(inputs, rest[0])
    if refused != RAN:
        return refused
    _call_at(address, inputs + rest)
    return RAN


_trampolines: dict[Any, Callable[..., Any]] = {}


class Invoker:
    """A compiled function (one signature, no exceptions raised), callable from Python."""

    def __init__(self, fn: Any) -> None:
        (sig,) = fn.nopython_signatures
        if sig.return_type != types.void:
            raise TypeError(f"an Invoker calls void functions, not {sig}")
        self.address = _get_wrapper_address(fn, sig)
        self._args = tuple(sig.args)
        call = _trampolines.get(sig.args)
        if call is None:
            call = _trampolines[sig.args] = _invoke.compile((types.int64, types.Tuple(sig.args)))
        self._call = call

    def __call__(self, *args: Any) -> None:
        self._call(self.address, args)

    def checked(self, n_inputs: int) -> Callable[[tuple[Any, ...], tuple[Any, ...]], int]:
        """`call(inputs, rest)`: the function run on `inputs + rest` (its first n_inputs arguments,
        then the others: the first of them an array, the output) and RAN (0), unless the output
        shares memory with an input (OVERLAP), an input is not C-contiguous (STRIDED) or an input
        array holds NaN or ±Inf (NONFINITE): then nothing runs. The output must be C-contiguous;
        every array of the compiled function's dtype and number of dimensions (the caller checks:
        the compiled entry does not)."""
        return self._into(n_inputs, _invoke_checked)

    def checked_output(self, n_inputs: int) -> Callable[[tuple[Any, ...], tuple[Any, ...]], int]:
        """checked() for a function whose output shows every NaN and Inf of its inputs
        (autotune.ir.nonfinite): it runs first, then NONFINITE says its output holds NaN or ±Inf
        (an input's, or an overflow); RAN otherwise. OVERLAP and STRIDED run nothing, as there."""
        return self._into(n_inputs, _invoke_checked_output)

    def apart(self, n_inputs: int) -> Callable[[tuple[Any, ...], tuple[Any, ...]], int]:
        """checked() without the inputs' NaN/Inf check: RAN, or OVERLAP or STRIDED running nothing."""
        return self._into(n_inputs, _invoke_apart)

    def _into(self, n_inputs: int, trampoline: Any) -> Callable[[tuple[Any, ...], tuple[Any, ...]], int]:
        key = (self._args, n_inputs, trampoline)
        call = _trampolines.get(key)
        if call is None:
            head, tail = self._args[:n_inputs], self._args[n_inputs:]
            call = _trampolines[key] = trampoline.compile((types.int64, types.Tuple(head), types.Tuple(tail)))
        return functools.partial(call, self.address)


_invokers: dict[Any, Invoker] = {}


def invoker_for(fn: Any) -> Invoker:
    """The Invoker of a Numba function with one signature (made once per function)."""
    inv = _invokers.get(fn)
    if inv is None:
        inv = _invokers[fn] = Invoker(fn)
    return inv
