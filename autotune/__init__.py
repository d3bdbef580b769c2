"""autotune: an operator-level tensor-program autotuner that compiles schedules with Numba."""
from autotune.environment import configure_numba

configure_numba()

from autotune.errors import AutotuneError, CompileError, DefinitionError, ScheduleError, ShapeError, SpaceError  # noqa: E402
from autotune.ir import te  # noqa: E402
from autotune.schedule import Schedule  # noqa: E402

__version__ = "0.1.0"
__all__ = ["AutotuneError", "CompileError", "DefinitionError", "ScheduleError", "ShapeError", "SpaceError",
           "Schedule", "te", "__version__"]
