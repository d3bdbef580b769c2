"""The command line: one-line errors (exit 2) for every bad option value, an all-failed run
(exit 1, naming why), a missing optional package reported before any measurement, list, show."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.records import load_records

# a config valid on every listed target: its 2x16 tile fits 16 registers of 4 lanes (SSE4.2) too
GOOD = {"mr": 2, "nr": 16, "kc": 64, "mc_panels": 4, "jc_blocks": 1, "order": "jr_ir", "pack_a": True,
        "parallel": False}


@pytest.mark.parametrize("argv,needle", [
    (["show", "nope"], "unknown operator 'nope'"),
    (["show", "matmul", "--shape", "12x"], "shape '12x' has 1 numbers"),
    (["show", "matmul", "--shape", "axbxc"], "bad shape"),
    (["show", "matmul", "--shape", "0x4x4"], "positive integer"),
    (["show", "matmul", "--shape", "8x8x8", "--config", "{bad"], "not valid JSON"),
    (["show", "matmul", "--shape", "8x8x8", "--config", '{"mr": 5}'], "knob 'mr'"),
    (["replay", "/nonexistent/log.jsonl"], "no tuning log"),
    (["report", "/nonexistent/log.jsonl"], "no tuning log"),
    (["evaluate-model", "--model", "/nonexistent.json", "--log", "x"], "no model file"),
])
def test_errors_are_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("autotune: error:")


def test_list_shows_every_operator_and_its_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.templates import TEMPLATES
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in TEMPLATES:
        if TEMPLATES[name].default_shape:
            assert name in out
    assert "mr" in out and "kc" in out


def test_targets_lists_each_name_and_whether_this_machine_runs_it(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.target import TARGETS, executable
    monkeypatch.setenv("AUTOTUNE_TARGET", "sse4.2")
    assert main(["targets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert set(rows) == set(TARGETS)
    assert "<- in force" in rows["sse4.2"] and "128 bit" in rows["sse4.2"]
    for name, line in rows.items():
        assert ("runs its code" in line) == executable(name), line
    monkeypatch.setenv("AUTOTUNE_TARGET", "avx9")
    assert main(["targets"]) == 2
    assert "AUTOTUNE_TARGET='avx9' is not a target" in capsys.readouterr().err


def test_show_prints_source_for_a_partial_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "matmul", "--shape", "40x30x20", "--config", '{"mr": 4}', "--trace"]) == 0
    out = capsys.readouterr().out
    assert "@healing_njit" in out and "def kernel(A, B, C" in out and '"op": "pack"' in out


def test_report_summarises_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.records import Record, RecordLog
    log = tmp_path / "l.jsonl"
    cfg = [dict(GOOD, mc_panels=p) for p in (4, 8, 16)]
    for i, s in enumerate([3e-3, 1e-3, 2e-3]):
        RecordLog(log).append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
                                     config=cfg[i], costs=[s], timestamp=100.0 + i, strategy="random",
                                     noisy=i == 1))
    RecordLog(log).append(Record(op="matmul", shape={"M": 8, "N": 8, "K": 8}, dtype="float32", threads=1,
                                 config=cfg[2], costs=[1.6e-3], timestamp=103.0, strategy="random", retimed=True))
    assert main(["report", str(log), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "random" in out and (tmp_path / "c.png").stat().st_size > 1000
    header, row = out.splitlines()[:2]
    # columns line up however long the task name is; elapsed = last record's time - first's; the
    # re-timing is no trial; the named best is the re-timing, not the faster single timing
    assert header.index("elapsed s") + len("elapsed s") == len(row)
    assert row.split()[7:10] == ["3", "0", "1"] and row.split()[-1] == "2.0"  # after the readable key and strategy
    assert "elapsed s: from the task's first record" in out
    assert "matmul M=8 N=8 K=8 float32 threads=1: best 0.0 GFLOP/s, a quiet re-timing (1 re-timing of" in out


@pytest.mark.parametrize("argv,needle", [
    (["tune", "matmul", "--log", "x.jsonl", "--trials", "0"], "argument --trials: must be >= 1, got 0"),
    (["tune", "matmul", "--log", "x.jsonl", "--trials", "ten"], "argument --trials: must be an integer >= 1, got 'ten'"),
    (["tune", "matmul", "--log", "x.jsonl", "--batch", "0"], "argument --batch: must be >= 1"),
    (["tune", "matmul", "--log", "x.jsonl", "--timeout", "-5"], "argument --timeout: must be a finite number of seconds > 0"),
    (["tune", "matmul", "--log", "x.jsonl", "--timeout", "0"], "argument --timeout: must be a finite"),
    (["tune", "matmul", "--log", "x.jsonl", "--timeout", "nan"], "argument --timeout: must be a finite"),
    (["tune", "matmul", "--log", "x.jsonl", "--timeout", "inf"], "argument --timeout: must be a finite"),
    (["tune", "matmul", "--log", "x.jsonl", "--early-stopping", "0"], "argument --early-stopping: must be >= 1"),
    (["tune", "matmul", "--log", "x.jsonl", "--threads", "-3"], "argument --threads: must be >= 1, got -3"),
    (["tune", "matmul", "--log", "x.jsonl", "--seed", "-1"], "argument --seed: must be >= 0"),
    (["tune", "matmul", "--log", "x.jsonl", "--cost-model", "svm"], "argument --cost-model: invalid choice: 'svm'"),
    (["tune", "matmul"], "the following arguments are required: --log"),
    (["bench", "matmul", "--trials", "-1"], "argument --trials: must be >= 0"),
    (["bench", "matmul", "--trials", "0"], "--trials must be >= 1 (or 0 with --log"),
    (["bench", "matmul", "--rounds", "0"], "argument --rounds: must be >= 1"),
    (["bench", "matmul", "--seed", "x"], "argument --seed: must be an integer"),
    (["show", "matmul", "--threads", "0"], "argument --threads: must be >= 1"),
    (["sweep", "spec.toml", "--log", "x.jsonl", "--compile-workers", "0"], "argument --compile-workers: must be >= 1"),
    (["evaluate-tiles", "--kernels", "0"], "argument --kernels: must be >= 1"),
    (["evaluate-tiles", "--search-kernels", "-2"], "argument --search-kernels: must be >= 0"),
    (["evaluate-tiles", "--models", "xgb,svm"], "argument --models: unknown models ['svm']"),
    (["replay", "x.jsonl", "--threads", "0"], "argument --threads: must be >= 1"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_every_invalid_option_value_is_one_line_and_exit_2(argv: list[str], needle: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("autotune: error:"), err
    assert not (tmp_path / "x.jsonl").exists()  # nothing ran


def test_a_run_in_which_every_trial_failed_names_the_most_common_failure(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tests.measure import faulty_templates as ft  # registers `faulty` here and in the workers
    log = tmp_path / "t.jsonl"
    code = main(["tune", "faulty", "--shape", f"16x{ft.WRONG}", "--threads", "1", "--trials", "2", "--log", str(log),
                 "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("autotune: error: no config of faulty|N=16,mode=3|float32|threads=1 ran correctly: "
                             "2 of 2 trials failed, most often wrong_answer (2 of them), e.g. max error"), err
    assert len(load_records(log)) == 2  # every failure is still in the log


BLOCK_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'")
sys.meta_path.insert(0, NoTorch())
from autotune.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_missing_optional_dependency_is_reported_before_any_measurement(tmp_path: Path) -> None:
    from autotune.environment import ROOT, worker_env
    log = tmp_path / "t.jsonl"
    p = subprocess.run([sys.executable, "-c", BLOCK_TORCH, "tune", "matmul", "--shape", "16x16x16", "--threads", "1",
                        "--trials", "8", "--cost-model", "gnn", "--log", str(log)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=worker_env())
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and err == ["autotune: error: the gnn cost model needs PyTorch: pip install '.[gnn]' in autotune's checkout"], \
        p.stderr[-2000:]
    assert not log.exists() or load_records(log) == []  # no measurement was made


def test_output_cut_short_by_its_reader_ends_quietly() -> None:
    """`autotune show ... | head -1`: the reader closes the pipe; no traceback, no error line."""
    from autotune.environment import ROOT, worker_env
    p = subprocess.Popen([sys.executable, "-m", "autotune", "show", "matmul", "--shape", "64x64x64"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=worker_env())
    assert p.stdout is not None and p.stdout.readline().startswith(b"# matmul")
    p.stdout.close()  # before the rest of the source is written
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 1) and err.decode().strip() == "", err.decode()[-2000:]


def test_list_of_one_operator_gives_its_knobs_at_a_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """`autotune list OP --shape S`: the knob values follow the shape (kc up to K)."""
    assert main(["list", "matmul", "--shape", "64x64x1024", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    kc = next(line for line in out.splitlines() if line.split()[:1] == ["kc"])
    assert "shape: MxNxK = 64x64x1024 (M=64, N=64, K=1024), float32, threads=1" in out and "512" in kc, out
    assert main(["list", "matmul", "--shape", "64x64x64", "--threads", "1"]) == 0
    kc = next(line for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["kc"])
    assert "512" not in kc


def test_peak_prints_the_cached_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`autotune peak` reads the cached peak (never measuring when one is cached) and prints the
    FMA peak, the read rates of each level and the copy rates."""
    import json
    import autotune.measure.peak as peak_mod
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    mine = {"cpu": peak_mod.cpu_model(), "isa": peak_mod.current().isa, "dtype": "float32", "threads": 1,
            "gflops": 123.4, "read_gbps": 11.0, "measured": "2026-11-28", "l3_gbps": 55.0, "l3_bytes": 16 << 20,
            "l2_gbps": 99.0, "l2_bytes": 1 << 20, "beyond": [[32 << 20, 33.0]], "copy": [[1 << 20, 77.0]]}
    (tmp_path / "peak.json").write_text(json.dumps({"schema": peak_mod.SCHEMA, "peaks": [mine]}))
    monkeypatch.setattr(peak_mod, "probe_gflops", lambda *a, **k: pytest.fail("measured though cached"))
    assert main(["peak", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "123.4 GFLOP/s" in out and "55.0 from the L3 (up to 16 MiB)" in out and "33.0 at 32 MiB" in out
    assert "77.0 GB/s at 1 MiB" in out and "11.0 from memory" in out and "copy" in out
