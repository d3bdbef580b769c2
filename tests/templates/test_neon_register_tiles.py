"""The matmul template's register tiles for NEON (AUTOTUNE_TARGET=neon: 32 registers of 128 bits)
become aarch64 register accumulators, checked in aarch64 assembly that no machine here runs.

A child process (NUMBA_OPT=0 and the target set before Numba is imported) prints the kernel
source of the first three preset tiles per dtype for neon, lets Numba lower each to LLVM IR
unoptimised, and optimises that IR for LLVM's AArch64 backend (in llvmlite; a Neoverse N1) with
the passes Numba's codegen runs at autotune's NUMBA_OPT=2: function passes at -O2 with both
vectorisers, a cheap module pass, the full module pass at -O2. The IR is the same whichever
machine lowers it, so the vector code is what an aarch64 host compiles from it. (One -O3 module
pipeline instead split a float64 8x6 tile into scalar FMAs and stack spills: the passes matter.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import importlib.util, json, os, re, sys, tempfile
from autotune.codegen.source import generate_sources
from autotune.task import Task
import llvmlite.binding as llvm

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
TRIPLE = "aarch64-unknown-linux-gnu"
tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu="neoverse-n1", features="+neon", opt=3)


def aarch64_assembly(ir):
    ir = re.sub(r'target datalayout = ".*"', f'target datalayout = "{tm.target_data}"', ir)
    ir = re.sub(r'target triple = ".*"', f'target triple = "{TRIPLE}"', ir)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    for speed, vectorize, funcs in ((2, True, True), (0, False, False), (2, True, False)):  # as Numba's codegen
        pto = llvm.create_pipeline_tuning_options(speed_level=speed)
        pto.loop_vectorization = pto.slp_vectorization = vectorize
        pb = llvm.create_pass_builder(tm, pto)
        if funcs:
            for f in mod.functions:
                if not f.is_declaration:
                    pb.getFunctionPassManager().run(f, pb)
        else:
            pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def hottest_loop(asm):
    # the innermost loop (a label to the branch back to it) of those with the most vector FMAs
    loops = []
    for m in re.finditer(r"^(\.LBB\w+):\n", asm, re.M):
        end = re.search(r"^\s+(?:b\.\w+|b|cbn?z\s+\w+,|tbn?z\s+\w+, #\d+,)\s+" + re.escape(m.group(1)) + r"\s*$",
                        asm[m.end():], re.M)
        if end:
            loops.append(asm[m.end():m.end() + end.start()])
    return max(loops, key=lambda body: (body.count("fmla"), -len(body)), default="")


out, tmp = [], tempfile.mkdtemp()
for dtype in ("float32", "float64"):
    task = Task.create("matmul", "256x256x256", dtype=dtype, threads=1)
    first = {}  # the first preset of each tile, for the first three tiles
    for p in task.presets():
        first.setdefault((p["mr"], p["nr"]), p)
    for p in list(first.values())[:3]:
        s, opts = task.schedule(p)
        text = generate_sources(s, reassoc=opts.reassoc, noalias=opts.noalias)[1]["kernel"]
        name = f"neon_{dtype}_{p['mr']}x{p['nr']}"
        path = os.path.join(tmp, name + ".py")
        with open(path, "w") as f:
            f.write(text)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        fn = mod.kernel
        loop = hottest_loop(aarch64_assembly(fn.inspect_llvm(fn.signatures[0])))
        out.append({"dtype": dtype, "mr": p["mr"], "nr": p["nr"], "fmla": len(re.findall(r"\bfmla\s+v\d+\.(?:4s|2d)", loop)),
                    "stack": re.findall(r"^\s+\w+\s+[^\n]*\[sp[^\n]*", loop, re.M),
                    "regs": sorted({int(r) for r in re.findall(r"\bv(\d+)\.(?:4s|2d)", loop)})})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def neon_loops(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    env = {**os.environ, "AUTOTUNE_TARGET": "neon", "NUMBA_OPT": "0",
           "AUTOTUNE_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
           "NUMBA_CACHE_DIR": str(tmp_path_factory.mktemp("numba"))}
    env.pop("NUMBA_CPU_FEATURES", None)
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_each_neon_preset_tile_is_one_fmla_per_accumulator_vector_and_stays_in_registers(neon_loops) -> None:  # type: ignore[no-untyped-def]
    """The reduction loop of each preset tile (mr rows x nr columns, nr / lanes vectors: 4 float32
    or 2 float64 lanes) is mr x nr / lanes vector FMAs per step of k (times any unroll of k), on
    at most 32 registers, with nothing loaded from or stored to the stack inside it: no spill."""
    assert {t["dtype"] for t in neon_loops} == {"float32", "float64"} and len(neon_loops) >= 4
    for t in neon_loops:
        lanes = 4 if t["dtype"] == "float32" else 2
        per_step = t["mr"] * (t["nr"] // lanes)
        assert t["nr"] % lanes == 0 and per_step + t["nr"] // lanes + 1 <= 32, t  # the space's own bound
        assert t["fmla"] >= per_step and t["fmla"] % per_step == 0, t
        assert not t["stack"], t
        assert len(t["regs"]) >= per_step, t  # every accumulator its own register
