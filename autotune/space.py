"""Search spaces: knobs declared by templates, and Configs (points of a space).

A Config is a frozen mapping knob -> value: hashable, JSON round-trippable, encodable as a
numeric vector, with random sampling and neighbours for mutation.

Example::

    >>> import random
    >>> from autotune.space import ConfigSpace, SplitKnob, ChoiceKnob
    >>> space = ConfigSpace([SplitKnob("tile_i", 1000, levels=1, candidates=[4, 8, 16]),
    ...                      ChoiceKnob("unroll", [True, False])])
    >>> cfg = space.sample(random.Random(0))
    >>> space.from_json(cfg.to_json()) == cfg
    True
    >>> len(space.encode(cfg))
    2
"""
from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from autotune.errors import SpaceError

JSONScalar = int | float | str | bool | None


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def powers_of_two(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def _index(values: list[Any], value: Any) -> int:
    """values.index(value), but True is not 1 and 1.0 is not 1 (knobs may hold both)."""
    for i, v in enumerate(values):
        if type(v) is type(value) and v == value:
            return i
    raise ValueError(f"{value!r} is not in {values!r}")


# sample_new lists the allowed configs of a space of at most ENUMERATE_LIMIT combinations once this
# many draws in a row found nothing new (a pool of 4000 from a space that allows 1760 took 400,000
# draws, 12 s, before)
MISSES_BEFORE_ENUMERATING = 200
ENUMERATE_LIMIT = 200_000


def fit(cands: Sequence[int], n: int) -> list[int]:
    """Candidates no larger than needed for extent n (keeps the smallest that covers n)."""
    return sorted({c for c in cands if c < n} | {min([c for c in cands if c >= n], default=max(cands))})


class Knob:
    """One dimension of a space. Subclasses define the values it may take."""
    name: str

    def values(self) -> list[Any]:
        raise NotImplementedError

    def validate(self, value: Any) -> Any:
        """The value in canonical form, or SpaceError naming the knob and the allowed values."""
        vals = self.values()
        canon = self.canonical(value)
        if canon not in vals:
            shown = vals if len(vals) <= 12 else vals[:6] + ["..."] + vals[-3:]
            raise SpaceError(f"knob {self.name!r}: {value!r} is not in its space {shown}")
        return canon

    def canonical(self, value: Any) -> Any:
        return value

    def encode(self, value: Any) -> list[float]:
        return [float(_index(self.values(), value))]

    def width(self) -> int:
        return 1

    def neighbours(self, value: Any) -> list[Any]:
        vals = self.values()
        i = _index(vals, value)
        return [vals[j] for j in (i - 1, i + 1) if 0 <= j < len(vals)]


@dataclass(frozen=True)
class ChoiceKnob(Knob):
    """A plain knob: one of a list of JSON scalars (unroll or not, a vector width, a loop order name)."""
    name: str
    choices: tuple[JSONScalar, ...]

    def __init__(self, name: str, choices: Sequence[JSONScalar]) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "choices", tuple(choices))
        if not self.choices:
            raise SpaceError(f"knob {name!r} has no choices")

    def values(self) -> list[Any]:
        return list(self.choices)

    def canonical(self, value: Any) -> Any:
        # JSON turns nothing but tuples into lists; bools must stay bools, not become 0/1
        for c in self.choices:
            if type(c) is type(value) and c == value:
                return c
        return object()  # never in the space


@dataclass(frozen=True)
class SplitKnob(Knob):
    """Inner tile sizes for splitting an axis of `extent` into levels+1 loops.

    The value is a tuple of `levels` factors, outermost inner level first; the outermost loop's
    extent follows (ceil-divided, so factors need not divide the extent). Each level's factor
    comes from `candidates` (one list for every level, or a list per level), or by `policy`:
    "power2" (1, 2, 4, ...) or "divisors" of the extent. With `nested`, each factor must divide
    the one before it (tiles nest evenly).
    """
    name: str
    extent: int
    levels: int
    policy: str
    candidates: tuple[tuple[int, ...], ...]
    nested: bool

    def __init__(self, name: str, extent: int, levels: int = 1, policy: str = "power2",
                 candidates: Sequence[int] | Sequence[Sequence[int]] | None = None, nested: bool = True) -> None:
        if levels < 1:
            raise SpaceError(f"knob {name!r}: levels must be >= 1")
        if candidates is not None:
            c = list(candidates)
            per_level = [tuple(x) for x in c] if c and isinstance(c[0], (list, tuple)) else [tuple(c)] * levels
        elif policy == "power2":
            per_level = [tuple(powers_of_two(max(1, extent)))] * levels
        elif policy == "divisors":
            per_level = [tuple(divisors(extent))] * levels
        else:
            raise SpaceError(f"knob {name!r}: policy must be 'power2' or 'divisors', got {policy!r}")
        if len(per_level) != levels or any(not lv for lv in per_level):
            raise SpaceError(f"knob {name!r}: need a non-empty candidate list for each of {levels} levels")
        for name_, val in (("name", name), ("extent", extent), ("levels", levels), ("policy", policy),
                           ("candidates", tuple(per_level)), ("nested", nested)):
            object.__setattr__(self, name_, val)
        if not self.values():
            raise SpaceError(f"knob {name!r}: no combination of candidates is valid")

    def values(self) -> list[Any]:
        cache = self.__dict__.get("_values")
        if cache is None:
            cache = [combo for combo in itertools.product(*self.candidates) if self._ok(combo)]
            object.__setattr__(self, "_values", cache)
        return cache

    def _ok(self, combo: tuple[int, ...]) -> bool:
        if any(f < 1 for f in combo):
            return False
        if self.nested and any(a % b for a, b in zip(combo, combo[1:])):
            return False
        return all(a >= b for a, b in zip(combo, combo[1:])) or not self.nested

    def canonical(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
        return object()

    def validate(self, value: Any) -> Any:
        canon = self.canonical(value)
        if canon not in self._value_set():
            raise SpaceError(f"knob {self.name!r}: {value!r} is not a valid split of extent {self.extent} "
                             f"(factors per level from {[list(c)[:8] for c in self.candidates]})")
        return canon

    def _value_set(self) -> frozenset:
        cache = self.__dict__.get("_set")
        if cache is None:
            cache = frozenset(self.values())
            object.__setattr__(self, "_set", cache)
        return cache

    def width(self) -> int:
        return self.levels

    def encode(self, value: Any) -> list[float]:
        return [math.log2(f) for f in value]

    def neighbours(self, value: Any) -> list[Any]:
        out = []
        for lv in range(self.levels):
            cands = self.candidates[lv]
            i = cands.index(value[lv])
            for j in (i - 1, i + 1):
                if 0 <= j < len(cands):
                    v = value[:lv] + (cands[j],) + value[lv + 1:]
                    if v in self._value_set():
                        out.append(v)
        return out


class Config(Mapping[str, Any]):
    """A point of a space: an immutable, hashable mapping knob name -> value."""

    __slots__ = ("_items", "_typed", "_hash")

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._items = tuple(sorted(values.items()))
        # compare with types: {"u": True} and {"u": 1} are different points (and have different keys)
        self._typed = tuple((k, type(v).__name__, v) for k, v in self._items)
        self._hash = hash(self._typed)

    def __getitem__(self, k: str) -> Any:
        for name, v in self._items:
            if name == k:
                return v
        raise KeyError(k)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Config) and self._typed == o._typed

    def __repr__(self) -> str:
        return f"Config({dict(self._items)!r})"

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._items}

    def key(self) -> str:
        """A stable string key (for logs and de-duplication)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


class ConfigSpace:
    """An ordered set of knobs. Sampling and neighbours stay inside the space.

    `prune(values)` (optional) names why a combination of knob values is left out (a register
    tile larger than the registers, code that would explode), else None: validate() rejects such
    configs with that reason, sampling, neighbours and the grid never give them. `added` (optional):
    knobs added to a template after logs were written, each with the value that builds what a
    config without it built; validate() fills them into a config that lacks them (an older log's).

    >>> sp = ConfigSpace([ChoiceKnob("a", [1, 2]), ChoiceKnob("b", ["old", "new"])], added={"b": "old"})
    >>> sp.validate({"a": 2})
    Config({'a': 2, 'b': 'old'})
    """

    def __init__(self, knobs: Sequence[Knob], prune: Callable[[Mapping[str, Any]], str | None] | None = None,
                 added: Mapping[str, Any] | None = None) -> None:
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise SpaceError(f"knob names repeat: {names}")
        self.knobs = list(knobs)
        self.by_name = {k.name: k for k in knobs}
        self.prune = prune
        self.added = {name: self.by_name[name].validate(v) for name, v in (added or {}).items() if name in self.by_name}

    def __len__(self) -> int:
        """The number of combinations of knob values (pruned ones included: an upper bound)."""
        return math.prod(len(k.values()) for k in self.knobs)

    def allows(self, cfg: Mapping[str, Any]) -> bool:
        """Whether the prune rule keeps cfg (a combination of this space's knob values)."""
        return self.prune is None or self.prune(cfg) is None

    def __repr__(self) -> str:
        return f"ConfigSpace({', '.join(f'{k.name}[{len(k.values())}]' for k in self.knobs)}; size {len(self)})"

    def validate(self, values: Mapping[str, Any]) -> Config:
        """A Config from untrusted values: every knob present, every value inside its space."""
        if not isinstance(values, Mapping):
            raise SpaceError(f"a config must be an object of knob values, got {type(values).__name__}")
        unknown = set(values) - set(self.by_name)
        if unknown:
            raise SpaceError(f"unknown knobs {sorted(unknown)}; this space has {list(self.by_name)}")
        missing = set(self.by_name) - set(values)
        if missing and missing <= set(self.added):
            values = {**values, **{name: self.added[name] for name in missing}}
        elif missing:
            raise SpaceError(f"missing knobs {sorted(missing)}")
        cfg = Config({k.name: k.validate(values[k.name]) for k in self.knobs})
        why = self.prune(cfg) if self.prune is not None else None
        if why is not None:
            raise SpaceError(f"config pruned from the space: {why}")
        return cfg

    def from_json(self, d: Any) -> Config:
        return self.validate(d)

    def sample(self, rng: random.Random) -> Config:
        for _ in range(1000):
            cfg = Config({k.name: rng.choice(k.values()) for k in self.knobs})
            if self.allows(cfg):
                return cfg
        for cfg in self.grid():  # a space pruned almost to nothing: its first allowed config
            return cfg
        raise SpaceError("every config of the space is pruned")

    def sample_new(self, rng: random.Random, exclude: set[Config] | frozenset[Config], n: int) -> list[Config]:
        """Up to n distinct random configs not in `exclude` (bounded tries: a nearly exhausted
        space may give fewer; a small one, once draws stop finding new configs, gives all it has
        left, shuffled)."""
        out: list[Config] = []
        taken: set[Config] = set()
        tries = misses = 0
        while len(out) < n and len(exclude) + len(out) < len(self) and tries < 100 * n + 100:
            tries += 1
            cfg = self.sample(rng)
            if cfg not in exclude and cfg not in taken:
                taken.add(cfg)
                out.append(cfg)
                misses = 0
            elif (misses := misses + 1) >= MISSES_BEFORE_ENUMERATING and len(self) <= ENUMERATE_LIMIT:
                # asked for most of what the prune rule leaves of a small space: list the rest
                rest = [c for c in self.grid() if c not in exclude and c not in taken]
                rng.shuffle(rest)
                return out + rest[:n - len(out)]
        return out

    def encode(self, cfg: Config) -> list[float]:
        out: list[float] = []
        for k in self.knobs:
            out += k.encode(cfg[k.name])
        return out

    def neighbours(self, cfg: Config) -> list[Config]:
        """Configs that differ from cfg in one knob by one step."""
        out = []
        for k in self.knobs:
            for v in k.neighbours(cfg[k.name]):
                d = dict(cfg)
                d[k.name] = v
                if self.allows(d):
                    out.append(Config(d))
        return out

    def mutate(self, cfg: Config, rng: random.Random) -> Config:
        """A random neighbour, or a random resample of one knob when cfg has no neighbour."""
        nb = self.neighbours(cfg)
        if nb:
            return rng.choice(nb)
        k = rng.choice(self.knobs)
        d = dict(cfg)
        d[k.name] = rng.choice(k.values())
        return Config(d) if self.allows(d) else self.sample(rng)

    def grid(self) -> Iterator[Config]:
        for combo in itertools.product(*(k.values() for k in self.knobs)):
            cfg = Config({k.name: v for k, v in zip(self.knobs, combo)})
            if self.allows(cfg):
                yield cfg
