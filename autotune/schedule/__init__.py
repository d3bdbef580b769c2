"""Schedules: traces of frozen steps over the stages of a compute definition."""
from autotune.schedule.schedule import Schedule, Stage
from autotune.schedule.steps import Step, step_from_json

__all__ = ["Schedule", "Stage", "Step", "step_from_json"]
