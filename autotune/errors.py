"""The domain errors autotune raises. Each names what is wrong and how to fix it."""
from __future__ import annotations


def install_hint(extra: str) -> str:
    """How to add an optional extra: autotune installs from its checkout (README), so the command
    names the checkout, never a package index's 'autotune' (another project may hold that name).

    >>> install_hint("gnn")
    "pip install '.[gnn]' in autotune's checkout"
    """
    return f"pip install '.[{extra}]' in autotune's checkout"


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class DefinitionError(AutotuneError, ValueError):
    """A compute definition is malformed (bad shape, unknown dtype, misplaced reduction)."""


class ScheduleError(AutotuneError, ValueError):
    """A schedule step is invalid. The message names the step, the axis and why.

    Example::

        >>> from autotune.errors import ScheduleError
        >>> raise ScheduleError("split", "i", "factor must be a positive integer, got 0")
        Traceback (most recent call last):
        ...
        autotune.errors.ScheduleError: split(axis 'i'): factor must be a positive integer, got 0
    """

    def __init__(self, step: str, axis: str | None, why: str) -> None:
        self.step, self.axis, self.why = step, axis, why
        where = f"{step}(axis {axis!r})" if axis is not None else step
        super().__init__(f"{where}: {why}")


class SpaceError(AutotuneError, ValueError):
    """A config does not belong to its search space (unknown knob, out-of-space value)."""


class ShapeError(AutotuneError, ValueError):
    """A shape given by the user does not fit the operator."""


class CompileError(AutotuneError, RuntimeError):
    """Numba failed to compile generated source. The message carries the source path."""


class CacheError(AutotuneError):
    """The compile cache cannot be used (a directory that cannot be written): the environment's
    fault, not a config's. The message names the directory and how to pick another."""
