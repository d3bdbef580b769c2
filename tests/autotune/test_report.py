"""`autotune report`: a task whose every trial failed is listed as such and left off the plot; the
plot's roofline panel draws each best kernel measured on this CPU under the machine's limits; the
share of the limit is a column when the peak is known; labels and legends keep off the curves."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.measure.peak import Peak
from autotune.records import Record
from autotune.report import plot, summary
from autotune.target import cpu_model, current, current_target
from autotune.task import Task


def _peak(dtype: str, threads: int) -> Peak:
    return Peak(cpu=cpu_model(), isa=current().isa, dtype=dtype, threads=threads, gflops=100.0, read_gbps=10.0,
                l3_gbps=30.0, l3_bytes=32 << 20, l2_gbps=60.0, l2_bytes=1 << 20)


def _records() -> list[Record]:
    good = Task.create("matmul", "64x64x64", threads=1)
    cfg = good.default_config().to_json()
    here = current_target(1)
    out = [Record(op="matmul", shape=good.shape_dict, dtype="float32", threads=1, config=cfg,
                  costs=[good.flops() / (g * 1e9)], timestamp=100.0 + i, strategy="random", target=here)
           for i, g in enumerate((10.0, 20.0))]
    bad = Task.create("matmul", "32x32x32", threads=1)
    out += [Record(op="matmul", shape=bad.shape_dict, dtype="float32", threads=1, config=cfg, costs=None,
                   error=e, message="boom", timestamp=200.0 + i, strategy="random", target=here)
            for i, e in enumerate(("compile_error", "wrong_answer", "compile_error"))]
    return out


def test_an_all_failed_task_is_listed_as_such_not_as_zero() -> None:
    text = summary(_records(), peak_of=lambda d, t: None)
    assert "matmul M=32 N=32 K=32 float32 threads=1: no successful trial (3 failed, most often compile_error)" in text
    assert "best 0.0" not in text
    row = next(x for x in text.splitlines() if x.startswith("matmul M=32"))
    assert row.split()[6:11] == ["random", "3", "3", "0", "-"]  # trials, errors, noisy, and no best speed
    assert "of limit" not in text  # no peak known: no column


def test_the_share_of_the_limit_is_a_column_when_the_peak_is_known() -> None:
    text = summary(_records(), peak_of=_peak)
    header, *rows = text.splitlines()
    assert header.split()[-4:] == ["of", "limit", "elapsed", "s"]
    good = next(x for x in rows if x.startswith("matmul M=64"))
    task = Task.create("matmul", "64x64x64", threads=1)
    from autotune.measure.peak import task_bytes, task_intensity
    share = 20.0 / _peak("float32", 1).attainable(task_intensity(task), task_bytes(task))
    assert good.split()[-2] == f"{100 * share:.0f}%"


def test_the_plot_has_a_roofline_panel_and_leaves_failed_tasks_off(tmp_path: Path) -> None:
    path = tmp_path / "new" / "c.png"
    fig = plot(_records(), str(path), peak_of=_peak)
    assert path.stat().st_size > 1000
    a, b, roof = fig.axes
    assert roof.get_xscale() == "log" and roof.get_yscale() == "log"
    assert roof.get_xlabel() == "arithmetic intensity (flop/byte)" and roof.get_ylabel() == "GFLOP/s"
    lines = {ln.get_label(): ln for ln in roof.get_lines()}
    memory = lines["roofline from memory (float32, 1 thread)"]
    xs, ys = memory.get_data()
    assert max(ys) == pytest.approx(100.0) and ys[0] == pytest.approx(xs[0] * 10.0)
    points = [c.get_label() for c in roof.collections]
    assert len(points) == 1 and points[0].startswith("matmul M=64 N=64 K=64 float32 threads=1: ")
    # the failed task is not drawn: one curve per panel, the good task's
    assert len(a.get_lines()) == 1 and len(b.get_lines()) == 1
    assert "1 task with no successful trial left off" in fig._suptitle.get_text()
    # legends sit below the panels, not over them; the y-labels keep clear of the title
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)  # the figure comes back closed: draw it again to measure its parts
    canvas.draw()
    renderer = canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:
        assert ax.get_legend() is None
        label = ax.yaxis.label.get_window_extent(renderer)
        assert label.y1 < title.y0 and not label.overlaps(title)
        for legend in fig.legends:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_only_records_measured_on_this_cpu_are_drawn_against_its_roofline(tmp_path: Path) -> None:
    elsewhere = [Record(**{**r.__dict__, "target": {**r.target, "cpu": "another CPU"}}) for r in _records()]
    fig = plot(elsewhere, str(tmp_path / "c.png"), peak_of=_peak)
    assert not fig.axes[2].collections and "of limit" not in summary(elsewhere, peak_of=_peak)
