"""Every registered template: random configs of its space at awkward shapes compile and agree with its
NumPy reference (float32 and float64), and its shape parser rejects bad shapes with a clear ShapeError.

Templates are read from templates.TEMPLATES at collection time, so templates added to the library
later are tested without touching this file. Shapes are drawn per dimension name: matmul-like M/N/K from
[1, 7, 127] (at most one 1000), image-like H/W <= 17 and channels <= 16; unknown dims get small values.
"""
from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from autotune.errors import ShapeError
from autotune.ir import te
from autotune.task import Task
from autotune.templates import TEMPLATES
from tests.helpers import assert_close

pytestmark = pytest.mark.target  # follows the target in force: .ci/run runs it again under each target

# the operator library: templates defined in the templates package (other tests register throwaway
# user templates into the same dict at run time; those are not part of the library)
NAMES = sorted(n for n, t in TEMPLATES.items() if getattr(t.define, "__module__", "").startswith("autotune.templates."))
assert NAMES, "no library template found: the filter above selects none (a renamed package?)"
IMAGE = {"H", "W"}
EXAMPLES = int(os.environ.get("AUTOTUNE_TEMPLATE_EXAMPLES", "3"))  # per template and dtype; raise for a longer hunt


def shapes(tpl) -> st.SearchStrategy[dict]:
    """Small awkward shapes for a template, by its dimension names."""
    dims = list(tpl.dims)
    extra = dict(tpl.extra_dims)
    if IMAGE <= set(dims):  # conv2d-like: NCHW, kernel RxS, stride/pad/dilation extras
        per = {"N": st.sampled_from([1, 2]), "C": st.sampled_from([1, 3, 16]), "K": st.sampled_from([1, 7, 16]),
               "H": st.sampled_from([1, 7, 17]), "W": st.sampled_from([1, 5, 17]),
               "R": st.sampled_from([1, 3]), "S": st.sampled_from([1, 2, 3]),
               "stride": st.sampled_from([1, 2]), "pad": st.sampled_from([0, 1]), "dilation": st.sampled_from([1, 2])}
        default = st.sampled_from([1, 3])
        return st.fixed_dictionaries({d: per.get(d, default) for d in dims + [e for e in extra if e in per]})

    @st.composite
    def gemm_like(draw):
        out = {}
        big = draw(st.sampled_from([None] + [d for d in dims if d in ("M", "N", "K")]))
        for d in dims:
            if d in ("M", "N", "K"):
                out[d] = 1000 if d == big else draw(st.sampled_from([1, 7, 127]))
            elif d == "B":
                out[d] = draw(st.sampled_from([1, 3]))
            else:
                out[d] = draw(st.sampled_from([1, 3, 7]))
        return out
    return gemm_like()


def reduction_length(out: te.Tensor) -> int:
    """The longest reduction of any stage (what float error grows with)."""
    n = 1
    for t in te.input_tensors(out):
        if not t.is_placeholder:
            n = max(n, math.prod(a.extent for a in t.reduce_axes) if t.reduce_axes else 1)
    return n


def check(tpl_name: str, shape: dict, dtype: str, seed: int, in_hypothesis: bool = True) -> None:
    tpl = TEMPLATES[tpl_name]
    try:
        task = Task.create(tpl_name, shape, dtype=dtype, threads=2)
    except ShapeError:  # e.g. a kernel larger than the padded image: not a valid point
        assume(False)
    cfg = task.space().sample(random.Random(seed))
    (note if in_hypothesis else print)(f"shape={task.shape_dict} cfg={cfg.to_json()}")
    k = task.build(cfg)
    inputs = task.inputs(seed=seed % 1000)
    got = k(*inputs)
    want = task.reference(inputs)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, want.astype(dtype), dtype, reduction_length(tpl.define(task.shape_dict, dtype)))
    # a second call gives the same result (no state left over from the first)
    np.testing.assert_array_equal(k(*inputs), got)


@pytest.mark.parametrize("dtype", ["float32"])  # float64 is covered by the random configs below
@pytest.mark.parametrize("name", NAMES)
def test_default_config_at_awkward_shape(name, dtype):
    """One deterministic example per template: the first sampled config at a small odd shape."""
    tpl = TEMPLATES[name]
    if IMAGE <= set(tpl.dims):
        shape = {d: {"N": 1, "C": 3, "K": 7, "H": 9, "W": 7, "R": 3, "S": 3}.get(d, 3) for d in tpl.dims}
        shape.update({e: {"stride": 2, "pad": 1, "dilation": 1}[e] for e in tpl.extra_dims
                      if e in ("stride", "pad", "dilation")})
    else:
        shape = {d: {"M": 7, "N": 37, "K": 29, "B": 3}.get(d, 5) for d in tpl.dims}
    check(name, shape, dtype, 0, in_hypothesis=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_random_configs_match_reference(name, dtype):
    tpl = TEMPLATES[name]

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.filter_too_much])
    @given(shape=shapes(tpl), seed=st.integers(0, 2**31 - 1))
    def run(shape, seed):
        check(name, shape, dtype, seed)

    run()


# ---------------------------------------------------------------------------------------------
# shapes: parsing and errors
# ---------------------------------------------------------------------------------------------
def good_shape(tpl) -> dict:
    return tpl.parse_shape(tpl.default_shape)


@pytest.mark.parametrize("name", NAMES)
def test_parse_shape_forms_agree(name):
    tpl = TEMPLATES[name]
    d = good_shape(tpl)
    assert set(tpl.dims) <= set(d)
    nums = [d[k] for k in list(tpl.dims) + list(tpl.extra_dims)]
    assert tpl.parse_shape("x".join(map(str, nums))) == d
    assert tpl.parse_shape(nums) == d
    assert tpl.parse_shape(dict(d)) == d
    assert tpl.parse_shape({k: d[k] for k in tpl.dims}) == {**tpl.extra_dims, **{k: d[k] for k in tpl.dims}}
    assert tpl.flops(d) > 0
    assert Task.create(name, d).flops() > 0


@pytest.mark.parametrize("name", NAMES)
def test_parse_shape_errors(name):
    tpl = TEMPLATES[name]
    d = good_shape(tpl)
    n = len(tpl.dims)
    first = tpl.dims[0]
    vals = [str(d[k]) for k in tpl.dims]
    bad_strings = ["", "x", "abc", "x".join(vals[:-1] + ["foo"]), "x".join(vals[:-1] + ["2.5"]),
                   "x".join(vals[:-1] + ["1e3"])]
    for bad in bad_strings:
        with pytest.raises(ShapeError, match=name):
            tpl.parse_shape(bad)
    if n > 1:
        with pytest.raises(ShapeError, match=f"has {n - 1} numbers"):
            tpl.parse_shape("x".join(vals[:-1]))
    too_many = n + len(tpl.extra_dims) + 1
    with pytest.raises(ShapeError, match=f"has {too_many} numbers"):
        tpl.parse_shape("x".join(["3"] * too_many))
    for v in (0, -1, -128):
        with pytest.raises(ShapeError, match=f"{first} must be a positive integer"):
            tpl.parse_shape({**{k: d[k] for k in tpl.dims}, first: v})
        with pytest.raises(ShapeError, match="positive integer"):
            tpl.parse_shape("x".join([str(v)] + vals[1:]))
    for v in (True, 2.0, "3", None):
        with pytest.raises(ShapeError, match=f"{first} must be a positive integer"):
            tpl.parse_shape({**{k: d[k] for k in tpl.dims}, first: v})
    with pytest.raises(ShapeError, match="unknown shape dims"):
        tpl.parse_shape({**d, "bogus": 3})
    if n > 1:
        with pytest.raises(ShapeError, match=f"missing {tpl.dims[-1]!r}"):
            tpl.parse_shape({k: d[k] for k in tpl.dims[:-1]})
    with pytest.raises(ShapeError, match="too large"):
        tpl.parse_shape({**{k: d[k] for k in tpl.dims}, first: 1 << 40})
    with pytest.raises(ShapeError, match="dtype"):
        Task.create(name, d, dtype="float16")
