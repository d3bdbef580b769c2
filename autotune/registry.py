"""The one registry idiom of every extension point (templates, strategies, cost models, runners,
backends): a name maps to the extension itself, or to the "module:attribute" where it lives, imported
on first use (for extensions whose module pulls in a heavy or optional package). The CLI lists
`names()`; an unknown name is one clear error naming the choices.

Adding an extension is one module plus one `register` call (or one entry where the registry is made).

    >>> from autotune.registry import Registry
    >>> functions = Registry("function", {"len": len, "abs": "builtins:abs"})
    >>> functions.get("abs")(-2), functions.names()
    (2, ('abs', 'len'))
    >>> functions.get("max")
    Traceback (most recent call last):
    ...
    autotune.errors.AutotuneError: unknown function 'max'; choose one of abs, len

An entry registered with listed=False resolves by name but is not offered (not in `names()`, nor
iterated): `in` asks "does this name resolve?", iteration gives the choices.

    >>> functions.register("round", round, listed=False)
    <built-in function round>
    >>> "round" in functions, functions.names(), functions.names(hidden=True)
    (True, ('abs', 'len'), ('abs', 'len', 'round'))

Extending
---------
Every extension point is one `Registry`; add to it with `register(name, entry)` (a "module:attribute"
string is imported on first use), from your own module or at startup:

- operators: `templates.TEMPLATES` (templates/__init__.py), name -> Template. Add one with
  `templates.register(template, module=__name__)` (not `TEMPLATES.register`: it also tells measurement
  workers which module to import). Listed: the operator library; unlisted: the TPU kernel templates and
  template-free ops (`@autotune.op`, definitions read from logs).
- search strategies: `autotune.search.REGISTRY` (autotune/search/__init__.py), name ->
  factory(space, seed) -> Strategy; `make_strategy(name, space, seed)` makes one.
- cost models: `autotune.cost_model.REGISTRY` (autotune/cost_model/__init__.py), name -> ModelEntry
  (the model class as "module:Class", how to make a fresh one, its flags and optional packages);
  `make_model` / `load_model`.
- runners: `autotune.tuning.RUNNERS` (autotune/tuning.py), name -> factory(*, options=None,
  address=None) -> Runner (a runner class offers it as a `from_options` classmethod, registered as
  "module:Class.from_options"); `make_runner(name, options=..., address=...)` makes one.
- backends: `autotune.backends` (autotune/backends/__init__.py), name -> Backend (a backend's
  `runner` is a name in RUNNERS).

The CLI's choices (`--strategy`, `--cost-model`, `--runner`, `autotune list`) are these registries' names.
"""
from __future__ import annotations

import importlib
from typing import Any, Generic, Iterator, Mapping, TypeVar

from autotune.errors import AutotuneError

T = TypeVar("T")
_MISSING: Any = object()


class Lazy(str):
    """A registry entry given as "module:attribute": imported when first asked for (the attribute may be
    dotted: "module:Class.factory")."""

    def load(self) -> Any:
        module, attr = self.split(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


class Registry(Generic[T]):
    """name -> extension (or the Lazy "module:attribute" of one). `kind` names the extension point
    in errors ("strategy", "runner", ...); `error`: the AutotuneError subclass an unknown name raises.

    Reads like a mapping of the listed names: `registry[name]`, `items()`, `values()`, `len`, iteration;
    `registry[name] = entry` replaces (keeping whether it is listed) and `del registry[name]` removes,
    so monkeypatch.setitem works on it."""

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None,
                 error: type[AutotuneError] = AutotuneError) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, T | Lazy] = {}
        self._unlisted: set[str] = set()
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(self, name: str, entry: T | str, *, replace: bool = False, listed: bool = True) -> T | str:
        """Add an extension under `name` (a str entry is a lazy "module:attribute"). Registering another
        extension under a taken name is an error unless replace=True; the same one again is a no-op.
        listed=False: resolvable by name, not among `names()`."""
        if isinstance(entry, str) and not isinstance(entry, Lazy):
            if entry.count(":") != 1:
                raise AutotuneError(f"a lazy {self.kind} entry is 'module:attribute', got {entry!r}")
            entry = Lazy(entry)
        old = self._entries.get(name)
        if old is not None and old is not entry and old != entry and not replace:
            raise self.error(f"a {self.kind} named {name!r} is already registered")
        self._entries[name] = entry
        if listed:
            self._unlisted.discard(name)
        else:
            self._unlisted.add(name)
        return entry

    def unregister(self, name: str) -> None:
        """Remove an extension (an unknown name: the registry's error)."""
        if name not in self._entries:
            self.get(name)
        del self._entries[name]
        self._unlisted.discard(name)

    def get(self, name: str, default: Any = _MISSING) -> T:
        """The extension of this name (importing it if it was registered lazily). An unknown name is
        the registry's error naming the choices, or `default` when one is given."""
        entry = self._entries.get(name)
        if entry is None:
            if default is not _MISSING:
                return default  # type: ignore[no-any-return]
            raise self.error(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")
        if isinstance(entry, Lazy):
            entry = self._entries[name] = entry.load()
        return entry  # type: ignore[return-value]

    def names(self, *, hidden: bool = False) -> tuple[str, ...]:
        """The listed names, sorted (what the CLI offers); hidden=True: every resolvable name."""
        return tuple(sorted(n for n in self._entries if hidden or n not in self._unlisted))

    def listed(self, name: str) -> bool:
        """Whether `name` is registered and listed."""
        return name in self._entries and name not in self._unlisted

    def items(self) -> list[tuple[str, T]]:
        """(name, extension) of the listed names (importing lazy ones)."""
        return [(n, self.get(n)) for n in self.names()]

    def values(self) -> list[T]:
        return [self.get(n) for n in self.names()]

    def keys(self) -> tuple[str, ...]:
        return self.names()

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __setitem__(self, name: str, entry: T | str) -> None:
        self.register(name, entry, replace=True, listed=name not in self._unlisted)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {', '.join(self.names(hidden=True))})"


__all__ = ["Lazy", "Registry"]
