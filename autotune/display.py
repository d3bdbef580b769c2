"""Task keys as a person reads them. A stored key (Task.key, in every record) stays as it is; where
the command line and the report show one, they show `readable_key(key)`: a template-free op's
inputs with their shapes, a library operator's dims by name.

    >>> readable_key("dense_relu|X0=256,X1=256,W0=256,W1=256,b0=256|float32|threads=2")
    'dense_relu X[256,256] W[256,256] b[256] float32 threads=2'
    >>> readable_key("matmul|M=256,N=256,K=128|float32|threads=1")
    'matmul M=256 N=256 K=128 float32 threads=1'
    >>> readable_key("not a key")
    'not a key'
"""
from __future__ import annotations


def readable_key(key: str) -> str:
    """A task key (op|dim=v,...|dtype|threads=N) readable; anything else is returned unchanged."""
    parts = key.split("|")
    if len(parts) < 3:
        return key
    op, dims, *rest = parts
    try:
        items = [(name, int(v)) for name, v in (d.split("=") for d in dims.split(",") if d)]
    except ValueError:
        return key
    shape = _by_input(op, items) or " ".join(f"{k}={v}" for k, v in items)
    return " ".join(x for x in (op, shape, *rest) if x)


def _by_input(op: str, items: list[tuple[str, int]]) -> str | None:
    """A template-free op's dims (X0, X1, W0: an input and its axis) as X[..] W[..]; None otherwise."""
    from autotune.templates import is_library
    from autotune.templates.base import argument_dims
    try:
        if is_library(op):
            return None
    except Exception:  # noqa: BLE001 - showing a key never fails
        return None
    order = argument_dims(k for k, _ in items)
    if order is None:
        return None
    value = dict(items)
    inputs: dict[str, list[int]] = {}
    for name in order:
        inputs.setdefault(name[:-1], []).append(value[name])
    return " ".join(f"{name}[{','.join(map(str, dims))}]" for name, dims in inputs.items())


__all__ = ["readable_key"]
