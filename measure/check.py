"""Output checks of measured kernels: the engine's (autotune.codegen.check), so a kernel the
workers accept is one `load_best` accepts."""
from autotune.codegen.check import REL_TOL, CheckResult, check_output, poisoned

__all__ = ["REL_TOL", "CheckResult", "check_output", "poisoned"]
