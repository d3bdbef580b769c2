"""streaming-stores: the experiment builds, checks and times a row-wise template both ways."""
from __future__ import annotations

import argparse

import pytest

from autotune.measure.experiments import streaming_stores


def test_streaming_stores_times_each_config_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    res = streaming_stores.run(argparse.Namespace(ops="softmax", shapes="64x256,4x8", threads=2, rounds=1, rows="4"))
    (row,) = res["rows"]  # rows of 8 floats are not streamed
    # pairs: attach block (prefetch 0), attach row with prefetch 0, 2 and 4
    assert row["op"] == "softmax" and row["configs"] == 4 and row["plain_seconds"] > 0 and row["stream_seconds"] > 0
    out = capsys.readouterr().out
    assert "softmax 64x256 float32" in out and "softmax 4x8: stream True is not in its space (rows of 32 bytes)" in out


def test_the_prefetch_knob_is_compared_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    res = streaming_stores.run(argparse.Namespace(ops="layernorm", shapes="64x256", threads=2, rounds=1, rows="4",
                                                  knob="prefetch", on=2))
    (row,) = res["rows"]  # pairs: attach row with plain and streaming stores (block: no prefetch)
    assert row["knob"] == "prefetch" and row["configs"] == 2 and row["stream_seconds"] > 0
    assert "fastest no prefetch" in capsys.readouterr().out
