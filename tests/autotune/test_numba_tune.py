"""autotune_numba: hand-written Numba kernels tuned over compile-time constants, every config
measured in a worker process; faults are recorded with their kind and tuning goes on."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.errors import AutotuneError
from autotune.numba_tune import TRUST_ENV, autotune_numba, kernel_source
from autotune.runner import ErrorKind

SCALE = 2.0  # a module-level constant: sent to the worker as a value


def test_autotune_numba_picks_a_config_per_key() -> None:
    @autotune.autotune_numba(configs=[{"BLOCK": 2}, {"BLOCK": 16}], key=["x"])
    def double(x, out):
        n = x.shape[0]
        for b in range(0, n, BLOCK):  # noqa: F821 - BLOCK is a compile-time constant
            for i in range(b, min(b + BLOCK, n)):  # noqa: F821
                out[i] = SCALE * x[i]

    x = np.arange(50.0)
    out = np.empty_like(x)
    double(x, out)
    np.testing.assert_array_equal(out, 2 * x)
    assert double.best[((50,),)] in ({"BLOCK": 2}, {"BLOCK": 16})
    assert len(double.timings[((50,),)]) == 2
    assert all(r.ok for r in double.results[((50,),)])
    with pytest.raises(AutotuneError, match="not a parameter"):
        autotune.autotune_numba(configs=[{}], key=["nope"])(lambda x: None)


def faulty(x, out):
    """MODE 0 is right; 1 segfaults, 2 hangs, 3 raises, 4 writes one element in 64 (fast and wrong)."""
    n = x.shape[0]
    if MODE == 1:  # noqa: F821
        out[n + (1 << 40)] = 1.0  # far out of bounds: no bounds checks in njit
    elif MODE == 2:  # noqa: F821
        while True:
            out[0] += 1.0
    elif MODE == 3:  # noqa: F821
        raise ValueError("this config refuses")
    elif MODE == 4:  # noqa: F821
        for i in range(0, n, 64):
            out[i] = 2.0 * x[i]
    else:
        for b in range(0, n, BLOCK):  # noqa: F821
            for i in range(b, min(b + BLOCK, n)):  # noqa: F821
                out[i] = 2.0 * x[i]


def double_ref(x, out):
    out[:] = 2.0 * x


def test_crash_hang_raise_wrong_answer_and_compile_error_are_recorded_and_a_correct_config_wins(tmp_path: Path) -> None:
    configs = [{"MODE": 1, "BLOCK": 8}, {"MODE": 2, "BLOCK": 8}, {"MODE": 3, "BLOCK": 8}, {"MODE": 4, "BLOCK": 8},
               {"MODE": 0, "BLOCK": "wide"}, {"MODE": 0, "BLOCK": 64}]
    log = tmp_path / "numba.jsonl"
    # run_timeout: the hanging config is killed after it; the others check and time in well under a second
    tuned = autotune_numba(configs=configs, key=["x"], reference=double_ref, run_timeout=4, log=log)(faulty)
    x = np.random.default_rng(0).random(65536)
    out = np.zeros_like(x)
    tuned(x, out)  # the caller survives every fault

    np.testing.assert_array_equal(out, 2.0 * x)
    key = ((65536,),)
    assert tuned.best[key] == {"MODE": 0, "BLOCK": 64}
    results = tuned.results[key]
    assert [r.error for r in results] == [ErrorKind.WORKER_CRASHED, ErrorKind.RUN_TIMEOUT, ErrorKind.RUNTIME_ERROR,
                                          ErrorKind.WRONG_ANSWER, ErrorKind.COMPILE_ERROR, None]
    assert "SIG" in results[0].message
    assert "this config refuses" in results[2].message
    assert "64512 of 65536 elements of out differ from the reference double_ref" in results[3].message
    assert math.isinf(tuned.timings[key][3]) and math.isfinite(tuned.timings[key][5])
    assert set(tuned.compiled) == {5}  # no untested config ever ran in this process
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["error"] for r in lines] == ["worker_crashed", "run_timeout", "runtime_error", "wrong_answer",
                                           "compile_error", None]


def test_without_a_reference_the_first_working_config_is_the_reference() -> None:
    tuned = autotune_numba(configs=[{"MODE": 3, "BLOCK": 8}, {"MODE": 0, "BLOCK": 8}, {"MODE": 4, "BLOCK": 8}],
                           key=["x"])(faulty)
    x = np.arange(4096.0)
    out = np.zeros_like(x)
    tuned(x, out)
    np.testing.assert_array_equal(out, 2.0 * x)
    r = tuned.results[((4096,),)]
    assert [e.error for e in r] == [ErrorKind.RUNTIME_ERROR, None, ErrorKind.WRONG_ANSWER]
    assert "4032 of 4096 elements of out differ from config 1" in r[2].message


def bump(acc, x):
    """Adds x to acc in place; refuses to run on an acc that was not restored."""
    if acc[0] != 1.0:
        raise ValueError("acc was not restored before this run")
    for b in range(0, x.shape[0], BLOCK):  # noqa: F821
        for i in range(b, min(b + BLOCK, x.shape[0])):  # noqa: F821
            acc[i] += x[i]


def test_in_place_update_is_measured_from_restored_values_and_the_caller_sees_one_run() -> None:
    configs = [{"BLOCK": 4}, {"BLOCK": 32}]
    x = np.arange(1.0, 101.0)
    restored = autotune_numba(configs=configs, key=["x"], restore_value=["acc"], repeat=3)(bump)
    acc = np.ones(100)
    restored(acc, x)
    np.testing.assert_array_equal(acc, 1.0 + x)  # exactly one run on the caller's array
    assert all(r.ok for r in restored.results[((100,),)])

    unrestored = autotune_numba(configs=configs, key=["x"], repeat=3)(bump)
    with pytest.raises(AutotuneError, match="runtime_error ValueError: acc was not restored"):
        unrestored(np.ones(100), x)
    assert [r.error for r in unrestored.results[((100,),)]] == [ErrorKind.RUNTIME_ERROR] * 2


def count(hits, x):
    if hits[0] != 0:
        raise ValueError("hits was not zeroed before this run")
    hits[0] += x.shape[0] // STEP  # noqa: F821


def test_reset_to_zero_zeroes_before_every_run_and_a_returned_value_is_an_output() -> None:
    tuned = autotune_numba(configs=[{"STEP": 1}, {"STEP": 2}], key=["x"], reset_to_zero=["hits"])(count)
    hits = np.zeros(1, np.int64)
    tuned(hits, np.zeros(10))
    assert hits[0] == 10
    assert [r.error for r in tuned.results[((10,),)]] == [None, ErrorKind.WRONG_ANSWER]

    @autotune_numba(configs=[{"K": 1}, {"K": 2}], key=["x"], reference=lambda x: float(x.sum()))
    def total(x):
        return x.sum() * K  # noqa: F821

    assert total(np.ones(8)) == 8.0
    assert "element" in total.results[((8,),)][1].message


def test_keyword_arguments_and_defaults_bind_like_a_call_to_the_kernel() -> None:
    @autotune_numba(configs=[{"BLOCK": 4}, {"BLOCK": 8}], key=["n"], outputs=["out"])
    def add(x, out, n, c=1.0):
        for b in range(0, n, BLOCK):  # noqa: F821
            for i in range(b, min(b + BLOCK, n)):
                out[i] = x[i] + c

    x = np.arange(10.0)
    out = np.empty(10)
    add(x=x, out=out, n=10)
    np.testing.assert_array_equal(out, x + 1.0)
    add(x, out, c=3.0, n=10)  # tuned for n=10 already: runs the best config
    np.testing.assert_array_equal(out, x + 3.0)
    assert list(add.best) == [(10,)]
    with pytest.raises(TypeError, match="add\\(\\): missing a required argument: 'n'"):
        add(x, out)


def helper(v):
    return v + 1.0


def test_kernels_the_worker_cannot_rebuild_are_clear_errors() -> None:
    with pytest.raises(AutotuneError, match="reads the global 'helper' \\(function\\).*inline 'helper'"):
        @autotune_numba(configs=[{"B": 1}], key=["x"])
        def uses_helper(x):
            x[0] = helper(x[0])

    k = 3.0
    with pytest.raises(AutotuneError, match="uses k of an enclosing function"):
        @autotune_numba(configs=[{"B": 1}], key=["x"])
        def closes_over(x):
            x[0] = k

    with pytest.raises(AutotuneError, match="reads 'UNDEFINED'.*constants: \\['B'\\]"):
        @autotune_numba(configs=[{"B": 1}], key=["x"])
        def undefined(x):
            x[0] = UNDEFINED  # noqa: F821

    with pytest.raises(AutotuneError, match="defined with `def`"):
        autotune_numba(configs=[{"B": 1}], key=["x"])(lambda x: x)
    with pytest.raises(AutotuneError, match="restore_value 'y' is not a parameter"):
        autotune_numba(configs=[{"B": 1}], key=["x"], restore_value=["y"])(faulty)
    with pytest.raises(AutotuneError, match="config value B=\\[1\\] must be"):
        autotune_numba(configs=[{"B": [1]}], key=["x"])(faulty)


def test_the_worker_gets_the_source_without_decorators() -> None:
    @autotune_numba(
        configs=[{"B": 1}],
        key=["x"])
    def decorated(x):
        x[0] = np.float64(math.pi) + B  # noqa: F821

    src = kernel_source(decorated.fn)
    assert src.startswith("def decorated(x):\n") and "autotune_numba" not in src
    assert decorated.kernel["globals"] == {"np": {"module": "numpy"}, "math": {"module": "math"}}


def test_a_read_only_output_is_a_one_line_error_not_a_numba_typing_error(tmp_path: Path) -> None:
    def add_two(x, out):
        for i in range(x.shape[0]):
            out[i] = x[i] + TWO  # noqa: F821 - a compile-time constant

    x = np.zeros(8)
    frozen = np.zeros(8)
    frozen.flags.writeable = False
    named = autotune_numba(configs=[{"TWO": 2.0}], key=["x"], outputs=["out"])(add_two)
    with pytest.raises(ValueError, match=r"argument 'out' is read-only but the kernel writes it") as e:
        named(x, frozen)  # refused before any worker runs
    assert "\n" not in str(e.value) and not named.results
    log = tmp_path / "nt.jsonl"
    found = autotune_numba(configs=[{"TWO": 2.0}, {"TWO": 2.0 + 0.0}], key=["x"], log=log)(add_two)
    with pytest.raises(ValueError, match=r"argument 'out' is read-only"):
        found(x, frozen)  # found out from the first config's run: no second config, no log line
    assert not log.exists() and not frozen.any()


# ---- the common log: report and replay -----------------------------------------------------------

def scale3(x, out):
    for b in range(0, x.shape[0], BLOCK):  # noqa: F821
        for i in range(b, min(b + BLOCK, x.shape[0])):  # noqa: F821
            out[i] = SCALE * x[i] + 1.0


def scale3_ref(x, out):
    out[:] = SCALE * x + 1.0


scale3_tuned = autotune_numba(configs=[{"BLOCK": 4}, {"BLOCK": 16}], key=["x"], reference=scale3_ref)(scale3)


def _tuned_log(tmp_path: Path) -> Path:
    log = tmp_path / "numba.jsonl"
    tuned = autotune_numba(configs=[{"BLOCK": 4}, {"BLOCK": 16}], key=["x"], log=log)(scale3)
    x = np.arange(32.0)
    out = np.empty_like(x)
    tuned(x, out)
    np.testing.assert_array_equal(out, SCALE * x + 1.0)
    return log


def test_records_are_common_records_that_report_shows_and_replay_refuses_without_a_voucher(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.cli import main
    from autotune.records import SCHEMA_VERSION, load_records
    monkeypatch.delenv(TRUST_ENV, raising=False)
    log = _tuned_log(tmp_path)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2 and all(r["v"] == SCHEMA_VERSION and r["strategy"] == "autotune_numba" for r in lines)
    recs = load_records(log)  # the common reader: every line is a valid Record
    assert {r.key.split("|")[0][:13] for r in recs} == {"numba:scale3:"} and all(r.ok for r in recs)
    assert recs[0].numba["globals"] == {"SCALE": {"value": 2.0}}

    assert main(["report", str(log)]) == 0
    out = capsys.readouterr().out
    assert "numba:scale3:" in out and "autotune_numba" in out and "calls/s" in out and "no usable" not in out

    assert main(["replay", str(log)]) == 1  # nothing compiled: the source is code nobody vouched for
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("numba:scale3:"))
    assert "not replayable here: the kernel's source is code; vouch for it" in row and "--trust" in row and TRUST_ENV in row


def test_replay_rebuilds_and_reverifies_a_vouched_kernel(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.cli import main
    from autotune.codegen.handwritten import source_sha256
    from autotune.replay import replay_log
    log = _tuned_log(tmp_path)
    monkeypatch.setenv(TRUST_ENV, f"{__name__}:scale3_tuned")  # the user's own module: checked by its reference
    assert main(["replay", str(log)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("numba:scale3:"))
    assert "calls/s" in row and "not replayable" not in row

    monkeypatch.delenv(TRUST_ENV)
    [row] = replay_log(log, trusted=[source_sha256(kernel_source(scale3))])  # a digest: checked against config 0
    assert row.error is None and row.measured_gflops is not None and row.unit == "calls/s"
    assert main(["replay", str(log), "--trust", source_sha256(kernel_source(scale3))]) == 0  # the same, vouched on the CLI


EVIL = '''def evil(x):
    with numba.objmode():
        __import__("os").system("touch {path}")
    x[0] = 1.0
'''


def _forged(path: Path, source: str, globals_: dict, sha: str | None = None) -> str:
    spec = {"name": "evil", "source": source, "globals": globals_, "constants": ["B"],
            "args": [{"name": "x", "array": {"shape": [4], "dtype": "float64"}}], "key": ["x"], "outputs": None,
            "restore": [], "zero": [], "fastmath": False, "rtol": None, **({"sha256": sha} if sha else {})}
    from autotune.codegen.handwritten import check_spec, op_name
    op = op_name(check_spec(spec)) if "os" not in globals_ else "numba:evil:00000000"
    return json.dumps({"v": 1, "op": op, "shape": {"x0": 4}, "dtype": "float64", "threads": 1, "config": {"B": 1},
                       "costs": [1e-6], "error": None, "numba": spec}) + "\n"


def test_a_hostile_numba_record_is_never_compiled(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.cli import main
    from autotune.codegen.handwritten import source_sha256
    from autotune.replay import replay_log
    monkeypatch.delenv(TRUST_ENV, raising=False)
    pwned = tmp_path / "PWNED"
    trusted_sha = source_sha256(kernel_source(scale3))
    log = tmp_path / "evil.jsonl"
    log.write_text(_forged(pwned, EVIL.format(path=pwned), {"numba": {"module": "numba"}})
                   # claims the digest of a trusted source: the digest is recomputed from the source
                   + _forged(pwned, EVIL.format(path=pwned).replace("1.0", "2.0"), {"numba": {"module": "numba"}},
                             sha=trusted_sha)
                   # a module outside numpy/math/cmath/numba: not even a record
                   + _forged(pwned, EVIL.format(path=pwned), {"os": {"module": "os"}}))
    with pytest.warns(RuntimeWarning, match="evil.jsonl:3"):
        rows = replay_log(log, trusted=[trusted_sha, scale3_tuned])
    assert len(rows) == 2 and all(r.error.startswith("not replayable here") for r in rows)
    with pytest.warns(RuntimeWarning):
        assert main(["report", str(log)]) == 0
        assert main(["replay", str(log)]) == 1
    assert "not replayable here" in capsys.readouterr().out
    assert not pwned.exists()
