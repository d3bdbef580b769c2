"""The version of autotune (recorded in every log line's target)."""
__version__ = "0.1.0"
