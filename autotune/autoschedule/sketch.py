"""The base of the four sketches: a knob space derived from the program, presets, and `apply`."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping

from autotune.schedule import Schedule
from autotune.space import Config, ConfigSpace, Knob
from autotune.codegen.options import CodegenOptions

from .program import Program


class Sketch(ABC):
    """One way of scheduling a program: its knobs (`space`), known-good points (`presets`) and
    the primitives a config of them chooses (`apply`)."""

    name = ""
    # knob -> the value whose nearest the default config takes
    nearest: Mapping[str, float] = {}
    # knobs added after logs were written -> the value that builds what those logs measured
    added: Mapping[str, Any] = {}

    def __init__(self, p: Program) -> None:
        self.p = p
        self.space = ConfigSpace(self.knobs(), prune=self.prune_rule(), added=self.added)

    @abstractmethod
    def knobs(self) -> list[Knob]:
        """The sketch's knobs, derived from the program and the target."""

    def prune_rule(self) -> Callable[[Mapping[str, Any]], str | None] | None:
        """The space's prune rule, if the sketch has one."""
        return None

    @abstractmethod
    def apply(self, s: Schedule, cfg: Config) -> CodegenOptions:
        """Apply the primitives a config chooses; returns the code generator's options."""

    def presets(self) -> list[dict[str, Any]]:
        """Known-good points of the space, best guess first (here the default config)."""
        return [self.default_config()]

    def default_config(self) -> dict[str, Any]:
        """A sensible schedule: each knob at `default_value`."""
        return {k.name: self.default_value(k) for k in self.space.knobs}

    def default_value(self, k: Knob) -> Any:
        """A knob's default: the value nearest `nearest`'s, else True if it may be, else the first."""
        vals = k.values()
        if k.name in self.nearest:
            want = self.nearest[k.name]
            return min(vals, key=lambda v: abs(v - want))
        return True if any(v is True for v in vals) else vals[0]

    def workers(self, cfg: Config) -> int:
        return self.p.threads if cfg.get("parallel") and self.p.threads > 1 else 1

    @staticmethod
    def fresh_tensor(s: Schedule, name: str) -> str:
        """`name`, with underscores appended until no tensor of `s` has it."""
        while name in s.tensors:
            name += "_"
        return name
