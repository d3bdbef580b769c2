"""A user's hand-written Numba kernel as data (autotune.autotune_numba): its source, the module-level
names it reads, its arguments' shapes and dtypes and how its outputs are checked. Measurement
workers rebuild it from this data (`build`), never from pickled code; tuning logs carry it.

A spec is JSON::

    {"name": "add_one", "source": "def add_one(x, out, n): ...", "sha256": <of the source>,
     "globals": {"np": {"module": "numpy"}, "prange": {"from": "numba", "attr": "prange"},
                 "SCALE": {"value": 2.0}},
     "constants": ["BLOCK"],           # the config constants (compile-time globals)
     "args": [{"name": "x", "array": {"shape": [10], "dtype": "float64"}},
              {"name": "n", "value": 10}, {"name": "a", "scalar": "float32", "value": 1.5}],
     "key": ["n"], "outputs": null, "restore": [], "zero": [], "fastmath": false, "rtol": null}

`check_spec` validates such data read from an untrusted place (a log) without running anything.
SECURITY: a spec's source is code. `build` compiles it (and Numba's `objmode` runs arbitrary
Python), so only a spec whose source the user vouches for may be built: one made from the
user's own function in this process, or one whose source's SHA-256 the user supplies
(autotune.numba_tune.replay_record). A log never gets its source compiled on its own say-so.

Example::

    >>> spec = {"name": "inc", "source": "def inc(x):\\n    x[0] += STEP\\n", "globals": {},
    ...         "constants": ["STEP"], "args": [{"name": "x", "array": {"shape": [1], "dtype": "float64"}}],
    ...         "key": ["x"], "outputs": None, "restore": [], "zero": [], "fastmath": False, "rtol": None}
    >>> check_spec(spec)["sha256"] == source_sha256(spec["source"])
    True
    >>> op_name(check_spec(spec))[:10]
    'numba:inc:'
"""
from __future__ import annotations

import ast
import builtins
import dis
import hashlib
import importlib
import inspect
import json
import textwrap
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from autotune.codegen.check import REL_TOL
from autotune.errors import AutotuneError

MODULES = ("numpy", "math", "cmath", "numba")  # the modules a kernel may use by name
CONSTANTS = (bool, int, float)  # module-level values passed to the worker as constants
MAX_SOURCE = 1 << 16  # characters of a kernel's source
MAX_ARGS, MAX_NAMES, MAX_RANK = 64, 256, 32
_NAME = 64


class SpecError(AutotuneError, ValueError):
    """Kernel data that cannot describe a hand-written kernel (from a corrupt or forged log)."""


# ---- from the user's function ---------------------------------------------------------------------

def kernel_source(fn: Callable[..., Any]) -> str:
    """The source of `fn` from its `def` line on (decorators stripped), dedented."""
    where = getattr(fn, "__qualname__", repr(fn))
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError) as e:
        raise AutotuneError(f"autotune_numba needs the source of {where} to rebuild it in a worker process "
                            f"({e}); define the kernel in a file or a notebook cell") from None
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.FunctionDef) or node.name != getattr(fn, "__name__", None):
        raise AutotuneError(f"autotune_numba tunes a function defined with `def`, got {where}")
    return "\n".join(src.splitlines()[node.lineno - 1:node.end_lineno]) + "\n"


def source_sha256(source: str) -> str:
    """The SHA-256 (hex) of a kernel's source: what a user vouches for to replay it from a log."""
    return hashlib.sha256(source.encode()).hexdigest()


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def kernel_globals(fn: Callable[..., Any], constants: set[str]) -> dict[str, dict[str, Any]]:
    """How the worker rebuilds each global name the kernel reads, other than config constants and
    builtins: {"module": name}, {"from": module, "attr": name} or {"value": int/float/bool}."""
    if fn.__code__.co_freevars:
        raise AutotuneError(f"autotune_numba kernel {fn.__name__} uses {', '.join(fn.__code__.co_freevars)} of an "
                            "enclosing function; the worker rebuilds the kernel from its source alone: pass them "
                            "as arguments or config constants")
    spec: dict[str, dict[str, Any]] = {}
    for name in sorted(_global_names(fn.__code__) - constants):
        if name not in fn.__globals__:
            if hasattr(builtins, name):
                continue
            raise AutotuneError(f"autotune_numba kernel {fn.__name__} reads {name!r}, which is neither defined when "
                                f"it is decorated nor a config constant (constants: {sorted(constants)})")
        v = fn.__globals__[name]
        if isinstance(v, types.ModuleType) and v.__name__.split(".")[0] in MODULES:
            spec[name] = {"module": v.__name__}
        elif isinstance(v, CONSTANTS):
            spec[name] = {"value": v}
        else:
            attr = getattr(v, "__name__", name)
            home = next((m for m in MODULES if getattr(importlib.import_module(m), attr, None) is v), None)
            if home is None:
                raise AutotuneError(
                    f"autotune_numba kernel {fn.__name__} reads the global {name!r} ({type(v).__name__}); the "
                    "worker rebuilds the kernel from its source with only config constants, builtins, the modules "
                    f"{', '.join(MODULES)} (and names imported from them) and int/float/bool constants: inline "
                    f"{name!r} into the kernel or pass it as an argument")
            spec[name] = {"from": home, "attr": attr}
    return spec


# ---- checking data from elsewhere ---------------------------------------------------------------

def _ident(x: Any) -> bool:
    return isinstance(x, str) and 0 < len(x) <= _NAME and x.isidentifier() and not x.startswith("__")


def _real(x: Any) -> bool:
    return isinstance(x, CONSTANTS) and (not isinstance(x, float) or np.isfinite(x))


def _dtype(x: Any) -> np.dtype:
    if not isinstance(x, str) or len(x) > 16:
        raise SpecError("an argument's dtype must be a short NumPy dtype name")
    try:
        d = np.dtype(x)
    except TypeError:
        raise SpecError(f"unknown dtype {x!r}") from None
    if d.kind not in "biufc" or d.name != x:
        raise SpecError(f"dtype {x!r} is not a numeric NumPy dtype")
    return d


def _names(d: Mapping[str, Any], field: str, params: list[str], nullable: bool = False) -> None:
    v = d.get(field)
    if v is None and nullable:
        return
    if not isinstance(v, list) or not all(isinstance(n, str) and n in params for n in v):
        raise SpecError(f"kernel field {field!r} must list parameters of the kernel")


def check_spec(d: Any) -> dict[str, Any]:
    """`d` checked as kernel data (structure, sizes, names; never compiled), with its `sha256`
    recomputed from its source: SpecError (one line) if it is no such data."""
    if not isinstance(d, dict):
        raise SpecError("kernel data must be a JSON object")
    name, source = d.get("name"), d.get("source")
    if not _ident(name):
        raise SpecError("kernel field 'name' must be an identifier")
    if not isinstance(source, str) or not 0 < len(source) <= MAX_SOURCE:
        raise SpecError(f"kernel field 'source' must be text of at most {MAX_SOURCE} characters")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        raise SpecError("kernel field 'source' is not Python source") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != name:
        raise SpecError(f"kernel field 'source' must be one `def {name}(...)`")
    fdef = tree.body[0]
    params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs]
    g = d.get("globals")
    if not isinstance(g, dict) or len(g) > MAX_NAMES:
        raise SpecError("kernel field 'globals' must be an object")
    for k, how in g.items():
        ok = _ident(k) and isinstance(how, dict) and (
            set(how) == {"module"} and isinstance(how["module"], str) and how["module"].split(".")[0] in MODULES
            and all(p.isidentifier() for p in how["module"].split("."))
            or set(how) == {"from", "attr"} and how["from"] in MODULES and _ident(how["attr"])
            or set(how) == {"value"} and _real(how["value"]))
        if not ok:
            raise SpecError(f"kernel global {str(k)[:_NAME]!r} must be a module of {', '.join(MODULES)}, a name "
                            "imported from one, or an int/float/bool constant")
    constants = d.get("constants")
    if not isinstance(constants, list) or len(constants) > MAX_NAMES or not all(
            _ident(c) and c not in params and c not in g for c in constants):
        raise SpecError("kernel field 'constants' must list identifiers that are no parameter or global")
    args = d.get("args")
    if not isinstance(args, list) or len(args) > MAX_ARGS or [a.get("name") if isinstance(a, dict) else None
                                                              for a in args] != params:
        raise SpecError("kernel field 'args' must describe each parameter of the kernel, in order")
    for a in args:
        if set(a) == {"name", "array"} and isinstance(a["array"], dict) and set(a["array"]) == {"shape", "dtype"}:
            shape = a["array"]["shape"]
            if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
                    isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 1 << 40 for n in shape):
                raise SpecError(f"argument {a['name']!r} has no valid shape")
            _dtype(a["array"]["dtype"])
        elif set(a) == {"name", "scalar", "value"}:
            kind = _dtype(a["scalar"]).kind
            v = a["value"]
            if not (_real(v) if kind != "c" else isinstance(v, list) and len(v) == 2 and all(map(_real, v))):
                raise SpecError(f"argument {a['name']!r} has no valid scalar value")
        elif set(a) == {"name", "value"}:
            if a["value"] is not None and not _real(a["value"]):
                raise SpecError(f"argument {a['name']!r} must be a bool, int, float or null")
        else:
            raise SpecError(f"argument {a['name']!r} must be an array, a scalar or a value")
    _names(d, "key", params)
    _names(d, "outputs", params, nullable=True)
    _names(d, "restore", params)
    _names(d, "zero", params)
    if not isinstance(d.get("fastmath"), bool):
        raise SpecError("kernel field 'fastmath' must be true or false")
    rtol = d.get("rtol")
    if rtol is not None and not (_real(rtol) and not isinstance(rtol, bool) and 0 <= rtol <= 1):
        raise SpecError("kernel field 'rtol' must be null or a number in [0, 1]")
    fields = ("name", "source", "globals", "constants", "args", "key", "outputs", "restore", "zero", "fastmath", "rtol")
    return {**{k: d.get(k) for k in fields}, "sha256": source_sha256(source)}


def op_name(spec: Mapping[str, Any]) -> str:
    """The operator name of a kernel's records: "numba:<name>:<8 hex digits of its source's SHA-256>",
    so an edited kernel is another task."""
    return f"numba:{spec['name']}:{source_sha256(spec['source'])[:8]}"


def check_config(spec: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """A config of this kernel: its config constants set to bools, ints, finite floats or short
    strings (SpecError otherwise)."""
    if not isinstance(config, Mapping) or not set(config) <= set(spec["constants"]):
        raise SpecError(f"a config of {spec['name']} sets some of its constants {spec['constants']}, got "
                        f"{sorted(config) if isinstance(config, Mapping) else type(config).__name__}")
    for k, v in config.items():
        if not (_real(v) or isinstance(v, str) and len(v) <= 256):
            raise SpecError(f"config value {k}={v!r} must be a bool, int, float or str")
    return dict(config)


# ---- building (trusted specs only: see the module docstring) --------------------------------------

@dataclass
class HandwrittenKernel:
    """A Numba dispatcher of a hand-written kernel, compiled for the spec's argument types."""
    dispatcher: Any
    compile_seconds: float

    def __call__(self, *args: Any) -> Any:
        return self.dispatcher(*args)


def build(spec: Mapping[str, Any], config: Mapping[str, Any], *, compile_now: bool = True) -> HandwrittenKernel:
    """The kernel of a spec (whose source the caller vouches for) with `config`'s constants, compiled
    for the spec's argument types unless compile_now=False (then on its first call)."""
    import linecache

    import numba
    t0 = time.thread_time()  # CPU time: a paused or crowded process is not charged for waiting
    g: dict[str, Any] = {"__builtins__": builtins, "__name__": "__autotune_numba__"}
    for name, how in spec["globals"].items():
        if "module" in how:
            g[name] = importlib.import_module(how["module"])
        elif "from" in how:
            g[name] = getattr(importlib.import_module(how["from"]), how["attr"])
        else:
            g[name] = how["value"]
    g.update(config)
    filename = f"<autotune_numba {spec['name']}>"
    linecache.cache[filename] = (len(spec["source"]), None, spec["source"].splitlines(True), filename)
    exec(compile(spec["source"], filename, "exec"), g)
    dispatcher = numba.njit(nogil=True, fastmath=bool(spec["fastmath"]))(g[spec["name"]])
    if compile_now:
        dispatcher.compile(tuple(numba.typeof(_example(a)) for a in spec["args"]))
    return HandwrittenKernel(dispatcher, time.thread_time() - t0)


def _example(a: Mapping[str, Any]) -> Any:
    """A value of an argument's type (an empty C-contiguous array of its rank and dtype)."""
    if "array" in a:
        return np.empty((0,) * len(a["array"]["shape"]), a["array"]["dtype"])
    return scalar_value(a)


def scalar_value(a: Mapping[str, Any]) -> Any:
    """The value a scalar or value argument's data describes."""
    if "scalar" in a:
        v = a["value"]
        return np.dtype(a["scalar"]).type(complex(*v) if isinstance(v, list) else v)
    return a["value"]


def random_arguments(spec: Mapping[str, Any], seed: int = 0) -> list[Any]:
    """Arguments of the spec's shapes and dtypes, arrays filled from a seeded generator (floats in
    [0, 1), integers in [0, 10), random bools): what a replay runs the kernel on."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for a in spec["args"]:
        if "array" not in a:
            out.append(scalar_value(a))
            continue
        shape, dt = tuple(a["array"]["shape"]), np.dtype(a["array"]["dtype"])
        if dt.kind == "b":
            v = rng.random(shape) < 0.5
        elif dt.kind in "iu":
            v = rng.integers(0, 10, shape)
        elif dt.kind == "c":
            v = rng.random(shape) + 1j * rng.random(shape)
        else:
            v = rng.random(shape)
        out.append(np.ascontiguousarray(v.astype(dt)))
    return out


# ---- checking outputs --------------------------------------------------------------------------

def tolerance(dtype: np.dtype, rtol: float | None) -> float:
    """The tolerance of an output of `dtype`, relative to max(1, max|expected|): `rtol`, else the
    common table's (autotune.codegen.check.REL_TOL, of the real dtype of a complex one), at least
    4 ulps; 0 for integers and bools.

    >>> tolerance(np.dtype("float32"), None), tolerance(np.dtype("complex128"), None), tolerance(np.dtype("int8"), None)
    (0.002, 1e-09, 0.0)
    """
    if rtol is not None:
        return rtol
    if dtype.kind not in "fc":
        return 0.0
    real = np.finfo(dtype).dtype
    return max(REL_TOL.get(real.name, 1e-3), 4 * float(np.finfo(real).eps))


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def differs(got: np.ndarray, want: np.ndarray, name: str, against: str, rtol: float | None) -> str | None:
    """Why `got` is not `want` (None if it is): elements compared with a tolerance relative to max|want|."""
    if got.shape != want.shape:
        return f"{name} has shape {list(got.shape)}, {against} gives {list(want.shape)}"
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        tol = max(tolerance(d, rtol) for d in (got.dtype, want.dtype))
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max()) if finite.size else 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~((got == want) | (np.abs(got - want) <= tol * scale) | (np.isnan(got) & np.isnan(want)))
    else:
        bad = got != want
    n = int(np.count_nonzero(bad))
    if not n:
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    return (f"{n} of {want.size} elements of {name} differ from {against}, first at {list(first)}: "
            f"{got[first].item()!r} instead of {want[first].item()!r}")


def wrong(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], named: bool, against: str,
          rtol: float | None) -> str | None:
    """Why a config's outputs `got` are wrong against `want` (None if right). Unless the outputs
    were named, writing an argument `against` leaves alone is wrong too."""
    extra = sorted(set(got) - set(want) - {"return"}) if not named else []
    if extra:
        return (f"writes {', '.join(extra)}, which {against} leaves unchanged (if that is scratch space, "
                "name the outputs with outputs=[...])")
    for name, w in want.items():
        if name not in got:
            return f"returns nothing, {against} returns a value" if name == "return" else f"{name} is not written"
        why = differs(np.asarray(got[name]), np.asarray(w), name, against, rtol)
        if why:
            return why
    return None


def canonical(spec: Mapping[str, Any]) -> str:
    """The spec as canonical JSON text."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
