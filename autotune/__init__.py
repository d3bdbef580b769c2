"""autotune: an operator-level tensor-program autotuner that compiles schedules with Numba.

Its operator library and runners are `autotune.templates` and `autotune.measure`: installed inside
this package, and in a checkout the `templates/` and `measure/` folders beside it
(autotune.environment.serve_checkout). Nothing is installed at the top of site-packages but
`autotune`, so a user's own `measure.py` or `templates/` is never imported in their place.
"""
from autotune.environment import configure_numba, serve_checkout

serve_checkout()

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
