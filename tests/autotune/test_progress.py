"""Progress when stderr is no terminal (CI, nohup, a notebook): a plain line every few seconds,
the finalists' re-timing announced, and a line when the best named differs from the search's."""
from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from autotune.errors import AutotuneError
from autotune.progress import ProgressOptions, TuneProgress
from autotune.retime import FinalistOptions
from autotune.runner import MeasureResult
from autotune.task import Task


class TimedStream(io.StringIO):
    """A captured stream (no terminal) remembering when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def write(self, s: str) -> int:
        if s.strip():
            self.times.append(time.monotonic())
        return super().write(s)

    def isatty(self) -> bool:
        return False


def test_a_tune_with_stderr_captured_prints_periodic_lines_and_says_when_it_retimes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.tuning import tune
    stream = TimedStream()
    t0 = time.monotonic()
    result = tune(op="matmul", shape="16x16x16", threads=1, trials=4, log=tmp_path / "t.jsonl",
                  progress=ProgressOptions(interval_s=0.2, stream=stream),
                  finalists=FinalistOptions(count=3, within=100.0, noisy_within=100.0, minimum=2))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "autotune: tuning matmul M=16 N=16 K=16 float32 threads=1: 4 trials"
    periodic = [x for x in lines if re.search(r": \d+/4 trials, (best [\d.]+ GFLOP/s|no successful trial yet), "
                                              r"\d+ errors?, \d+ s", x)]
    assert len(periodic) >= 2, lines
    assert result.retimed >= 2
    assert any(re.search(r"re-timing the \d+ fastest in 3 alternating rounds\.\.\.", x) for x in lines), lines
    # never a silent stretch: a line at least every interval (with slack for a busy machine)
    gaps = [b - a for a, b in zip([t0, *stream.times], stream.times)]
    assert max(gaps) < 5.0, gaps
    assert capsys.readouterr().err == ""  # all of it went to the stream asked for


class _Task:
    def key(self) -> str:
        return "matmul|M=8,N=8,K=8|float32|threads=1"

    def speed_unit(self) -> tuple[float, str]:
        return 1.0, "GFLOP/s"  # speed = 1.0 / seconds


def test_the_closing_line_says_why_the_final_best_differs_from_the_searchs() -> None:
    stream = TimedStream()
    with TuneProgress(_Task(), 2, options=ProgressOptions(interval_s=60, stream=stream)) as p:
        p.update(None, [1, 2], [MeasureResult((1.0 / 165.6,)), MeasureResult((10.0,))])
        p.retiming(5, 5)
        p.finish(1.0 / 129.8, retimed=5)
    lines = stream.getvalue().splitlines()
    assert "autotune: matmul M=8 N=8 K=8 float32 threads=1: re-timing the 5 fastest in 5 alternating rounds..." in lines
    assert re.fullmatch(r"autotune: matmul M=8 N=8 K=8 float32 threads=1: finished 2 trials \(0 errors, [\d.]+ s\): "
                        r"best 129\.8 GFLOP/s \(7704\.2 us\) after re-timing the finalists \(the search's timing said 165\.6\)",
                        lines[-1]), lines


def test_the_same_best_closes_with_the_plain_summary_and_a_disabled_progress_says_nothing() -> None:
    stream = TimedStream()
    with TuneProgress(_Task(), 1, options=ProgressOptions(interval_s=60, stream=stream)) as p:
        p.update(None, [1], [MeasureResult((1e-9,))])
        p.finish(1e-9, retimed=2)
    assert "re-timing the finalists" not in stream.getvalue()
    assert re.fullmatch(r"autotune: matmul M=8 N=8 K=8 float32 threads=1: finished 1 trial \(0 errors, [\d.]+ s\): "
                        r"best 1000000000\.0 GFLOP/s \(0\.0 us\)", stream.getvalue().splitlines()[-1])
    quiet = TimedStream()
    with TuneProgress(_Task(), 1, enabled=False, options=ProgressOptions(interval_s=0.01, stream=quiet)) as p:
        p.update(None, [1], [MeasureResult((1e-9,))])
        time.sleep(0.05)
    assert quiet.getvalue() == ""


def test_the_closing_line_gives_the_bests_share_of_the_limit_when_known() -> None:
    stream = TimedStream()
    with TuneProgress(_Task(), 1, options=ProgressOptions(interval_s=60, stream=stream)) as p:
        p.update(None, [1], [MeasureResult((1.0 / 129.8,))])
        p.finish(1.0 / 129.8, share=0.274)
    assert stream.getvalue().splitlines()[-1].endswith("best 129.8 GFLOP/s (7704.2 us, 27% of the limit)")


def test_a_tuned_kernels_share_of_the_limit_comes_from_the_cached_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """tuning.limit_share: the roofline of `bench` and `report` with the peak measured before; None
    without a cached peak (the probe never runs at the end of a tuning run)."""
    from autotune.measure import peak as peak_module
    from autotune.measure.peak import Peak, task_bytes, task_intensity
    from autotune.target import cpu_model, current
    from autotune.task import Task
    from autotune.tuning import limit_share
    task = Task.create("matmul", "64x64x64", threads=1)
    peak = Peak(cpu=cpu_model(), isa=current().isa, dtype="float32", threads=1, gflops=100.0, read_gbps=10.0,
                l3_gbps=30.0, l3_bytes=32 << 20, l2_gbps=60.0, l2_bytes=1 << 20)
    monkeypatch.setattr(peak_module, "cached_peak", lambda dtype, threads: peak)
    seconds = task.flops() / 20e9  # 20 GFLOP/s
    assert limit_share(task, seconds) == pytest.approx(20.0 / peak.attainable(task_intensity(task), task_bytes(task)))
    assert limit_share(task, float("inf")) is None
    tpu = Task.create("tpu_matmul", "1024x1024x1024", threads=1)  # the TPU emulator's: no CPU roofline
    assert peak_module.task_roof(tpu) is None and limit_share(tpu, 1e-3) is None
    from autotune.codegen.handwritten import check_spec
    from autotune.task import NumbaTask
    hand = NumbaTask.of(check_spec({  # a hand-written kernel: calls/s, and no template to ask
        "name": "f", "source": "def f(x):\n    x[0] = C\n", "globals": {}, "constants": ["C"],
        "args": [{"name": "x", "array": {"shape": [4], "dtype": "float64"}}], "key": ["x"], "outputs": None,
        "restore": [], "zero": [], "fastmath": False, "rtol": None}), threads=1)
    assert peak_module.task_roof(hand) is None and limit_share(hand, 1e-3) is None
    monkeypatch.setattr(peak_module, "cached_peak", lambda dtype, threads: None)
    assert limit_share(task, seconds) is None


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_the_interval_is_a_checked_option(bad: float) -> None:
    with pytest.raises(AutotuneError, match="interval_s must be a finite number of seconds > 0"):
        ProgressOptions(interval_s=bad)


def test_progress_on_a_terminal_is_a_bar() -> None:
    class Tty(TimedStream):
        def isatty(self) -> bool:
            return True
    stream = Tty()
    with TuneProgress(Task.create("matmul", "8x8x8", threads=1), 1, options=ProgressOptions(stream=stream)) as p:
        assert p.mode == "bar"
