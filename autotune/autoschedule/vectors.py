"""The target's vector registers, as the sketches size their tiles by them."""
from __future__ import annotations

from autotune.dtypes import ITEMSIZE


def vector_target() -> tuple[int, int]:
    """(vector register bytes, vector register count) of the target in force (AUTOTUNE_TARGET, else
    this machine): the one place the auto-scheduler asks the target."""
    from autotune.target import current
    t = current()
    return t.vector_bits // 8, t.registers


def lanes(dtype: str) -> int:
    """Elements of `dtype` in one vector register."""
    return max(1, vector_target()[0] // ITEMSIZE.get(dtype, 4))
