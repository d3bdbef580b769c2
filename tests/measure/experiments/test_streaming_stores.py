"""streaming-stores: the experiment builds, checks and times a row-wise template both ways."""
from __future__ import annotations

import argparse

import pytest

from autotune.measure.experiments import streaming_stores


def test_streaming_stores_times_each_config_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    res = streaming_stores.run(argparse.Namespace(ops="softmax", shapes="64x256,4x8", threads=2, rounds=1, rows="4"))
    (row,) = res["rows"]  # rows of 8 floats are not streamed
    assert row["op"] == "softmax" and row["configs"] == 2 and row["plain_seconds"] > 0 and row["stream_seconds"] > 0
    out = capsys.readouterr().out
    assert "softmax 64x256 float32" in out and "softmax 4x8: rows of 32 bytes are not streamed" in out
