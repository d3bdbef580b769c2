"""Tuning records: round trips, corrupt lines, newer schemas, crafted (malicious) lines."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autotune.records import (SCHEMA_VERSION, Record, RecordError, RecordLog, best_per_task, distill,
                              filter_by_target, load_records)
from autotune.replay import replay_log

SHAPE = {"M": 16, "N": 16, "K": 16}
GOOD = {"mr": 4, "nr": 16, "kc": 64, "mc_panels": 4, "jc_blocks": 1, "order": "jr_ir", "pack_a": True, "parallel": False}


def rec(seconds: float | None = 1e-3, config: dict | None = None, **kw) -> Record:
    base = dict(op="matmul", shape=SHAPE, dtype="float32", threads=1, config=config or GOOD,
                costs=[seconds] if seconds else None, error=None if seconds else "wrong_answer",
                target={"cpu": "x", "isa": "avx2", "threads": 1})
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


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    d = rec().to_json()
    d["v"] = SCHEMA_VERSION + 1
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(RecordError, match="upgrade autotune"):
        load_records(p)


def test_best_distill_filter() -> None:
    other = dict(GOOD, mr=8)
    rs = [rec(3e-3), rec(1e-3, other), rec(None), rec(2e-3)]
    assert best_per_task(rs)["matmul|M=16,N=16,K=16|float32"].config == other
    d = distill(rs, k=2)
    assert [r.seconds for r in d] == [1e-3, 2e-3]
    assert len(filter_by_target(rs, {"cpu": "x", "isa": "avx2", "threads": 1})) == 4
    assert filter_by_target(rs, {"cpu": "y", "isa": "avx2", "threads": 1}) == []


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
