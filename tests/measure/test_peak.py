"""The machine's limits (measure.peak): the roofline arithmetic, the probe on this machine, the
cache (measured once, a damaged or hostile cache file measured again), and bench's figures against it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import autotune.measure.peak as peak_mod
from autotune.bench import BenchResult, Candidate, format_result
from autotune.errors import AutotuneError
from autotune.task import Task
from autotune.measure.peak import Peak, machine_peak, probe_gflops, probe_read_gbps, task_bytes, task_intensity

PEAK = Peak(cpu="example", isa="avx2", dtype="float32", threads=2, gflops=200.0, read_gbps=20.0,
            l3_gbps=60.0, l3_bytes=16 << 20, l2_gbps=100.0, l2_bytes=1 << 20)


def test_the_roofline_is_the_lower_of_the_peak_and_intensity_times_bandwidth() -> None:
    assert PEAK.attainable(0.5) == 10.0 and PEAK.bound(0.5) == "memory"
    assert PEAK.attainable(50.0) == 200.0 and PEAK.bound(50.0) == "compute"
    assert PEAK.share(150.0, 50.0) == pytest.approx(0.75)
    assert PEAK.attainable(0.5, nbytes=8 << 20) == 30.0 and PEAK.bound(0.5, nbytes=8 << 20) == "L3"  # it stays in L3
    assert PEAK.attainable(0.5, nbytes=512 << 10) == 50.0 and PEAK.bound(0.5, nbytes=64 << 20) == "memory"
    mm = Task.create("matmul", "64x64x64", threads=1)
    assert task_bytes(mm) == 3 * 64 * 64 * 4  # A and B read once, C written once
    assert task_intensity(mm) == pytest.approx(2 * 64 ** 3 / (3 * 64 * 64 * 4))
    softmax = Task.create("softmax", "64x256", threads=1)
    assert task_intensity(softmax) < 10  # a row-wise kernel: memory bound on any machine here


def test_a_working_set_past_the_l3_takes_the_rate_probed_at_its_size() -> None:
    """Between the L3's share and memory, the rate probed at its size, interpolated in log size
    between probed sizes: a working set of 32 MiB finds part of itself in a 32 MiB L3 still; past
    the largest probed size, memory's."""
    p = Peak(**{**PEAK.__dict__, "beyond": ((32 << 20, 45.0), (64 << 20, 30.0), (128 << 20, 22.0))})
    assert p.bandwidth(16 << 20) == (60.0, "L3") and p.bandwidth(32 << 20) == (45.0, "memory")
    assert p.bandwidth(64 << 20) == (30.0, "memory") and p.bandwidth(1 << 30) == (20.0, "memory")
    assert p.bandwidth(None) == (20.0, "memory")
    assert p.bandwidth((16 << 20) * 2 ** 0.5)[0] == pytest.approx(52.5)  # halfway from 16 to 32 MiB in log size
    assert p.bandwidth((64 << 20) + 4096)[0] == pytest.approx(30.0, rel=1e-3)  # just past a probed size: about its rate
    assert p.attainable(0.5, nbytes=(64 << 20) * 2 ** 0.5) == pytest.approx(13.0)
    assert peak_mod.beyond_sizes(16 << 20) == (32 << 20, 64 << 20, 128 << 20) and peak_mod.beyond_sizes(0) == ()


def test_the_probe_measures_this_machine() -> None:
    """Real kernels, really timed: a register-resident FMA loop beats a scalar loop's 2 flops per
    ns, and reading memory runs at more than 1 GB/s on every machine this project runs on."""
    assert probe_gflops("float32", threads=1, seconds=0.02, repeat=1) > 2.0
    assert probe_gflops("float64", threads=1, seconds=0.02, repeat=1) > 1.0
    assert probe_read_gbps(threads=1, repeat=1) > 1.0
    assert probe_read_gbps(threads=1, repeat=1, nbytes=256 << 10) > 1.0


@pytest.mark.parametrize("streams", peak_mod.READ_STREAMS)
def test_the_read_probe_reads_every_float_of_each_threads_share_once_a_pass(streams: int) -> None:
    """Each thread sums its share as `streams` sub-arrays side by side: every float counted once a
    pass (the rate divides all the bytes by the time)."""
    x = np.arange(2 * 1024 * 8, dtype=np.float32) % 7
    out = np.zeros(2, np.float32)
    peak_mod._read_kernel(streams)(x, 2, 3, out)
    assert out.tolist() == [3 * x[:8192].sum(), 3 * x[8192:].sum()]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("streams", peak_mod.READ_STREAMS)
def test_the_copy_probe_copies_every_float(streaming: bool, streams: int) -> None:
    """Plain and non-temporal stores alike, in any number of streams: y holds x after a copy on 2 threads."""
    x = np.random.default_rng(0).standard_normal((16, peak_mod._COPY_ROW)).astype(np.float32)
    y = np.zeros_like(x)
    peak_mod._copy_kernel(streaming, streams)(x, y, 2, 2)
    assert np.array_equal(x, y)


def test_written_bytes_move_at_the_copy_rate() -> None:
    """A kernel that writes what it reads (softmax: 16 MiB in, 16 MiB out) is bound by the copy's
    rate at its 32 MiB, one that writes little (a matmul) by the read rate; between, each written
    byte and one read byte at the copy rate, the rest at the read rate."""
    p = Peak(**{**PEAK.__dict__, "copy": ((1 << 20, 80.0), (16 << 20, 40.0), (256 << 20, 10.0))})
    assert p.bandwidth(16 << 20) == (60.0, "L3") and p.bandwidth(16 << 20, written=8 << 20) == (40.0, "L3")
    assert p.bandwidth(16 << 20, written=4 << 20)[0] == pytest.approx(16 / (8 / 60 + 8 / 40))
    assert p.bandwidth(1 << 30, written=1 << 29)[0] == 10.0 and p.bandwidth(1 << 10, written=1 << 9)[0] == 80.0
    assert p.bandwidth((1 << 20) * 4, written=1 << 21)[0] == pytest.approx(60.0)  # halfway from 1 to 16 MiB in log size: 80 -> 40
    assert PEAK.bandwidth(16 << 20, written=8 << 20) == (60.0, "L3")  # no copy probed (an old cache): reads only
    softmax = Task.create("softmax", "4096x1024", threads=2)
    assert peak_mod.task_written(softmax) == 16 << 20 and peak_mod.task_roof(softmax)[1:] == (32 << 20, 16 << 20)


def test_the_peak_is_measured_once_and_a_bad_cache_is_measured_again(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    probes = []
    monkeypatch.setattr(peak_mod, "probe_gflops", lambda dtype, threads: probes.append("fma") or 100.0 * threads)
    monkeypatch.setattr(peak_mod, "probe_read_gbps", lambda threads, nbytes=None: 10.0 if nbytes is None else 50.0)
    monkeypatch.setattr(peak_mod, "probe_copy_gbps", lambda threads, nbytes=None: 8.0)
    cache = tmp_path / "peak.json"
    mine = {**PEAK.__dict__, "cpu": peak_mod.cpu_model(), "isa": peak_mod.current().isa, "threads": 1}
    for hostile in ("not json", json.dumps({"schema": 1, "peaks": "x"}),
                    json.dumps({"schema": peak_mod.SCHEMA, "peaks": [{**mine, "beyond": [[1 << 30, 5.0], [1 << 20, 9.0]]}]}),
                    json.dumps({"schema": peak_mod.SCHEMA, "peaks": [{**mine, "beyond": [["x", 5.0]]}]}),
                    json.dumps({"schema": peak_mod.SCHEMA, "peaks": [{**mine, "beyond": [[1, 2]] * 9}]}),
                    json.dumps({"schema": peak_mod.SCHEMA, "peaks": [{**mine, "beyond": "evil"}]}),
                    json.dumps({"schema": peak_mod.SCHEMA, "peaks": [{**mine, "beyond": [], "copy": [[1, -2.0]]}]}),
                    json.dumps({"schema": 4, "peaks": [{**mine, "beyond": []}]}),  # before the copy probe
                    json.dumps({"schema": 1, "peaks": [{"cpu": 1, "evil": True}]}),
                    json.dumps({"schema": 1, "peaks": [{**PEAK.__dict__, "cpu": peak_mod.cpu_model(),
                                                         "isa": peak_mod.current().isa, "threads": 1,
                                                         "gflops": 1e400}]}).replace("Infinity", "1e999")):
        cache.write_text(hostile)
        p = machine_peak("float32", 1)
        assert p.gflops == 100.0 and p.read_gbps == 10.0 and math.isfinite(p.gflops)
        assert p.copy and all(g == 8.0 for _, g in p.copy)
    n = len(probes)
    assert machine_peak("float32", 1).gflops == 100.0 and len(probes) == n  # from the cache now
    assert machine_peak("float32", 1, again=True) and len(probes) == n + 1
    with pytest.raises(AutotuneError, match="not 'int8'"):
        machine_peak("int8", 1)


def test_bench_gives_each_figure_as_a_share_of_the_limit() -> None:
    task = Task.create("matmul", "64x64x64", "float32", threads=1)
    r = BenchResult(task, Candidate(task.presets()[0], seconds=1e-4), 1e-4, {"numpy": 2e-4}, peak=PEAK)
    text = format_result(r)
    gflops = task.flops() / 1e-4 / 1e9
    assert f"{100 * gflops / 200.0:5.1f}% of the limit" in text and "compute bound" in text  # 64^3: 48 KiB, in L2
    roof = r.to_json()["roofline"]
    assert roof["share"] == pytest.approx(gflops / 200.0) and roof["baseline_share"]["numpy"] == pytest.approx(roof["share"] / 2)
