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
from templates import conv2d, depthwise_conv2d, pool2d
from templates import batch_matmul, dense_bias_relu, layernorm, softmax
from templates import tpu

TEMPLATES: dict[str, Template] = {t.name: t for t in (matmul.TEMPLATE, conv2d.TEMPLATE, depthwise_conv2d.TEMPLATE, pool2d.TEMPLATE,
                                                    batch_matmul.TEMPLATE, dense_bias_relu.TEMPLATE, softmax.TEMPLATE,
                                                    layernorm.TEMPLATE)}


USER_MODULES: list[str] = []  # modules of templates registered at run time (workers import them)


HIDDEN: dict[str, Template] = dict(tpu.TPU_TEMPLATES)  # library templates resolvable by name, not listed: the TPU kernels


DERIVED: dict[str, Template] = {}  # template-free ops (@autotune.op, definitions read from logs): resolvable, not listed


def register(template: Template, module: str | None = None, *, listed: bool = True) -> Template:
    """Add a template of your own, so tasks, logs and the CLI can name it.

    Pass `module=__name__` from the module that defines it: measurement workers import that
    module (which registers the template again in the worker). Names in a log are only looked
    up, never imported, so a log cannot make autotune import code. Template-free ops
    (`@autotune.op` on a definition) need no module: workers get their definition as data.
    """
    if not isinstance(template, Template):
        raise AutotuneError(f"register() takes a Template, got {type(template).__name__}")
    registry = TEMPLATES if listed else DERIVED
    existing = TEMPLATES.get(template.name) or HIDDEN.get(template.name) or DERIVED.get(template.name)
    if existing is not None and existing is not template and existing.define is not template.define \
            and (listed or template.name in TEMPLATES or template.name in HIDDEN):
        raise AutotuneError(f"an operator named {template.name!r} is already registered")
    registry[template.name] = template
    if module == "__main__":  # a script: workers run it by path under another name (its main guard holds)
        import sys
        path = getattr(sys.modules["__main__"], "__file__", None)
        module = f"file:{path}" if path else None
    if module and module != "__autotune_main__" and module not in USER_MODULES:
        USER_MODULES.append(module)
    return template


def get_template(name: str | Template) -> Template:
    """A template by name (or the template itself)."""
    if isinstance(name, Template):
        return name
    for registry in (TEMPLATES, HIDDEN, DERIVED):
        if name in registry:
            return registry[name]
    raise AutotuneError(f"unknown operator {name!r}; known operators: {', '.join(sorted(TEMPLATES))}")


__all__ = ["CodegenOptions", "DERIVED", "HIDDEN", "TEMPLATES", "Template", "USER_MODULES", "get_template", "register"]
