"""A sweep's console progress when stderr is no terminal: a line every few seconds (tasks done of
all, trials, the running tasks' best so far, elapsed) and one as each task ends. No Ray needed."""
from __future__ import annotations

import io
import time

from autotune.distributed import SweepState, SweepTask, _SweepView
from autotune.progress import ProgressOptions


def _state(m: int, trials: int) -> SweepState:
    return SweepState(SweepTask("matmul", {"M": m, "N": 16, "K": 16}, "float32", trials, None, 0, 1))


def test_a_piped_sweep_prints_tasks_done_of_all_and_the_best_so_far_every_few_seconds() -> None:
    out = io.StringIO()
    a, b = _state(16, 4), _state(32, 8)
    states = {a.task.key: a, b.task.key: b}
    with _SweepView(states, True, ProgressOptions(interval_s=0.05, terminal=False, stream=out)) as view:
        assert view.mode == "lines"
        a.status, a.pid, a.done, a.best = "running", 1, 2, 1e-7
        time.sleep(0.2)  # a few ticks
        a.status, a.done = "done", 4
        b.status = "running"  # submitted, not started yet
        view.refresh()
        view.refresh()  # a task's end is said once
    lines = out.getvalue().splitlines()
    assert lines[0] == "autotune: sweep: 2 tasks, 12 trials"
    ticks = [x for x in lines if "tasks done" in x and "ended" not in x]
    assert len(ticks) >= 2 and "0 of 2 tasks done (1 running, 1 queued, 0 failed), 2 of 12 trials" in ticks[0]
    assert "matmul M=16 N=16 K=16 float32 threads=1 2/4 best 81.9 GFLOP/s" in ticks[0]
    [ended] = [x for x in lines if "ended)" in x]
    assert ended.startswith("autotune: sweep: matmul M=16 N=16 K=16 float32 threads=1 done: 4/4 trials, best 81.9 "
                            "GFLOP/s (1 of 2 tasks ended)")
    assert "1 of 2 tasks done (0 running, 1 queued, 0 failed), 4 of 12 trials" in lines[-1]


def test_no_progress_writes_nothing() -> None:
    out = io.StringIO()
    st = _state(16, 4)
    with _SweepView({st.task.key: st}, False, ProgressOptions(interval_s=0.01, terminal=False, stream=out)) as view:
        st.status = "done"
        view.refresh()
    assert out.getvalue() == ""
