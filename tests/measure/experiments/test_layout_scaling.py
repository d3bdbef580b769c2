"""layout-scaling: the flags, and one tiny GST run in a fresh subprocess (its own peak RSS, seconds per
epoch, no more nodes with gradient than S). SYNTHETIC graphs of 80 nodes: a few seconds."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.measure.experiments.__main__ import EXPERIMENTS, parser

pytest.importorskip("torch")


def test_layout_scaling_is_registered_with_its_flags() -> None:
    assert "layout-scaling" in EXPERIMENTS
    args = parser().parse_args(["layout-scaling", "--sizes", "300,1000", "--segment-size", "100", "--modes", "gst"])
    assert args.sizes == [300, 1000] and args.segment_size == 100 and args.modes == ["gst"]
    assert args.halo == 1 and args.epoch_unit == "segments"
    args = parser().parse_args(["layout-scaling", "--halo", "0", "--epoch", "graphs"])
    assert args.halo == 0 and args.epoch_unit == "graphs"
    with pytest.raises(SystemExit):
        parser().parse_args(["layout-scaling", "--modes", "both"])


def test_one_gst_run_in_a_subprocess(tmp_path: Path) -> None:
    from autotune.backends.tpu.layout_data import generate_layout_dataset
    from autotune.measure.experiments import layout_scaling
    generate_layout_dataset(tmp_path, train=1, valid=0, test=0, nodes=(80, 80), configs=4, seed=1)
    args = parser().parse_args(["layout-scaling", "--segment-size", "30", "--epochs", "2", "--sample-configs", "4",
                                "--hidden", "8", "--layers", "1"])
    r = layout_scaling.measure(str(tmp_path), "gst", args)
    assert "error" not in r, r
    assert r["peak_rss_mb"] >= r["loaded_rss_mb"] > 10 and len(r["epoch_seconds"]) == 2
    assert r["max_graph_nodes"] == 80 and 0 < r["max_grad_nodes"] < 80          # a segment and its halo
