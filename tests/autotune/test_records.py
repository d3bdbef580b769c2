"""Tuning records: round trips, corrupt lines, newer schemas, crafted (malicious) lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from autotune.records import (MAX_LINE, SCHEMA_VERSION, Log, Record, RecordError, RecordLog, best_per_task, distill,
                              from_target, load_records)
from autotune.replay import replay_log
from autotune.target import cpu_model, isa

HERE = {"cpu": cpu_model(), "isa": isa()}  # the detected machine: records measured here
SHAPE = {"M": 16, "N": 16, "K": 16}
# a config valid on every listed target: its 2x16 tile fits 16 registers of 4 lanes (SSE4.2) too
GOOD = {"mr": 2, "nr": 16, "kc": 64, "mc_panels": 4, "jc_blocks": 1, "order": "jr_ir", "pack_a": True, "parallel": False}


def rec(seconds: float | None = 1e-3, config: dict | None = None, **kw) -> Record:
    base = dict(op="matmul", shape=SHAPE, dtype="float32", threads=1, config=config or GOOD,
                costs=[seconds] if seconds else None, error=None if seconds else "wrong_answer",
                target=dict(HERE, threads=1))
    base.update(kw)
    return Record(**base)


def test_round_trip_and_schema_version_in_every_line(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "a.jsonl")
    log.append(rec(1e-3))
    log.append(rec(None))
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert all(json.loads(x)["v"] == SCHEMA_VERSION for x in lines)
    got = load_records(tmp_path / "a.jsonl")
    assert got[0].to_json() == rec(1e-3, timestamp=got[0].timestamp).to_json()
    assert not got[1].ok and got[1].error == "wrong_answer"


def test_corrupt_and_truncated_lines_are_skipped_with_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "b.jsonl"
    RecordLog(p).append(rec(1e-3))
    with open(p, "a") as f:
        f.write("{not json}\n")
        f.write(rec(2e-3).to_line()[:40])  # a line cut off by a killed writer
    RecordLog(p).append(rec(3e-3))  # appends start on a fresh line
    with pytest.warns(RuntimeWarning) as w:
        got = load_records(p)
    assert [r.seconds for r in got] == [1e-3, 3e-3]
    msgs = [str(x.message) for x in w]
    assert any(f"{p}:2" in m for m in msgs) and any(f"{p}:3" in m for m in msgs)
    with pytest.raises(RecordError, match=":2"):
        load_records(p, strict=True)


def test_a_newer_schema_line_says_upgrade_and_the_rest_still_loads(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    d = rec().to_json()
    d["v"] = SCHEMA_VERSION + 1
    p.write_text(json.dumps(d) + "\n" + rec().to_line())
    with pytest.warns(RuntimeWarning, match="c.jsonl:1: .*upgrade autotune"):
        assert len(load_records(p)) == 1
    with pytest.raises(RecordError, match="c.jsonl:1: .*upgrade autotune"):
        load_records(p, strict=True)


def _line(**changes: object) -> str:
    d = rec().to_json()
    d.update(changes)
    return json.dumps(d, separators=(",", ":"))


@pytest.mark.parametrize("bad,why", [
    ("[" * 200000 + "]" * 200000, "nested too deeply"),
    (_line(v=0), "schema version must be >= 1"),
    (_line(v=-7), "schema version must be >= 1"),
    (_line(threads=-3), "threads.*>= 1"),
    (_line(costs=[1e-300]), "costs"),
    (_line(costs=[]), "costs"),
    (_line(compile_s=-1), "compile_s"),
    (_line().replace('"op":"matmul"', '"op":"matmul","op":"conv2d"'), "duplicate key 'op'"),
    (_line().replace("0.001", "NaN"), "NaN is not a number"),
    (_line(config={"mr": [[[4]]]}), "config"),
    (_line(kernel="../../etc/passwd"), "kernel"),
    (_line(kernel="a" * 65), "kernel"),
    (_line(kernel=7), "kernel"),
    (_line(contention={"wait": "busy"}), "contention"),
    (_line(contention={"wait": 10 ** 400}), "contention"),
    (_line(contention={"x" * 40: 1}), "contention"),
    (_line(contention=[1, 2]), "contention"),
    (_line(retimed="yes"), "retimed"),
    (_line(costs=[10 ** 400]), "costs"),
    (_line(threads=10 ** 400), "threads' must be at most 4096"),
    (_line(compile_s=10 ** 400), "compile_s"),
    (_line(config=dict(GOOD, mr=10 ** 400)), "config"),
    ("{" * 5 + "garbage", "not valid"),
])
def test_a_hostile_line_is_one_warning_with_file_and_line_and_the_rest_loads(tmp_path: Path, bad: str, why: str) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text(rec().to_line() + bad + "\n" + rec(2e-3).to_line())
    with pytest.warns(RuntimeWarning, match=f"h.jsonl:2: skipped .*{why}") as caught:
        assert [r.seconds for r in load_records(p)] == [1e-3, 2e-3]
    assert len(caught) == 1


def test_an_integer_too_large_for_a_float_as_the_time_stamp_loads_as_no_time_stamp(tmp_path: Path) -> None:
    p = tmp_path / "ts.jsonl"
    p.write_text(_line(ts=10 ** 400) + "\n")  # 401 digits: float() of it overflows
    (r,) = load_records(p)
    assert r.timestamp == 0.0 and r.ok


def test_a_line_over_the_cap_is_skipped_without_holding_it_and_a_fifo_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "long.jsonl"
    with open(p, "wb") as f:
        f.write(b"x" * (3 * MAX_LINE))  # no newline at all, then a record after one
        f.write(b"\n" + rec().to_line().encode())
    with pytest.warns(RuntimeWarning, match="long.jsonl:1: .*longer than"):
        assert len(load_records(p)) == 1
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="not a regular file"):
        load_records(fifo)
    with pytest.raises(RecordError, match="not a regular file"):
        RecordLog(fifo).append(rec())


def test_what_a_timing_saw_of_the_machine_and_re_timings_round_trip(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "c.jsonl")
    seen = {"spread": 1.31, "retaken": 10, "stolen": 0, "waited": 3, "wait": 0.62}
    log.append(rec(1e-3, noisy=True, contention=seen))
    log.append(rec(1e-3, retimed=True))
    log.append(rec(1e-3))
    busy, again, plain = load_records(log.path)
    assert busy.noisy and dict(busy.contention) == seen and not busy.retimed
    assert again.retimed and again.contention is None
    assert "retimed" not in plain.to_json() and "contention" not in plain.to_json()  # older readers see nothing new


def test_the_best_is_the_fastest_re_timing_else_the_fastest_timing() -> None:
    """Re-timings of finalists in alternating rounds before single timings, however fast a single
    one looks; among either, the fastest, noisy or not (contention only adds time)."""
    other = dict(GOOD, mc_panels=8)
    lucky = rec(1e-5, other)
    noisy = rec(5e-6, other, noisy=True)
    again = rec(2e-3, retimed=True)
    noisy_again = rec(1.5e-3, other, retimed=True, noisy=True)
    key = lucky.key
    assert best_per_task([lucky])[key] is lucky
    assert best_per_task([lucky, noisy])[key] is noisy
    assert best_per_task([lucky, noisy, again])[key] is again
    assert best_per_task([lucky, noisy, again, noisy_again])[key] is noisy_again
    from autotune.records import kind
    assert (kind(again), kind(noisy_again), kind(lucky)) == ("a quiet re-timing", "a noisy re-timing", "a quiet timing")
    # a kernel that gave a wrong answer when it was checked again is never the best
    wrong = rec(None, other, retimed=True)
    assert best_per_task([lucky, noisy, again, noisy_again, wrong])[key] is again


def test_an_invalid_fastest_record_does_not_hide_the_valid_best() -> None:
    bad = rec(1e-6, dict(GOOD, kc=7))  # faster, but outside the space
    good = rec(1e-3)
    assert best_per_task([bad, good])[good.key] is good
    assert best_per_task([bad, good], valid=False)[good.key] is bad


def test_a_failed_append_leaves_no_torn_line(tmp_path: Path) -> None:
    """A file-size limit makes the write come up short and then fail, as a full disk does."""
    import multiprocessing as mp
    path = tmp_path / "full.jsonl"
    RecordLog(path).append(rec())
    size = path.stat().st_size
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_append_over_limit, args=(str(path), size + 100, q))
    p.start()
    p.join()
    assert "cannot append to the tuning log" in q.get(timeout=10) and "not kept" in q.get(timeout=10)
    assert path.stat().st_size == size  # cut back: the log ends where it did
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_records(path)) == 1


def _append_over_limit(path: str, limit: int, q: object) -> None:
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        RecordLog(path).append(rec())
        q.put("appended")  # type: ignore[attr-defined]
        q.put("")  # type: ignore[attr-defined]
    except RecordError as e:
        q.put(str(e))  # type: ignore[attr-defined]
        q.put(str(e))  # type: ignore[attr-defined]


def test_appends_are_whole_lines_from_many_processes(tmp_path: Path) -> None:
    import multiprocessing as mp
    path = tmp_path / "shared.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(path), i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = load_records(path)
    assert len(records) == 4 * 50
    assert all(line for line in path.read_text().split("\n")[:-1])  # no blank or torn lines


def _append_many(path: str, i: int) -> None:
    log = RecordLog(path, fsync=False)
    for n in range(50):
        log.append(rec(1e-3 * (1 + i + n / 100)))


def test_best_distill_filter() -> None:
    other = dict(GOOD, mc_panels=8)  # valid on every ISA too
    rs = [rec(3e-3), rec(1e-3, other), rec(None), rec(2e-3)]
    assert best_per_task(rs)["matmul|M=16,N=16,K=16|float32|threads=1"].config == other
    d = distill(rs, k=2)
    assert [r.seconds for r in d] == [1e-3, 2e-3]
    assert len(from_target(rs, HERE, what="machine")) == 4
    assert from_target(rs, dict(HERE, cpu="another CPU"), what="machine") == []
    assert len(from_target(rs, dict(HERE, cpu="another CPU"))) == 4  # the same ISA: its kernels apply


def test_records_of_another_isa_are_left_out_unless_asked_for_with_a_warning() -> None:
    rs = [rec(1e-3, target={"cpu": "x", "isa": "avx2"}), rec(2e-3, target={})]  # no target: kept
    here = {"cpu": "z", "isa": "avx512f"}
    assert from_target(rs, here) == [rs[1]]
    with pytest.warns(RuntimeWarning, match="another machine: x \\(avx2\\)"):
        assert from_target(rs, here, any_target=True) == rs


def test_a_record_key_holds_its_thread_count() -> None:
    assert rec(threads=3).key == "matmul|M=16,N=16,K=16|float32|threads=3"
    with pytest.raises(RecordError, match="threads.*>= 1"):
        Record.from_json({**rec().to_json(), "threads": -3})


@pytest.mark.parametrize("config,shape,op,match", [
    (dict(GOOD, mr="__import__('os').system('touch /tmp/autotune-pwned')"), SHAPE, "matmul", "outside its space"),
    (dict(GOOD, kc=7), SHAPE, "matmul", "outside its space"),
    (dict(GOOD, evil="x"), SHAPE, "matmul", "unknown knobs"),
    (GOOD, {"M": 10**12, "N": 10**12, "K": 16}, "matmul", "too large"),
    (GOOD, SHAPE, "os:system", "unknown operator"),
])
def test_crafted_lines_are_rejected_before_anything_compiles(tmp_path: Path, cache_dir: str, config, shape, op,
                                                             match) -> None:
    p = tmp_path / "evil.jsonl"
    RecordLog(p).append(rec(1e-6, config, shape=shape, op=op))
    (r,) = load_records(p)
    with pytest.raises(RecordError, match=match):
        r.validated_config()
    kernels = Path(cache_dir) / "kernels"
    before = set(os.listdir(kernels)) if kernels.exists() else set()
    (row,) = replay_log(p, runner=_NoRunner())
    assert row.error and match.split()[0] in row.error
    after = set(os.listdir(kernels)) if kernels.exists() else set()
    assert after == before, "nothing may be generated or compiled from a rejected record"
    assert not os.path.exists("/tmp/autotune-pwned")


class _NoRunner:
    def run(self, inputs):  # the rejected records must never reach a runner
        assert not inputs
        return []

    def close(self) -> None:
        pass


def _padded(field: str, size: int) -> str:
    """A record line of about `size` bytes, the bulk in one field."""
    d = rec().to_json()
    n = size // 3  # "[]," each: an empty list is 56 bytes in Python, 19 times its text
    if field == "target":
        d["target"] = dict(HERE, threads=1, pad=[[]] * n)
    elif field == "config":
        d["config"] = dict(GOOD, **{f"k{i}": "x" * 200 for i in range(size // 210)})
    elif field == "definition":
        d["definition"] = {"pad": [[]] * n}
    elif field == "shape":
        d["shape"] = {f"d{i}": i for i in range(size // 12)}
    else:
        d[field] = "x" * size
    return json.dumps(d, separators=(",", ":")) + "\n"


def test_memory_is_bounded_per_file_not_per_line(tmp_path: Path) -> None:
    """80 lines of about 1 MB, each padded in another field: each is either no valid record or
    held in a few KiB (a message is cut to 2000 characters), so the records of an 80 MB log take
    little memory (at 98661ef: 490 MiB; 200 such lines 1224 MiB)."""
    p = tmp_path / "big.jsonl"
    fields = ["target", "config", "definition", "shape", "message", "op", "strategy", "dtype"]
    with open(p, "w") as f:
        for i in range(80):
            f.write(_padded(fields[i % len(fields)], 1_000_000))
    code = ("import os, warnings, sys; warnings.simplefilter('ignore'); from autotune.records import load_records\n"
            "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20\n"
            "m = rss(); rs = load_records(sys.argv[1]); print(len(rs), rss() - m)")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True).stdout
    held, grew_mib = map(int, out.split())
    assert held == 10  # the message-padded lines: valid records, their message cut
    assert grew_mib < 64, f"holding the records of an 80 MB log takes {grew_mib} MiB (at 98661ef: 490 MiB)"


def test_a_log_over_its_memory_bound_is_one_error_saying_what_to_do(tmp_path: Path) -> None:
    p = tmp_path / "l.jsonl"
    p.write_text("".join(rec(1e-3 * (1 + i)).to_line() for i in range(50)))
    assert len(Log(p, limit=50 * 4096).records) == 50
    with pytest.raises(RecordError, match="l.jsonl holds more records than autotune reads of one log .* tune "
                                          "into a new log"):
        Log(p, limit=20 * 4096)


def test_a_log_is_read_once_and_followed(tmp_path: Path) -> None:
    p = tmp_path / "l.jsonl"
    log = Log(p, missing_ok=True, keep=lambda r: r.seconds < 5e-3)
    assert log.records == []
    RecordLog(p).append(rec(1e-3))
    RecordLog(p).append(rec(9e-3))  # not kept
    assert [r.seconds for r in log.refresh()] == [1e-3] and log.refresh() == []
    with open(p, "a") as f:  # a writer in the middle of a line: it is left for the next refresh
        line = rec(2e-3).to_line()
        f.write(line[:40])
        f.flush()
        assert log.refresh() == []
        f.write(line[40:])
    assert [r.seconds for r in log.refresh()] == [2e-3]
    assert [r.seconds for r in log.records] == [1e-3, 2e-3]
    p.write_text(rec(3e-3).to_line())  # replaced (cut shorter): read again from the start
    assert [r.seconds for r in log.refresh()] == [3e-3] and len(log.records) == 1


def test_predictions_and_sweep_stamps_round_trip_and_old_lines_stay_readable(tmp_path: Path) -> None:
    p = tmp_path / "pred.jsonl"
    stamp = {"id": "ab12", "trials": 16, "tasks": 3}
    RecordLog(p).append(rec(1e-3, predicted=-2.5, sweep=stamp))
    RecordLog(p).append(rec(2e-3))  # no prediction, no sweep: neither key is written
    first, second = (json.loads(x) for x in p.read_text().splitlines())
    assert first["predicted"] == -2.5 and first["sweep"] == stamp and "predicted" not in second and "sweep" not in second
    a, b = load_records(p, strict=True)
    assert (a.predicted, dict(a.sweep or {})) == (-2.5, stamp) and (b.predicted, b.sweep) == (None, None)


@pytest.mark.parametrize("field, value", [
    ("predicted", "fast"), ("predicted", True), ("predicted", 1e300), ("predicted", [1.0]), ("predicted", 10 ** 400),
    ("sweep", {"id": "ab", "trials": 4}), ("sweep", {"id": "<script>", "trials": 4, "tasks": 1}),
    ("sweep", {"id": "ab", "trials": -1, "tasks": 1}), ("sweep", {"id": "ab", "trials": 4, "tasks": 0, "x": 1}),
    ("sweep", "ab12")])
def test_a_hostile_prediction_or_sweep_stamp_skips_its_line_with_one_warning(tmp_path: Path, field: str,
                                                                           value: object) -> None:
    p = tmp_path / "hostile.jsonl"
    d = rec(1e-3).to_json()
    d[field] = value
    p.write_text(json.dumps(d) + "\n" + rec(2e-3, predicted=1.0).to_line())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = load_records(p)
    assert [r.seconds for r in got] == [2e-3]
    [w] = caught
    assert f"{p}:1: skipped" in str(w.message) and f"'{field}'" in str(w.message) and "\n" not in str(w.message)
    with open(p, "a") as f:
        f.write('{"v":1,"op":"matmul","shape":{},"dtype":"float32","threads":1,"config":{},"costs":[1e-3],'
                '"predicted":NaN}\n')
    with pytest.warns(RuntimeWarning, match=r":3: skipped a record that is not valid \(NaN"):
        assert len(load_records(p)) == 1
