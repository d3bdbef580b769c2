"""template-free: every row's definition registers as a template-free operator whose derived space
has the sketch the row is about; unknown rows are refused; the table marks rows below target."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from autotune.autoschedule import AutoScheduler
from autotune.measure.experiments.template_free import ROWS, _definition, _then_bias_relu, run, table

SKETCH = {"matmul": "gemm", "conv2d": "window", "conv2d_bias_relu": "window", "dense_bias_relu": "gemm", "rowsum": "rows", "softmax": "rows",
          "layernorm": "rows"}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_each_row_is_tuned_from_its_definition_alone(row) -> None:  # type: ignore[no-untyped-def]
    task = _definition(row, 2)
    out = task.template.define(task.shape_dict, "float32")
    assert AutoScheduler(out, 2).sketch == SKETCH[row.name]
    assert all(task.space().validate(p) for p in task.presets())


def test_an_unknown_row_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown rows"):
        run(argparse.Namespace(rows="matmul,gemv", trials=4, runs=1, threads=2, log_dir=None))


def test_the_table_marks_rows_below_their_target() -> None:
    rows = [{"row": "matmul", "shape": "8x8x8", "baseline": "matmul template", "definition_ms": 2.0,
             "baseline_ms": 1.0, "ratio": 0.5, "target": 0.8}]
    assert "**0.50x** | >= 0.8x (below)" in table(rows)


def test_the_epilogue_baseline_is_the_template_then_numpys_bias_relu() -> None:
    y = np.arange(-6.0, 6.0, dtype=np.float32).reshape(1, 3, 2, 2)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_array_equal(_then_bias_relu(lambda: y, b)(), np.maximum(y + b[:, None, None], 0))
