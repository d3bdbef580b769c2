"""Schedule steps as values: validation of their fields and the JSON form (which may be untrusted)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.errors import ScheduleError
from autotune.schedule.steps import (MAX_FACTOR, MAX_PREFETCH_ROWS, STEP_TYPES, CacheWrite, ComputeAt, ComputeInline,
                                     Fuse, Pack, Parallel, Prefetch, Reorder, Split, Step, Stream, Tile, Unroll,
                                     Vectorize, step_from_json)

EXAMPLES = [
    Split("C", "i", 8, "io", "ii"),
    Split("C", "i", 1),
    Split("C", "k", MAX_FACTOR, "ko", "ki"),
    Tile("C", "i", "j", 4, 16),
    Fuse("C", "i", "j", "ij"),
    Fuse("C", "i", "j"),
    Reorder("C", ("j", "k", "i")),
    Unroll("C", "ii"),
    Vectorize("C", "ji"),
    Parallel("C", "jc"),
    Stream("C"),
    Prefetch("C", "ii", "A", 2),
    CacheWrite("C", "ir"),
    ComputeAt("Bp", "C", "kc"),
    ComputeInline("E"),
    Pack("B", 1, 16, "Bp"),
]


def test_every_step_type_has_an_example():
    assert {type(s) for s in EXAMPLES} == set(STEP_TYPES.values())


@pytest.mark.parametrize("step", EXAMPLES, ids=lambda s: s.op)
def test_json_round_trip(step: Step):
    step.validate()
    d = step.to_json()
    assert d["op"] == step.op
    again = step_from_json(json.loads(json.dumps(d)))
    assert again == step and type(again) is type(step)
    assert hash(again) == hash(step)


@pytest.mark.parametrize("step", EXAMPLES, ids=lambda s: s.op)
def test_steps_are_frozen(step: Step):
    import dataclasses
    f = dataclasses.fields(step)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(step, f.name, "x")


@pytest.mark.parametrize("bad", [None, [], "split", 3, {}, {"op": "explode"}, {"op": None},
                                 {"op": "__init__"}, {"op": "Split"}])
def test_from_json_rejects_non_steps(bad):
    with pytest.raises(ScheduleError, match="not a schedule step"):
        step_from_json(bad)


def test_from_json_rejects_unknown_and_missing_fields():
    with pytest.raises(ScheduleError, match=r"split: unknown fields \['evil'\]"):
        step_from_json({"op": "split", "stage": "C", "axis": "i", "factor": 4, "evil": 1})
    with pytest.raises(ScheduleError, match="split: missing fields"):
        step_from_json({"op": "split", "stage": "C", "axis": "i"})
    with pytest.raises(ScheduleError, match="pack: missing fields"):
        step_from_json({"op": "pack", "tensor": "B", "dim": 1})


@pytest.mark.parametrize("factor", [0, -1, True, False, 2.0, "4", None, MAX_FACTOR + 1, 10**30, [4]])
def test_split_factor_validation(factor):
    with pytest.raises(ScheduleError, match=r"split\(axis 'i'\): factor must be an integer"):
        Split("C", "i", factor).validate()
    with pytest.raises(ScheduleError, match=r"split\(axis 'i'\)"):
        step_from_json({"op": "split", "stage": "C", "axis": "i", "factor": factor})


def test_tile_factor_validation_names_the_axis():
    with pytest.raises(ScheduleError, match=r"tile\(axis 'j'\): factor"):
        Tile("C", "i", "j", 4, 0).validate()
    with pytest.raises(ScheduleError, match=r"tile\(axis 'i'\): factor"):
        Tile("C", "i", "j", True, 4).validate()


@pytest.mark.parametrize("dim", [-1, 8, True, 1.0, "1", None])
def test_pack_dim_validation(dim):
    with pytest.raises(ScheduleError, match=r"pack\(axis 'B'\): dim must be a dimension index"):
        Pack("B", dim, 4, "Bp").validate()


@pytest.mark.parametrize("factor", [0, True, MAX_FACTOR + 1])
def test_pack_factor_validation(factor):
    with pytest.raises(ScheduleError, match=r"pack\(axis 'B'\): factor"):
        Pack("B", 1, factor, "Bp").validate()


BAD_NAMES = ["x; import os", "__import__('os')", "a b", "", "1abc", "for", "None", "_private", "x" * 65,
             "a\nb", "é(", 3, None, ["i"], "i.j"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_names_must_be_identifiers(name):
    cases = [
        (lambda n: Split(n, "i", 4), "split"),
        (lambda n: Split("C", n, 4), "split"),
        (lambda n: Split("C", "i", 4, n, "ii"), "split"),
        (lambda n: Split("C", "i", 4, "io", n), "split"),
        (lambda n: Fuse("C", "i", "j", n), "fuse"),
        (lambda n: Reorder("C", ("i", n)), "reorder"),
        (lambda n: Unroll("C", n), "unroll"),
        (lambda n: ComputeAt("A", n, "i"), "compute_at"),
        (lambda n: ComputeInline(n), "compute_inline"),
        (lambda n: Pack("B", 0, 4, n), "pack"),
        (lambda n: Pack(n, 0, 4, "Bp"), "pack"),
    ]
    if name is None:  # None means "default name" for the optional fields; check the required ones
        cases = [c for k, c in enumerate(cases) if k not in (2, 3, 4)]
    for make, op in cases:
        with pytest.raises(ScheduleError, match=rf"^{op}.*must be a Python identifier"):
            make(name).validate()


def test_from_json_rejects_injected_names():
    d = {"op": "split", "stage": "C", "axis": "i", "factor": 4, "outer": "i; import os", "inner": "ii"}
    with pytest.raises(ScheduleError, match="identifier"):
        step_from_json(d)
    with pytest.raises(ScheduleError, match="identifier"):
        step_from_json({"op": "reorder", "stage": "C", "order": ["i", "os.system('x')"]})


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda s: s not in {"and", "as", "if", "in", "is", "or", "for", "def", "del", "not", "try", "with", "from",
                        "else", "elif", "pass", "class", "while", "yield", "break", "raise", "async", "await",
                        "global", "lambda", "assert", "import", "return", "except", "finally", "continue",
                        "nonlocal"})
factors = st.integers(1, MAX_FACTOR)


@given(st.one_of(
    st.builds(Split, names, names, factors, st.one_of(st.none(), names), st.one_of(st.none(), names)),
    st.builds(Tile, names, names, names, factors, factors),
    st.builds(Fuse, names, names, names, st.one_of(st.none(), names)),
    st.builds(Reorder, names, st.lists(names, min_size=1, max_size=5).map(tuple)),
    st.builds(Unroll, names, names), st.builds(Vectorize, names, names), st.builds(Parallel, names, names),
    st.builds(CacheWrite, names, names), st.builds(ComputeAt, names, names, names), st.builds(ComputeInline, names),
    st.builds(Pack, names, st.integers(0, 7), factors, names),
    st.builds(Prefetch, names, names, names, st.integers(1, MAX_PREFETCH_ROWS)),
))
def test_json_round_trip_property(step):
    assert step_from_json(json.loads(json.dumps(step.to_json()))) == step


@pytest.mark.parametrize("rows", [0, -1, MAX_PREFETCH_ROWS + 1, 2.0, True, "2", None])
def test_prefetch_rows_validation(rows: object) -> None:
    with pytest.raises(ScheduleError, match="rows must be an integer"):
        step_from_json({"op": "prefetch", "stage": "C", "axis": "ii", "tensor": "A", "rows": rows})
