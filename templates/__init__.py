"""The operator library: every template autotune can tune, by name.

Example::

    >>> from templates import get_template, TEMPLATES
    >>> "matmul" in TEMPLATES
    True
"""
from __future__ import annotations

from autotune.errors import AutotuneError
from templates.base import CodegenOptions, Template
from templates import matmul

TEMPLATES: dict[str, Template] = {t.name: t for t in (matmul.TEMPLATE,)}


def get_template(name: str | Template) -> Template:
    """A template by name (or the template itself)."""
    if isinstance(name, Template):
        return name
    if name not in TEMPLATES:
        raise AutotuneError(f"unknown operator {name!r}; known operators: {', '.join(sorted(TEMPLATES))}")
    return TEMPLATES[name]


__all__ = ["CodegenOptions", "TEMPLATES", "Template", "get_template"]
