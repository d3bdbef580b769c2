"""Definitions as data: round trips, a closed form, limits, folded names and bounds."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from autotune.errors import DefinitionError
from autotune.ir import te
from autotune.ir.evaluate import count_flops, evaluate
from autotune.ir.serialize import MAX_BYTES, MAX_DEPTH, canonical, content_hash, from_data, to_data
from autotune.templates import TEMPLATES


def row_dot(n: int = 6, k: int = 4, w: int | None = None) -> dict:
    X = te.placeholder((n, k), name="X")
    W = te.placeholder((w or k,), name="W")
    j = te.reduce_axis(k, name="j")
    out = te.compute((n,), lambda i: te.sum(X[i, j] * W[j], axis=j), name="out")
    return to_data(out, [X, W])


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_definition_round_trips_and_evaluates_like_its_reference(name: str) -> None:
    t = TEMPLATES[name]
    small = {"matmul": "12x8x6", "batch_matmul": "2x6x4x5", "dense_bias_relu": "6x8x5", "softmax": "5x12",
             "layernorm": "5x12", "conv2d": "1x3x8x8x4x3x3", "depthwise_conv2d": "1x3x8x8x3x3",
             "pool2d": "1x3x8x8x2x2"}[name]
    shape = t.parse_shape(small)
    out = t.define(shape, "float32")
    ins = [x for x in te.input_tensors(out) if x.is_placeholder]
    data = to_data(out, ins)
    back, back_ins = from_data(json.loads(json.dumps(data)))
    assert to_data(back, back_ins) == data and content_hash(to_data(back, back_ins)) == content_hash(data)
    arrays = t.inputs(shape, "float32", np.random.default_rng(0))
    from autotune.task import Task
    ref = Task.create(name, shape, threads=1).reference(arrays)
    got = evaluate(back, {x.name: a for x, a in zip(back_ins, arrays)})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert count_flops(back) > 0


def test_flops_count_the_arithmetic_of_the_definition() -> None:
    out, _ = from_data(row_dot(6, 4))
    assert count_flops(out) == 2 * 6 * 4  # a multiply and an add per point
    A = te.placeholder((8,), name="A")
    copy_ = te.compute((8,), lambda i: A[i], name="out")
    assert count_flops(copy_) == 0.0


def test_a_read_past_a_tensor_is_refused_with_the_expected_shape() -> None:
    with pytest.raises(DefinitionError, match=r"W has shape \[3\], expected \[4\]"):
        from_data(row_dot(6, 4, w=3))
    B = te.placeholder((8,), name="B")
    shifted = te.compute((8,), lambda i: B[i - 1], name="out")
    with pytest.raises(DefinitionError, match="index -1"):
        from_data(to_data(shifted, [B]))
    guarded = te.compute((8,), lambda i: te.select(i >= 1, B[i - 1], 0.0), name="out")
    out, _ = from_data(to_data(guarded, [B]))
    np.testing.assert_allclose(evaluate(out, {"B": np.arange(8.0)}), [0, 0, 1, 2, 3, 4, 5, 6])


def test_names_are_normalised_and_two_that_fold_to_one_refused() -> None:
    data = row_dot()
    data["computes"][0]["reduce"]["axes"][0][0] = "\uff49"  # fullwidth i beside the spatial axis i
    data["computes"][0]["body"]["a"]["index"][1] = {"var": "\uff49"}
    data["computes"][0]["body"]["b"]["index"][0] = {"var": "\uff49"}
    with pytest.raises(DefinitionError, match="once normalised"):
        from_data(data)
    data = row_dot()
    data["inputs"][1]["name"] = "\uff38"  # fullwidth X beside X
    with pytest.raises(DefinitionError, match="once normalised"):
        from_data(data)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(extra=1), "unknown keys"),
    (lambda d: d.update(version=99), "newer"),
    (lambda d: d["computes"][0]["body"].update(bin="**"), "operator"),
    (lambda d: d["computes"][0].update(body={"call": "system", "args": [{"const": 1, "dtype": None}]}), "a call"),
    (lambda d: d["computes"][0].update(body={"load": "secret", "index": [{"var": "i"}]}), "not an input"),
    (lambda d: d["computes"][0].update(name="__import__"), "identifier"),
    (lambda d: d["inputs"][0].update(shape=[1 << 20, 1 << 20]), "too many"),
    (lambda d: d["inputs"][0].update(dtype="object"), "dtype"),
    (lambda d: d["computes"][0]["body"].update(a={"const": float("inf"), "dtype": None}), "JSON"),
    (lambda d: d["computes"][0].update(reduce={"op": "sum", "axes": [["j", 1 << 30]]}), "extent"),
    (lambda d: d["computes"][0].update(body={"var": "nope"}), "not one of its axes"),
])
def test_anything_but_a_valid_definition_is_a_one_line_error(mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(row_dot())
    mutate(data)
    with pytest.raises(DefinitionError, match=match) as e:
        from_data(data)
    assert "\n" not in str(e.value)


def test_size_and_depth_are_bounded() -> None:
    data = row_dot()
    deep: dict = {"var": "i"}
    for _ in range(MAX_DEPTH + 2):
        deep = {"bin": "+", "a": deep, "b": {"const": 1, "dtype": None}}
    data["computes"][0]["body"] = deep
    with pytest.raises(DefinitionError, match="deeper"):
        from_data(data)

    def balanced(n: int) -> dict:
        if n == 1:
            return {"const": 0.123456789012345, "dtype": None}
        return {"bin": "+", "a": balanced(n // 2), "b": balanced(n - n // 2)}
    big = row_dot()
    big["computes"][0]["body"] = balanced(3000)  # shallow, but over MAX_BYTES
    with pytest.raises(DefinitionError, match="too large"):
        from_data(big)
    assert len(canonical(row_dot())) < MAX_BYTES
