"""`autotune dashboard`: the board a page draws from (hostile lines skipped and counted, strings cut,
a replaced log read again, bench files read only when they are bench files), and the page itself
in headless Chromium while a real tuner appends to its log: curves and table appear, and a new
record shows up without a reload."""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune.dashboard import Board, read_bench, require_web_stack
from autotune.errors import AutotuneError
from autotune.records import Record, RecordLog

HOSTILE_OP = "<img src=x onerror=window.__pwned=1>"


def _record(op: str = "matmul", seconds: float = 1e-4, **kw) -> Record:  # type: ignore[no-untyped-def]
    return Record(op=op, shape={"M": 16, "N": 16, "K": 16}, dtype="float32", threads=1, config=kw.pop("config", {}),
                  costs=[seconds] if seconds else None, strategy="random", **kw)


def test_board_counts_hostile_lines_and_never_takes_a_bad_record_as_best(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    RecordLog(log, fsync=False).append(_record(config={"mr": 999}))  # outside the space: not usable
    RecordLog(log, fsync=False).append(_record(HOSTILE_OP, message="<script>x</script>" * 100))
    RecordLog(log, fsync=False).append(_record(seconds=0, error="compile_error", noisy=True))
    with open(log, "a") as f:
        f.write('{"v":1,"op":"matmul", not json\n')
        f.write('{"v":1,"op":"matmul","shape":{},"dtype":"float32","threads":1,"config":{},"costs":[NaN]}\n')
        f.write("x" * (1 << 20) + "\n")
    board = Board([log], scan_bench=False, min_interval=0)
    board.refresh()
    v = board.view()
    assert v["records"] == 3 and v["skipped"] == 3
    tasks = {t["task"]: t for t in v["tasks"]}
    mm = tasks["matmul|M=16,N=16,K=16|float32|threads=1"]
    assert mm["trials"] == 2 and mm["errors"] == 1 and mm["noisy"] == 1 and mm["not_usable"] == 1
    assert mm["best"] is None and "compile_error 1" in mm["error_kinds"]
    assert any(t.startswith(HOSTILE_OP) for t in tasks)  # kept as text; the page escapes it
    assert all(len(r["note"]) <= 200 for r in v["rows"])
    # a log replaced under the board is read again from its start, not added to what was read
    log.write_text(_record().to_line())
    board.refresh()
    assert board.view()["records"] == 1


def test_bench_files_are_read_only_when_they_are_bench_files(tmp_path: Path) -> None:
    good = {"schema": 1, "task": "matmul|M=16,N=16,K=16|float32|threads=1", "best": {"gflops": 10.0},
            "baselines": {"numpy": {"gflops": 8.0}, "torch": {"gflops": "fast"}}}
    (tmp_path / "bench.json").write_text(json.dumps(good))
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "nan.json").write_text('{"schema": 1, "task": "t", "best": {"gflops": NaN}, "baselines": {}}')
    entry = read_bench(tmp_path / "bench.json")
    assert entry is not None and entry.autotune == 10.0 and entry.baselines == (("numpy", 8.0),)
    assert read_bench(tmp_path / "other.json") is None and read_bench(tmp_path / "nan.json") is None
    RecordLog(tmp_path / "log.jsonl", fsync=False).append(_record(config=_valid_config()))
    board = Board([tmp_path / "log.jsonl"], min_interval=0)
    board.refresh()
    [b] = board.view()["bench"]
    assert b["log_best"] == pytest.approx(2 * 16 ** 3 / 1e-4 / 1e9) and b["autotune"] == 10.0


def _valid_config() -> dict:  # type: ignore[type-arg]
    from autotune.task import Task
    return Task.create("matmul", "16x16x16", threads=1).default_config().to_json()


def test_predictions_are_drawn_per_task_with_their_rank_correlation(tmp_path: Path) -> None:
    from autotune.dashboard import prediction_figures, rank_correlation
    log = tmp_path / "guided.jsonl"
    cfg = _valid_config()
    for i, pred in enumerate([3.0, 1.0, 2.0, 0.5]):  # faster where the model predicted higher, but for one
        RecordLog(log, fsync=False).append(_record(seconds=1e-4 * (1 + i), config=cfg, predicted=pred))
    RecordLog(log, fsync=False).append(_record(seconds=1e-5, config=cfg, retimed=True, predicted=9.0))  # no trial
    RecordLog(log, fsync=False).append(_record(seconds=1e-5, config={"mr": 999}, predicted=9.0))  # not usable
    board = Board([log], scan_bench=False, min_interval=0)
    board.refresh()
    v = board.view()
    [fig] = prediction_figures(v)
    [trace] = fig["data"]
    assert trace["x"] == [3.0, 1.0, 2.0, 0.5] and trace["y"][0] > trace["y"][1] > trace["y"][2] > trace["y"][3]
    rho = rank_correlation(trace["x"], trace["y"])
    assert rho == 0.8 and "rank correlation (Spearman) 0.80, 4 configs" in fig["layout"]["title"]["text"]
    assert fig["layout"]["yaxis"]["title"]["text"] == "measured GFLOP/s"
    assert rank_correlation([1, 1, 1], [1, 2, 3]) is None and rank_correlation([1, 2], [2, 1]) is None


def test_each_tasks_best_shows_its_share_of_this_machines_limit_when_measured_here(tmp_path: Path) -> None:
    """As `autotune report`'s column: the best's GFLOP/s over the roofline at the task's intensity,
    for a best measured on this CPU with the peak known; none from another CPU or without a peak."""
    from autotune.measure.peak import Peak, task_bytes, task_intensity
    from autotune.report import best_shares
    from autotune.target import cpu_model, current, current_target
    from autotune.task import Task

    def peak(dtype: str, threads: int) -> Peak:
        return Peak(cpu=cpu_model(), isa=current().isa, dtype=dtype, threads=threads, gflops=100.0, read_gbps=10.0,
                    l3_gbps=30.0, l3_bytes=32 << 20, l2_gbps=60.0, l2_bytes=1 << 20)
    here, elsewhere = current_target(1), {**current_target(1), "cpu": "Another CPU"}
    cfg = _valid_config()
    log = tmp_path / "log.jsonl"
    recs = [_record(seconds=2e-5, config=cfg, target=here), _record(seconds=4e-5, config=cfg, target=here),
            Record(op="matmul", shape={"M": 32, "N": 16, "K": 16}, dtype="float32", threads=1, config=cfg,
                   costs=[1e-5], strategy="random", target=elsewhere)]
    for r in recs:
        RecordLog(log, fsync=False).append(r)
    board = Board([log], scan_bench=False, min_interval=0, peak_of=peak)
    board.refresh()
    tasks = {t["task"]: t for t in board.view()["tasks"]}
    mine, other = tasks["matmul|M=16,N=16,K=16|float32|threads=1"], tasks["matmul|M=32,N=16,K=16|float32|threads=1"]
    task = Task.create("matmul", "16x16x16", threads=1)
    want = 100 * task.flops() / 2e-5 / 1e9 / peak("float32", 1).attainable(task_intensity(task), task_bytes(task))
    assert mine["limit_pct"] == pytest.approx(want, abs=0.05)  # a percentage to one decimal
    assert mine["limit_pct"] == pytest.approx(100 * best_shares(recs, peak)[recs[0].key], abs=0.05)
    assert other["limit_pct"] is None  # measured on another CPU
    unknown = Board([log], scan_bench=False, min_interval=0, peak_of=lambda d, t: None)
    unknown.refresh()
    assert all(t["limit_pct"] is None for t in unknown.view()["tasks"])  # no peak measured here yet


def test_a_sweeps_tasks_show_trials_done_of_planned_and_their_best(tmp_path: Path) -> None:
    from autotune.dashboard import _sweep
    log = tmp_path / "sweep.jsonl"
    cfg = _valid_config()
    stamp = {"id": "s1", "trials": 4, "tasks": 3}
    for i in range(4):  # one task done: its trials and its finalists' re-timing
        RecordLog(log, fsync=False).append(_record(seconds=1e-4 * (1 + i), config=cfg, sweep=stamp))
    RecordLog(log, fsync=False).append(_record(seconds=1e-4, config=cfg, sweep=stamp, retimed=True))
    other = Record(op="matmul", shape={"M": 32, "N": 16, "K": 16}, dtype="float32", threads=1, config=cfg,
                   costs=[1e-4], sweep={"id": "s1", "trials": 8, "tasks": 3})  # one running
    RecordLog(log, fsync=False).append(other)
    board = Board([log], scan_bench=False, min_interval=0)
    board.refresh()
    [sw] = board.view()["sweeps"]
    assert (sw["tasks"], sw["done"], sw["running"], sw["waiting"], sw["trials"], sw["planned"]) == (3, 1, 1, 1, 5, 12)
    rows = {r["task"]: r for r in sw["rows"]}
    done, running = rows["matmul|M=16,N=16,K=16|float32|threads=1"], rows["matmul|M=32,N=16,K=16|float32|threads=1"]
    assert (done["trials"], done["state"], running["trials"], running["state"]) == ("4 of 4", "done", "1 of 8", "running")
    assert done["best"] == pytest.approx(2 * 16 ** 3 / 1e-4 / 1e9, rel=1e-3)
    note, grid, style = _sweep(board.view(), "hidden", "shown")
    assert "sweep s1 (sweep.jsonl): 1 of 3 tasks done, 1 running, 1 not started; 5 of the 12 trials planned for the 2 tasks started" in note and style == "shown"
    assert len(grid) == 2


def test_a_missing_web_stack_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dash", None)  # import dash raises ImportError
    with pytest.raises(AutotuneError, match=r"pip install '\.\[dashboard\]' in autotune's checkout"):
        require_web_stack()


def test_cli_refuses_a_log_that_is_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main
    assert main(["dashboard", str(tmp_path), "--port", "0"]) == 2
    assert "not a regular file" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.mark.skipif(not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
                    reason="Chromium and ChromeDriver are not installed (apt-get install chromium chromium-driver; "
                           ".ci/run installs them)")
def test_the_page_follows_a_tuner_live_in_chromium(tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    import autotune
    from autotune.dashboard import serve

    log = tmp_path / "tune.jsonl"  # not written yet: the page waits for it
    server = serve([log], port=0, interval=0.3)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1900"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    errors: list[BaseException] = []
    seen = threading.Event()  # the page showed the first run's record: the second run may start

    def tune() -> None:
        try:  # two runs (the second resumes the log): a record arrives after the page showed one,
            # however fast the trials (kernels compiled before load from the cache in milliseconds)
            for trials in (1, 2):
                autotune.tune(op="matmul", shape="16x16x16", trials=trials, batch=1, log=str(log),
                              progress=False, finalists=None, threads=1)
                if not seen.wait(60):
                    raise TimeoutError("the page never showed the first record")
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
    tuner = threading.Thread(target=tune, daemon=True)
    try:
        driver.get(server.url)
        wait = WebDriverWait(driver, 25, poll_frequency=0.2)
        wait.until(lambda d: "waiting for tune.jsonl" in d.find_element(By.ID, "status").text)
        driver.execute_script("window.__same_page = 1")  # gone if the page reloads
        tuner.start()

        def rows(d) -> int:  # type: ignore[no-untyped-def]
            return len(d.find_elements(By.CSS_SELECTOR, "#configs .ag-center-cols-container .ag-row"))
        wait.until(lambda d: rows(d) >= 1)
        first = rows(driver)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#curve-trials .scatterlayer .trace")
                   and d.find_elements(By.CSS_SELECTOR, "#curve-time .scatterlayer .trace"))
        seen.set()
        wait.until(lambda d: rows(d) > first)  # the tuner's next record, without a reload
        tuner.join(60)
        assert not errors, errors
        # a hostile line and a hostile record: skipped and counted, shown as text
        with open(log, "a") as f:
            f.write('{"v":1,"op":"<script>window.__pwned=1</script>", broken\n')
        RecordLog(log, fsync=False).append(_record(HOSTILE_OP))
        wait.until(lambda d: HOSTILE_OP in d.find_element(By.ID, "tasks").text)
        wait.until(lambda d: "1 line skipped" in d.find_element(By.ID, "status").text)
        # a model-guided sweep's records: its task grid and the predicted-against-measured plot appear
        cfg = _valid_config()
        for i in range(3):
            RecordLog(log, fsync=False).append(_record(seconds=1e-4 * (1 + i), config=cfg, predicted=3.0 - i,
                                                       sweep={"id": "live", "trials": 8, "tasks": 2}))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#predicted .scatterlayer .trace"))
        assert "rank correlation (Spearman) 1.00" in driver.find_element(By.ID, "predicted").text
        wait.until(lambda d: "1 of 2 tasks" in d.find_element(By.ID, "sweep-note").text
                   or "0 of 2 tasks" in d.find_element(By.ID, "sweep-note").text)
        assert "of 8" in driver.find_element(By.ID, "sweep").text
        assert driver.execute_script("return window.__same_page") == 1
        assert driver.execute_script("return window.__pwned") is None
        assert "matmul|M=16,N=16,K=16|float32|threads=1" in driver.find_element(By.ID, "tasks").text
        shot = tmp_path / "dashboard.png"
        time.sleep(0.5)  # let the last redraw settle
        driver.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()
        server.stop()
