"""matmul with a few rows (a matrix-vector product at M = 1): the row-streaming kernel ([kernel]
"rows") is in the space only then, agrees with the reference at awkward shapes for every [ku] and
column blocking, and comes first among the presets."""
from __future__ import annotations

import pytest

from autotune.task import Task
from autotune.templates.matmul import ROWS_MAX
from tests.helpers import assert_close


@pytest.mark.parametrize("shape,threads", [("1x37x29", 2), ("3x100x7", 2), ("8x17x33", 1)])
def test_rows_kernel_matches_reference(shape, threads):
    task = Task.create("matmul", shape, "float32", threads)
    sp = task.space()
    inputs = task.inputs(seed=3)
    want = task.reference(inputs)
    base = {k.name: k.values()[0] for k in sp.knobs}
    blocks, kus, nrs = (sp.by_name[n].values() for n in ("jc_blocks", "ku", "nr"))
    for i, ku in enumerate(kus):
        cfg = {**base, "kernel": "rows", "ku": ku, "jc_blocks": blocks[i % len(blocks)],
               "nr": nrs[i % len(nrs)], "parallel": threads > 1 and i % 2 == 0}
        assert_close(task.build(cfg)(*inputs), want, "float32", task.shape_dict["K"]), cfg


def test_rows_kernel_only_with_few_rows_and_first_among_presets():
    assert "kernel" not in Task.create("matmul", f"{ROWS_MAX + 1}x64x64").space().by_name
    task = Task.create("matmul", "1x256x256", "float32", 2)
    presets = task.template.presets(task.shape_dict, "float32", 2)
    assert presets[0]["kernel"] == "rows" and presets[-1]["kernel"] == "panels"
    for cfg in presets:
        task.space().validate(cfg)
    for shape in ("1x17x2", "2x40x1"):  # K below the presets' ku: snapped into the space
        small = Task.create("matmul", shape, "float32", 2)
        for cfg in small.template.presets(small.shape_dict, "float32", 2):
            small.space().validate(cfg)


def test_a_config_logged_before_the_rows_kernel_still_validates_and_builds_the_same_kernel():
    task = Task.create("matmul", "4x40x24", "float32", 1)
    sp = task.space()
    old = {k.name: k.values()[0] for k in sp.knobs if k.name not in ("kernel", "ku")}
    cfg = sp.validate(old)
    assert cfg["kernel"] == "panels" and cfg["ku"] == 1
    assert task.source(cfg) == task.source(sp.validate({**old, "kernel": "panels", "ku": 4}))
