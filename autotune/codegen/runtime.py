"""Helpers that generated kernels import: a fixed-size stack buffer for accumulator tiles."""
from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


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
