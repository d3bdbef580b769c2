"""autotune: an operator-level tensor-program autotuner that compiles schedules with Numba."""
from autotune.environment import configure_numba

configure_numba()

from autotune.errors import AutotuneError, CompileError, DefinitionError, ScheduleError, ShapeError, SpaceError  # noqa: E402
from autotune.ir import te  # noqa: E402
from autotune.schedule import Schedule  # noqa: E402

from autotune.version import __version__  # noqa: E402


def __getattr__(name: str):  # the API pulls in numba: import it on first use
    if name in ("op", "apply_history", "TunedOp"):
        from autotune import api
        return getattr(api, name)
    if name == "autotune_numba":
        from autotune import numba_tune
        return numba_tune.autotune_numba
    if name in ("tune", "retime", "load_best"):
        from autotune import replay, tuning
        return getattr(replay if name == "load_best" else tuning, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
__all__ = ["AutotuneError", "CompileError", "DefinitionError", "ScheduleError", "ShapeError", "SpaceError",
           "Schedule", "TunedOp", "apply_history", "autotune_numba", "load_best", "op", "retime", "te", "tune",
           "__version__"]
