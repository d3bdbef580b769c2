"""Search spaces and Configs: hashing, JSON, validation of untrusted values, encoding, sampling, neighbours."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import SpaceError
from autotune.space import ChoiceKnob, Config, ConfigSpace, SplitKnob, divisors, powers_of_two


def make_space() -> ConfigSpace:
    return ConfigSpace([
        SplitKnob("tile_i", 1000, levels=2, policy="power2"),
        SplitKnob("tile_j", 127, levels=1, policy="divisors"),
        SplitKnob("tile_k", 96, levels=2, candidates=[[32, 16, 8], [8, 4, 2, 1]], nested=True),
        SplitKnob("tile_m", 50, levels=2, candidates=[6, 4, 3], nested=False),
        ChoiceKnob("unroll", [0, 2, 4, 8]),
        ChoiceKnob("vectorize", [True, False]),
        ChoiceKnob("scale", [0.5, 1.0]),
        ChoiceKnob("order", ["ijk", "ikj", "kij"]),
    ])


SPACE = make_space()
SEEDS = st.integers(0, 2**32 - 1)


def test_divisors_and_powers():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(127) == [1, 127]
    assert powers_of_two(1000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert powers_of_two(1) == [1]


def test_config_is_a_hashable_frozen_mapping():
    a = Config({"x": 1, "y": (4, 2), "z": "ijk"})
    b = Config({"z": "ijk", "y": (4, 2), "x": 1})
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert dict(a) == {"x": 1, "y": (4, 2), "z": "ijk"}
    assert a["y"] == (4, 2) and len(a) == 3 and list(a) == ["x", "y", "z"]
    assert a != Config({"x": 2, "y": (4, 2), "z": "ijk"})
    assert a != {"x": 1, "y": (4, 2), "z": "ijk"}  # only Configs equal Configs
    with pytest.raises(KeyError):
        a["nope"]
    with pytest.raises(TypeError):
        a["x"] = 3  # type: ignore[index]
    assert a.key() == '{"x":1,"y":[4,2],"z":"ijk"}'
    assert "Config(" in repr(a)


@settings(max_examples=60)
@given(SEEDS)
def test_sample_json_round_trip(seed):
    cfg = SPACE.sample(random.Random(seed))
    text = json.dumps(cfg.to_json())
    again = SPACE.from_json(json.loads(text))
    assert again == cfg and hash(again) == hash(cfg)
    assert again.key() == cfg.key()
    assert SPACE.validate(dict(cfg)) == cfg


@settings(max_examples=60)
@given(SEEDS)
def test_sample_stays_in_space(seed):
    cfg = SPACE.sample(random.Random(seed))
    for k in SPACE.knobs:
        assert cfg[k.name] in k.values()
        k.validate(cfg[k.name])


@settings(max_examples=60)
@given(SEEDS)
def test_encode_length(seed):
    cfg = SPACE.sample(random.Random(seed))
    vec = SPACE.encode(cfg)
    assert len(vec) == sum(k.width() for k in SPACE.knobs) == 2 + 1 + 2 + 2 + 4
    assert all(isinstance(x, float) for x in vec)


@settings(max_examples=60)
@given(SEEDS)
def test_neighbours_stay_in_space_and_differ_in_one_knob(seed):
    cfg = SPACE.sample(random.Random(seed))
    nbs = SPACE.neighbours(cfg)
    assert nbs, "every point of this space has a neighbour"
    for nb in nbs:
        assert SPACE.validate(dict(nb)) == nb
        assert sum(nb[k] != cfg[k] for k in cfg) == 1
    m = SPACE.mutate(cfg, random.Random(seed))
    assert SPACE.validate(dict(m)) == m


def test_mutate_without_neighbours_resamples_one_knob():
    sp = ConfigSpace([ChoiceKnob("a", [1]), ChoiceKnob("b", [1])])
    cfg = sp.sample(random.Random(0))
    assert sp.neighbours(cfg) == []
    assert sp.mutate(cfg, random.Random(0)) == cfg


def base_values() -> dict:
    return dict(SPACE.sample(random.Random(0)))


def test_validate_rejects_unknown_and_missing_knobs():
    v = base_values()
    with pytest.raises(SpaceError, match=r"unknown knobs \['evil'\]"):
        SPACE.validate({**v, "evil": 1})
    v.pop("unroll")
    with pytest.raises(SpaceError, match=r"missing knobs \['unroll'\]"):
        SPACE.validate(v)
    for bad in (None, [], "x", 3):
        with pytest.raises(SpaceError, match="must be an object"):
            SPACE.validate(bad)


@pytest.mark.parametrize("knob,value", [
    ("unroll", 3), ("unroll", "2"), ("unroll", 2.0), ("unroll", None), ("unroll", True),
    ("vectorize", 1), ("vectorize", 0), ("vectorize", "True"),
    ("scale", 1), ("scale", "0.5"),
    ("order", "jik"), ("order", "__import__('os').system('x')"), ("order", ["ijk"]),
    ("tile_i", [3, 1]), ("tile_i", [2, 4]), ("tile_i", [1024, 1]), ("tile_i", [4]), ("tile_i", [4, 2, 1]),
    ("tile_i", [True, 1]), ("tile_i", 4), ("tile_i", "4,2"), ("tile_i", [4.0, 2.0]), ("tile_i", None),
    ("tile_j", [2]), ("tile_j", [0]), ("tile_j", [-1]),
    ("tile_k", [16, 3]), ("tile_k", [8, 16]), ("tile_k", [64, 8]),
    ("tile_m", [5, 4]),
])
def test_validate_rejects_out_of_space_values(knob, value):
    v = base_values()
    v[knob] = value
    with pytest.raises(SpaceError, match=f"knob '{knob}'"):
        SPACE.validate(v)


def test_validate_accepts_json_lists_for_splits():
    v = base_values()
    v["tile_i"] = [16, 4]
    v["tile_j"] = [127]
    cfg = SPACE.validate(v)
    assert cfg["tile_i"] == (16, 4) and cfg["tile_j"] == (127,)
    assert isinstance(cfg["tile_i"], tuple)


def test_bool_and_int_choices_are_distinct():
    sp = ConfigSpace([ChoiceKnob("c", [1, True, 0, False])])
    assert sp.validate({"c": True})["c"] is True
    assert type(sp.validate({"c": 1})["c"]) is int
    assert sp.validate({"c": True}) != sp.validate({"c": 1})


def test_split_policies():
    assert SplitKnob("a", 1000, levels=1, policy="power2").values() == [(p,) for p in powers_of_two(1000)]
    assert SplitKnob("a", 12, levels=1, policy="divisors").values() == [(d,) for d in divisors(12)]
    assert SplitKnob("a", 1, levels=1).values() == [(1,)]
    # nested: each factor divides (and is at most) the one before it
    nested = SplitKnob("a", 64, levels=2, policy="power2")
    assert all(a % b == 0 and a >= b for a, b in nested.values())
    assert (8, 16) not in nested.values() and (16, 8) in nested.values()
    # not nested: any combination
    free = SplitKnob("a", 50, levels=2, candidates=[6, 4], nested=False)
    assert sorted(free.values()) == [(4, 4), (4, 6), (6, 4), (6, 6)]
    # per-level candidates
    per = SplitKnob("a", 96, levels=2, candidates=[[32, 16], [4, 3]], nested=True)
    assert sorted(per.values()) == [(16, 4), (32, 4)]
    assert per.width() == 2 and per.encode((32, 4)) == [5.0, 2.0]


def test_split_knob_construction_errors():
    with pytest.raises(SpaceError, match="levels must be >= 1"):
        SplitKnob("a", 10, levels=0)
    with pytest.raises(SpaceError, match="policy must be"):
        SplitKnob("a", 10, policy="primes")
    with pytest.raises(SpaceError, match="candidate list for each of 2 levels"):
        SplitKnob("a", 10, levels=2, candidates=[[2, 4]])
    with pytest.raises(SpaceError, match="no combination"):
        SplitKnob("a", 10, levels=2, candidates=[[3], [2]], nested=True)
    with pytest.raises(SpaceError, match="no choices"):
        ChoiceKnob("b", [])
    with pytest.raises(SpaceError, match="knob names repeat"):
        ConfigSpace([ChoiceKnob("b", [1]), ChoiceKnob("b", [2])])


def test_space_size_and_grid():
    sp = ConfigSpace([SplitKnob("t", 8, levels=1, policy="divisors"), ChoiceKnob("u", [True, False])])
    assert len(sp) == 8
    grid = list(sp.grid())
    assert len(grid) == 8 and len(set(grid)) == 8
    assert all(sp.validate(dict(c)) == c for c in grid)
    assert "size 8" in repr(sp)


def test_split_neighbours_step_one_candidate():
    k = SplitKnob("a", 1000, levels=1, policy="power2")
    assert sorted(k.neighbours((16,))) == [(8,), (32,)]
    assert k.neighbours((1,)) == [(2,)]


def test_bool_and_int_choices_encode_differently():
    k = ChoiceKnob("c", [1, True, 0, False])
    assert [k.encode(v) for v in (1, True, 0, False)] == [[0.0], [1.0], [2.0], [3.0]]
    assert k.neighbours(True) == [1, 0] and type(k.neighbours(True)[0]) is int


def test_sample_new_lists_what_a_pruned_space_has_left_instead_of_drawing_on() -> None:
    """Asked for more configs than the prune rule leaves, sample_new returns every allowed config
    (distinct, none excluded) after a bounded number of draws: it drew 100 * n times before."""
    calls = 0

    def prune(values):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return None if (values["a"] + values["b"]) % 4 == 0 else "not a multiple of 4"

    space = ConfigSpace([ChoiceKnob("a", list(range(40))), ChoiceKnob("b", list(range(40)))], prune=prune)
    allowed = list(space.grid())
    exclude = set(allowed[:10])
    calls = 0
    got = space.sample_new(random.Random(0), exclude, 1000)
    assert len(got) == len(set(got)) == len(allowed) - 10 and not exclude & set(got)
    assert all(space.allows(c) for c in got)
    assert calls < 20_000, f"{calls} prune calls"
    assert space.sample_new(random.Random(0), exclude, 1000) == got  # deterministic for a seed
