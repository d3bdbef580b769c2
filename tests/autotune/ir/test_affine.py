"""Affine index algebra: normal forms, intervals, and div/mod simplification under ranges."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.codegen.source import Printer
from autotune.ir import te
from autotune.ir.affine import Affine, from_affine, interval, simplify, to_affine
from autotune.ir.expr import BinOp, Call, Const, Expr, Var


def show(e: Expr) -> str:
    return Printer().expr(e)[0]


i, j, k = Var("i"), Var("j"), Var("k")


# ---------------------------------------------------------------------------------------------
# a small evaluator (Python integer semantics, which is what the generated code uses)
# ---------------------------------------------------------------------------------------------
def evaluate(e: Expr, env: dict[Var, int]) -> int:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Call) and e.func == "neg":
        return -evaluate(e.args[0], env)
    if isinstance(e, BinOp):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
                "%": lambda: a % b, "min": lambda: min(a, b), "max": lambda: max(a, b)}[e.op]()
    raise TypeError(f"cannot evaluate {e!r}")


# ---------------------------------------------------------------------------------------------
# examples
# ---------------------------------------------------------------------------------------------
def test_split_index_div_mod():
    jo, jm = Var("jo"), Var("jm")
    r = {jm: (0, 7), jo: (0, 3)}
    assert simplify((jo * 8 + jm) // 8, r) is jo
    assert simplify((jo * 8 + jm) % 8, r) is jm


def test_div_mod_with_offset():
    r = {i: (0, 3), j: (0, 4)}
    assert show(simplify((i * 8 + j + 3) // 8, r)) == "i"
    assert show(simplify((i * 8 + j + 3) % 8, r)) == "j + 3"
    r = {i: (0, 3), j: (0, 5)}
    assert show(simplify((i * 8 + j + 10) // 8, r)) == "i + 1"
    assert show(simplify((i * 8 + j + 10) % 8, r)) == "j + 2"


def test_div_mod_kept_when_ranges_do_not_allow():
    # j + 3 spans 3..10: crosses a multiple of 8, so the quotient is not constant
    e = simplify((i * 8 + j + 3) // 8, {i: (0, 3), j: (0, 7)})
    assert show(e) == "(i * 8 + j + 3) // 8"
    # unknown range: nothing to conclude
    assert show(simplify((i * 8 + j) % 8, {i: (0, 3)})) == "(i * 8 + j) % 8"
    # possibly negative remainder part
    assert show(simplify((i * 8 + j) // 8, {i: (0, 3), j: (-1, 3)})) == "(i * 8 + j) // 8"


def test_fuse_index_roundtrip():
    """fuse writes (f // n, f % n); split-then-fuse style indices simplify back to the leaves."""
    fo, fi = Var("fo"), Var("fi")
    r = {fo: (0, 9), fi: (0, 3)}
    assert simplify((fo * 4 + fi) // 4, r) is fo
    assert simplify((fo * 4 + fi) % 4, r) is fi


def test_min_max_resolved_by_ranges():
    r = {i: (0, 3), j: (0, 3)}
    assert show(simplify(te.max(i * 4 + j, i * 4), r)) == "i * 4 + j"
    assert show(simplify(te.min(i * 4 + j, i * 4), r)) == "i * 4"
    assert show(simplify(te.min(Const(3), Const(5)), r)) == "3"
    # undecidable: kept
    assert show(simplify(te.min(i, j), r)) == "min(i, j)"


def test_constant_folding_and_collection():
    assert show(simplify(i * 2 + 3 * i - i * 5 + j)) == "j"
    assert show(simplify((i + 1) * 4 - 4)) == "i * 4"
    assert show(simplify(Const(2) * Const(3) + 1)) == "7"


@pytest.mark.parametrize("aff,text", [
    (Affine({i: 1, j: -42}, 37), "37 + i - j * 42"),
    (Affine({i: 3, j: 1}, -5), "i * 3 + j - 5"),
    (Affine({i: -1}, 0), "0 - i"),
    (Affine({}, -4), "-4"),
    (Affine({}, 0), "0"),
    (Affine({j: -2, i: -1}, 0), "0 - j * 2 - i"),
    (Affine({k: 1, i: 1}, 0), "i + k"),
])
def test_from_affine_printing(aff, text):
    assert show(from_affine(aff)) == text


def test_to_affine():
    a = to_affine(i * 3 - (j - 2) * 2 + -k)
    assert a is not None and a.terms == {i: 3, j: -2, k: -1} and a.const == 4
    assert to_affine(i * j) is None
    assert to_affine(i // 2) is None
    assert to_affine(Const(2.5)) is None


def test_intervals():
    r = {i: (0, 3), j: (0, 7)}
    assert interval(i * 8 + j, r) == (0, 31)
    assert interval(j - i * 2, r) == (-6, 7)
    assert interval((i * 8 + j) // 4, r) == (0, 7)
    assert interval((i * 8 + j) % 4, r) == (0, 3)
    assert interval(j % 16, r) == (0, 7)
    assert interval(te.min(i, j + 1), r) == (0, 3)
    assert interval(te.max(i, j + 1), r) == (1, 8)
    assert interval(i + k, r) is None
    assert interval(i * j, r) is None
    assert interval((j - 5) // 2, r) is None  # may be negative: not claimed


# ---------------------------------------------------------------------------------------------
# property: simplify preserves the value; interval contains it
# ---------------------------------------------------------------------------------------------
VARS = [Var("a"), Var("b"), Var("c"), Var("d")]


@st.composite
def ranges_and_env(draw):
    rng, env = {}, {}
    for v in VARS:
        lo = draw(st.integers(-3, 5)) if draw(st.booleans()) else 0
        hi = lo + draw(st.integers(0, 12))
        rng[v] = (lo, hi)
        env[v] = draw(st.integers(lo, hi))
    return rng, env


def exprs():
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-20, 20).map(Const))

    def extend(sub):
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-"]), sub, sub).map(lambda t: BinOp(t[0], t[1], t[2])),
            st.tuples(sub, st.integers(-6, 9)).map(lambda t: BinOp("*", t[0], Const(t[1]))),
            st.tuples(st.integers(-6, 9), sub).map(lambda t: BinOp("*", Const(t[0]), t[1])),
            st.tuples(sub, sub).map(lambda t: BinOp("*", t[0], t[1])),
            st.tuples(st.sampled_from(["//", "%"]), sub, st.integers(1, 16)).map(
                lambda t: BinOp(t[0], t[1], Const(t[2]))),
            st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: BinOp(t[0], t[1], t[2])),
            sub.map(lambda x: Call("neg", (x,))),
        )
    return st.recursive(leaves, extend, max_leaves=12)


@settings(max_examples=400)
@given(exprs(), ranges_and_env())
def test_simplify_preserves_value(e, re):
    rng, env = re
    want = evaluate(e, env)
    simp = simplify(e, rng)
    assert evaluate(simp, env) == want, f"{show(e)}  ->  {show(simp)} under {rng}"
    iv = interval(e, rng)
    if iv is not None:
        assert iv[0] <= want <= iv[1], f"interval {iv} of {show(e)} misses {want}"
    a = to_affine(e)
    if a is not None:
        assert evaluate(from_affine(a), env) == want


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(VARS), st.integers(-50, 50), max_size=4), st.integers(-100, 100),
       st.integers(1, 32), ranges_and_env())
def test_affine_div_mod_exact(terms, const, kdiv, re):
    """The split/fuse/pack shape: (sum c*v + const) // k and % k."""
    rng, env = re
    base = from_affine(Affine({v: c for v, c in terms.items() if c}, const))
    for op in ("//", "%"):
        e = BinOp(op, base, Const(kdiv))
        assert evaluate(simplify(e, rng), env) == evaluate(e, env)
