"""Argument types of the command line (argparse `type=`): checked numbers, one clear message each.

    >>> int_at_least(1)("3"), float_where(lambda v: v > 0, "seconds > 0")("0.5")
    (3, 0.5)
"""
from __future__ import annotations

import argparse
import math
from typing import Callable


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= low."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return parse


def float_where(ok: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """A finite number for which ok(value) holds; else "must be <expected>, got ..."."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value
    return parse
