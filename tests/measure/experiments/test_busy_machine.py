"""busy-machine: the experiment runs end to end at a tiny size (a quiet run, a busy run beside a
busy process, retime, the comparison) and reports what the results document quotes."""
from __future__ import annotations

import argparse

import pytest

from autotune.measure.experiments import busy_machine


def test_busy_machine_runs_end_to_end(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    args = argparse.Namespace(op="matmul", shape="48x48x48", dtype="float32", threads=1, trials=1, busy_seconds=1.0,
                              hogs=1, nice=0, batch=1, rounds=1, repeats=1, dir=str(tmp_path))
    res = busy_machine.run(args)
    (row,) = res["runs"]
    assert row["quiet_trials"] == 1 and row["busy_trials"] >= 1 and 0 <= row["busy_noisy"] <= row["busy_trials"]
    assert set(row["speed"]) == {"quiet", "busy_before_retime", "busy_after_retime"}
    assert row["ratio_after_retime"] > 0 and res["median_ratio_after_retime"] == row["ratio_after_retime"]
    assert (tmp_path / "run1" / "busy-before.jsonl").exists()
    assert "after" in capsys.readouterr().out
    assert any("re-timed" in line for line in row["retime_output"])
