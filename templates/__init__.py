"""The operator library: every template autotune can tune, by name.

Example::

    >>> from autotune.templates import get_template, TEMPLATES
    >>> "matmul" in TEMPLATES
    True

NaN, Inf and signed zero. Kernels are compiled with fast-math flags that let LLVM assume no NaN
or Inf and ignore the sign of zero (nnan, ninf, nsz; autotune.environment.FASTMATH). So a tuned
op (autotune.op) and a kernel of Task.build or autotune.load_best check every call's inputs
(check_finite on by default) and answer a call whose inputs hold NaN or +-Inf with the
operator's NumPy reference, with a RuntimeWarning: for NaN and Inf inputs every operator below
gives exactly NumPy's answer. matmul, batch_matmul, conv2d and depthwise_conv2d (sums and
products only: autotune.ir.nonfinite) compile without nnan and ninf and check their output after
the run instead: a NaN or Inf input leaves NaN or Inf there, and so does an overflow, and both
calls are answered by NumPy. -0.0 inputs go to the kernel: its values equal NumPy's (-0.0 ==
0.0), the sign of a zero may not. tests/templates/test_nonfinite.py pins both for every template
and for definitions (te.sum, te.max_reduce, elementwise).

With the check off (autotune.op(..., check_finite=False), kernel.check_finite = False) the kernel
answers; what it gave in those tests (default schedules and a few random configs, x86-64; not a
contract: another schedule, target or LLVM may differ)::

    operator           NaN in an input              +-Inf in an input             all inputs -0.0
    matmul             as NumPy                     as NumPy                      as NumPy (+0.0)
    batch_matmul       as NumPy                     as NumPy                      as NumPy (+0.0)
    conv2d  direct     as NumPy                     as NumPy                      as NumPy (+0.0)
            Winograd   NaN over every 4x4 output tile reading it (the transforms  as NumPy (+0.0)
            (3x3)      add and subtract inputs: Inf - Inf is NaN), where NumPy has
                       NaN or +-Inf in fewer outputs
    depthwise_conv2d   as NumPy                     as NumPy                      as NumPy (+0.0)
    pool2d             dropped: a window max        as NumPy                      as NumPy (-0.0)
                       ignores the NaN
    dense_bias_relu    as NumPy                     as NumPy                      as NumPy (+0.0)
    softmax            as NumPy (the row NaN)       as NumPy; -inf (a mask) is    as NumPy
                                                    handled by design: exp(-inf)
                                                    is about 1e-38 (exp's clamp),
                                                    so a masked output is about
                                                    1e-38 / row sum, not 0
    layernorm          as NumPy (the row NaN)       as NumPy (the row NaN)        -0.0 where NumPy: +0.0
    definitions: te.sum as NumPy; te.max_reduce (te.min_reduce, te.max, te.min) may drop a NaN;
    elementwise arithmetic as NumPy; a sum of -0.0 only: -0.0 where the reference gives +0.0

Not covered by the check: a NaN or Inf that the computation itself makes from finite inputs (a
definition's log of a negative number or 0/0, a float32 overflow) meets the same flags: a max
may drop it, and the result is unspecified where NumPy's is NaN or Inf.
"""
from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.codegen.options import CodegenOptions
from autotune.registry import Registry
from autotune.templates.base import Template
from autotune.templates import matmul
from autotune.templates import conv2d, depthwise_conv2d, pool2d
from autotune.templates import batch_matmul, dense_bias_relu, layernorm, softmax
from autotune.backends.tpu import templates as tpu

# name -> Template: every operator autotune can resolve, in one registry. Listed (`names()`, iteration,
# `autotune list`): the operator library and templates registered with listed=True. Unlisted, resolvable
# by name: the TPU kernel templates (autotune.backends.tpu.templates) and template-free ops
# (@autotune.op, definitions read from logs).
TEMPLATES: Registry[Template] = Registry("operator", {t.name: t for t in (
    matmul.TEMPLATE, conv2d.TEMPLATE, depthwise_conv2d.TEMPLATE, pool2d.TEMPLATE, batch_matmul.TEMPLATE,
    dense_bias_relu.TEMPLATE, softmax.TEMPLATE, layernorm.TEMPLATE)})
for _name, _template in tpu.TPU_TEMPLATES.items():
    TEMPLATES.register(_name, _template, listed=False)
del _name, _template


USER_MODULES: list[str] = []  # modules of templates registered at run time (workers import them)


def is_library(name: str) -> bool:
    """Whether `name` is a library operator: a listed template or a TPU kernel template (a template-free
    op, registered unlisted, may not take its name)."""
    return TEMPLATES.listed(name) or name in tpu.TPU_TEMPLATES


def register(template: Template, module: str | None = None, *, listed: bool = True) -> Template:
    """Add a template of your own, so tasks, logs and the CLI can name it.

    Pass `module=__name__` from the module that defines it: measurement workers import that
    module (which registers the template again in the worker). Names in a log are only looked
    up, never imported, so a log cannot make autotune import code. Template-free ops
    (`@autotune.op` on a definition) need no module: workers get their definition as data.
    listed=False: resolvable by name, not listed (a template-free op; it may replace another one).
    """
    if not isinstance(template, Template):
        raise AutotuneError(f"register() takes a Template, got {type(template).__name__}")
    name = template.name
    existing = TEMPLATES.get(name, None)
    library = is_library(name)
    if existing is not None and existing is not template and existing.define is not template.define \
            and (listed or library):
        raise AutotuneError(f"an operator named {name!r} is already registered")
    if listed or not library:  # an unlisted twin of a library operator leaves the library's entry
        TEMPLATES.register(name, template, replace=True, listed=listed)
    if module == "__main__":  # a script: workers run it by path under another name (its main guard holds)
        import sys
        path = getattr(sys.modules["__main__"], "__file__", None)
        module = f"file:{path}" if path else None
    if module and module != "__autotune_main__" and module not in USER_MODULES:
        USER_MODULES.append(module)
    return template


def get_template(name: str | Template) -> Template:
    """A template by name (or the template itself); an unknown name is an error listing the operators."""
    if isinstance(name, Template):
        return name
    return TEMPLATES.get(name)


__all__ = ["CodegenOptions", "TEMPLATES", "Template", "USER_MODULES", "get_template", "is_library", "register"]
