"""The packages' layers: every module imports only its own layer or those below it, and no two
modules import each other, even through a chain or inside a function. Read from the source (ast),
so an import hidden in a function body or under `if TYPE_CHECKING:` counts as much as one at the top
of a file, and so does a string naming a project module ("autotune.backends.tpu.runner:TpuRunner", a
registry's lazy entry, or "autotune.measure.local" given to importlib): a string import is an import.

Layers, lowest first (autotune/, then templates/ and measure/ on top of the engine's parts):
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autotune", "templates", "measure")  # folders; templates/ and measure/ are autotune.templates, autotune.measure

# module prefix -> layer; the longest matching prefix decides. Lower layers may not import higher ones.
LAYERS: dict[str, int] = {
    "autotune.errors": 0, "autotune.registry": 0, "autotune.arguments": 0, "autotune.dtypes": 0, "autotune.environment": 0, "autotune.version": 0,
    "autotune.timing_lock": 0, "autotune.isa": 0, "autotune.target": 0,  # the machine: templates derive their tiles from it
    "autotune.ir": 1,
    "autotune.schedule": 2,
    "autotune.codegen": 3,
    "autotune.space": 4,
    "autotune.backends.tpu.emulator": 4,  # a pure model of a TPU core, beneath the TPU templates
    "autotune.backends.tpu.templates": 5,  # the TPU kernel templates, beside the CPU operator library
    "autotune.definition": 5, "autotune.autoschedule": 5, "autotune.templates": 5,
    "autotune.display": 6,  # task keys as a person reads them
    "autotune.cache": 6,  # the kernel cache's size and pruning
    "autotune.task": 6, "autotune.records": 6, "autotune.claims": 6, "autotune.runner": 6,
    # the cost models: over feature rows and program graphs, knowing no backend's features
    **{f"autotune.cost_model.{m}": 7 for m in ("base", "graph", "metrics", "evaluate", "xgb_model", "lgbm_model",
                                                "gnn_model", "random_model")},
    "autotune.backends": 8,  # each backend's features, graphs, priors and runner; the registry on top of them
    "autotune.cost_model": 9,  # the registry of every cost model: the learned ones and the backends' priors
    "autotune.search": 9,
    "autotune.tuner": 10, "autotune.progress": 10, "autotune.retime": 10,
    "autotune.tuning": 11,
    "autotune.measure": 11,  # runners and experiments: on top of the engine, beside the assembly point
    "autotune.api": 12, "autotune.cli": 12, "autotune.distributed": 12, "autotune.bench": 12,
    "autotune.replay": 12, "autotune.report": 12, "autotune.model_commands": 12, "autotune.numba_tune": 12,
    "autotune.backends.tpu.evaluate": 12,  # `autotune evaluate-tiles`
    "autotune.dashboard": 12,  # `autotune dashboard`
    "autotune.__main__": 12, "autotune": 13,
}
# the assembly point and the entry points pick runners: the only engine modules that import measure/
MAY_IMPORT_MEASURE = ("autotune.tuning", "autotune.bench", "autotune.distributed", "autotune.cli",
                      "autotune.report",  # report: the roofline panel and column (measure.peak)
                      "autotune.dashboard")  # the dashboard: its share-of-the-limit column (measure.peak)
# experiments (measure/experiments) may use everything: they sit on top
TOP = ("autotune.measure.experiments",)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] != "autotune":
                parts.insert(0, "autotune")
            out[".".join(parts)] = path
    return out


# a string import: "pkg.module:attribute" (a registry's lazy entry) anywhere, or "pkg.module" given to a
# call (importlib.import_module, `python -m`); the whole string. A bare module name elsewhere is a name
# (serialize.FORMAT = "autotune.definition" tags data), not an import.
STRING_IMPORT = re.compile(r"^(?:autotune|templates|measure)(?:\.\w+)+(?::[\w.]+)?$")


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules a module imports anywhere in its body (under `if TYPE_CHECKING` too), and
    those a string constant of it names in full (STRING_IMPORT)."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    passed = {id(n) for call in ast.walk(tree) if isinstance(call, ast.Call)
              for arg in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(arg)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and STRING_IMPORT.match(node.value):
            module = node.value.partition(":")[0]
            targets = [module] if module in known and (":" in node.value or id(node) in passed) else []
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_no_module_imports_a_higher_layer() -> None:
    bad = []
    for m, deps in _graph().items():
        if m.startswith(TOP):
            continue
        for d in deps:
            if d == "autotune" and m.startswith("autotune."):
                bad.append(f"{m} imports the autotune package facade (import the module it needs)")
            elif d.startswith("autotune.measure") and not m.startswith(("autotune.measure", *MAY_IMPORT_MEASURE)):
                bad.append(f"{m} imports {d}: only the assembly point and entry points pick runners")
            elif d.startswith(TOP):
                bad.append(f"{m} imports the experiment {d}")
            elif _layer(d) > _layer(m):
                bad.append(f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_walk_sees_the_project() -> None:
    graph = _graph()
    assert "autotune.tuning" in graph and "autotune.runner" in graph["autotune.tuning"]
    assert "autotune.measure.local" in graph["autotune.tuning"]  # a runner's lazy "module:attribute" entry
    assert _layer("autotune.backends.cpu.features") < _layer("autotune.search.evolutionary")
    assert _layer("autotune.cost_model.base") < _layer("autotune.backends.cpu.features")
