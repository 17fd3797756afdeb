"""The kernels' machine code holds what the kernel pages say it does (scripts/sass_expect.txt):
tensor-core instructions in the tensor-core kernels, TMA where TMA feeds them, no local-memory spills
where the pages say none. Checked in the SASS of this build, so no GPU is needed; skips with one line
without the CUDA objects or cuobjdump (scripts/cuda-tools.sh, via `make test`)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cuda_objects

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "scripts/sass_kernels.py"


@pytest.fixture(scope="module")
def env(cuobjdump):
    return dict(os.environ, CUOBJDUMP=cuobjdump)


def check(env, expect, objs):
    r = subprocess.run([sys.executable, str(TOOL), "check", str(expect)] + [str(o) for o in objs],
                       capture_output=True, text=True, env=env, timeout=600)
    return r.returncode, r.stdout + r.stderr


def test_kernels_hold_what_the_pages_say(env):
    rc, out = check(env, ROOT / "scripts/sass_expect.txt", cuda_objects())
    assert rc == 0, out
    assert " 0 misses" in out, out


def test_a_false_claim_and_a_lost_kernel_are_caught(env, tmp_path):
    """The inverse of a true claim must miss, and so must a rule whose regex names no kernel."""
    expect = tmp_path / "expect.txt"
    expect.write_text("gemm_v8_wgmma_tma\\(  -HGMMA\nno_such_kernel_v0\\(  +HMMA\n")
    rc, out = check(env, expect, cuda_objects("kernels/gemm/"))
    assert rc == 1, out
    assert "2 misses" in out and "no kernel matches no_such_kernel_v0" in out, out
