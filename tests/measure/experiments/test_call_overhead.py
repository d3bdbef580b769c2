"""call-overhead: the experiment runs end to end (a few calls) and reports every way of calling."""
from __future__ import annotations

import argparse

import pytest

from autotune.measure.experiments import call_overhead


def test_call_overhead_times_each_way_of_calling(capsys: pytest.CaptureFixture[str]) -> None:
    res = call_overhead.run(argparse.Namespace(calls=20, large=False))
    assert [r["op"] for r in res["rows"]] == ["matmul 96^3", "elementwise 1024 (2x+1)"]
    for r in res["rows"]:
        assert all(r[k] > 0 for k in ("bare_us", "op_us", "op_out_us", "unchecked_us", "numpy_us"))
    assert "| matmul 96^3 |" in capsys.readouterr().out


def test_large_calls_time_the_check_where_it_matters(capsys: pytest.CaptureFixture[str]) -> None:
    res = call_overhead.run(argparse.Namespace(calls=2, large=True))
    assert [r["call"] for r in res["large"]] == ["matrix-vector 1x4096x4096", "conv2d 1x1 1x256x56x56 -> 64 (pad 1)",
                                                 "matmul 512^3"]
    assert all(r[k] > 0 for r in res["large"] for k in ("bare_us", "op_us", "unchecked_us"))
    assert "| matrix-vector 1x4096x4096 |" in capsys.readouterr().out
