"""No kernel reads what the previous kernel writes before its PDL wait, checked in the compiled SASS.

Under programmatic dependent launch a kernel starts while the previous one still runs, and ptxas moves
`ld.global.nc` loads across `griddepcontrol.wait` (ACQBULK) as it likes (docs/gpu.md, "Early weight
loads under PDL"). scripts/sass_pdl_check.py walks each kernel's control flow from the entry to its
first ACQBULK and lists the loads on the way; scripts/sass_pdl_allow.txt names the ones that are meant
(weights, host-uploaded tables). Needs the CUDA objects (a build with nvcc) and cuobjdump
(scripts/cuda-tools.sh, via `make test`); skips with one line without them.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cuda_objects

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts/sass_pdl_check.py"
ALLOW = ROOT / "scripts/sass_pdl_allow.txt"


def load_check():
    spec = importlib.util.spec_from_file_location("sass_pdl_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_check(cuobjdump, objs):
    cmd = [sys.executable, str(CHECK), "--cuobjdump", cuobjdump, "--allow", str(ALLOW)]
    return subprocess.run(cmd + [str(o) for o in objs], capture_output=True, text=True, timeout=600)


def test_backend_kernels_wait_before_reading(cuobjdump):
    r = run_check(cuobjdump, cuda_objects())
    assert r.returncode == 0, r.stdout + r.stderr
    n = int(r.stdout.strip().splitlines()[-1].split()[1])
    assert n > 100, r.stdout  # every object was read (the backend has hundreds of kernel instances)


def test_catches_a_read_before_the_wait(cuobjdump, tmp_path):
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    src = tmp_path / "pdl.cu"
    src.write_text(
        "__global__ void k_reads_before_wait(const float *x, float *y)\n"
        "{\n"
        "    y[threadIdx.x] = x[threadIdx.x];\n"
        '    asm volatile("griddepcontrol.wait;" ::: "memory");\n'
        "    y[threadIdx.x + 256] = 1.0f;\n"
        "}\n"
        "__global__ void k_reads_after_wait(const float *x, float *y)\n"
        "{\n"
        '    asm volatile("griddepcontrol.wait;" ::: "memory");\n'
        "    y[threadIdx.x] = x[threadIdx.x];\n"
        "}\n")
    obj = tmp_path / "pdl.o"
    subprocess.run([nvcc, "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-c", str(src), "-o", str(obj)],
                   check=True, capture_output=True, timeout=300)
    r = run_check(cuobjdump, [obj])
    assert r.returncode == 1, r.stdout + r.stderr
    flagged = [l for l in r.stdout.splitlines() if l.startswith("EARLY LOAD")]
    assert len(flagged) == 1 and "k_reads_before_wait" in flagged[0], r.stdout


# A kernel that waits at the top when its `early` parameter is 0 and after its first loads otherwise:
# the loads between the two waits run only when early != 0, and then the second wait comes first.
SASS_EARLY_PARAM = """
        Function : k_early
        /*0000*/                   ULDC UR4, c[0x0][0x23c] ;
        /*0010*/                   ISETP.NE.AND P0, PT, RZ, UR4, PT ;
        /*0020*/               @P0 BRA 0x40 ;
        /*0030*/                   ACQBULK ;
        /*0040*/                   LDG.E.EF.128 R4, desc[UR6][R2.64] ;
        /*0050*/                   ULDC UR5, c[0x0][0x23c] ;
        /*0060*/                   ISETP.NE.AND P1, PT, RZ, UR5, PT ;
        /*0070*/              @!P1 BRA 0x90 ;
        /*0080*/                   ACQBULK ;
        /*0090*/                   LDG.E.128.CONSTANT R8, desc[UR6][R6.64] ;
        /*00a0*/                   EXIT ;
"""


def test_path_sensitive_on_a_parameter():
    chk = load_check()
    insns = chk.parse_functions(SASS_EARLY_PARAM)["k_early"]
    found, has_wait = chk.early_loads(insns)
    assert has_wait
    # only the first load (the weights, before the wait when early != 0); the x load at 0x90 is
    # reached without a wait only on the infeasible path early != 0, then early == 0
    assert [a for a, _ in found] == [0x40]
    # the second test on a different parameter: then that path is feasible and the x load is early
    other = SASS_EARLY_PARAM.replace("c[0x0][0x23c] ;\n        /*0060*/", "c[0x0][0x240] ;\n        /*0060*/")
    found, _ = chk.early_loads(chk.parse_functions(other)["k_early"])
    assert [a for a, _ in found] == [0x40, 0x90]
