"""Shared pytest fixtures for the parity tests (tooling; the product is C).

Environment (set by `make test` through scripts/run_tests.sh):
  AIINFRA_BIN     the CLI under test (the ASan/UBSan build)
  AIINFRA_DATA    build/data, holding tokenizers/ extracted from ../shared/data/tokenizers.tar.xz
  AIINFRA_SHARED  ../shared (chat templates, tokenizer archive)
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def aiinfra_bin():
    b = os.environ.get("AIINFRA_BIN", str(ROOT / "build/asan/aiinfra"))
    if not Path(b).exists():
        pytest.fail(f"CLI not built: {b} (run `make asan`)")
    return b


@pytest.fixture(scope="session")
def tokdata():
    d = Path(os.environ.get("AIINFRA_DATA", ROOT / "build/data")) / "tokenizers"
    if not d.is_dir():
        pytest.skip(f"{d} absent: ../shared/data/tokenizers.tar.xz was not extracted (make data)")
    return d


@pytest.fixture(scope="session")
def shared():
    d = Path(os.environ.get("AIINFRA_SHARED", ROOT.parent / "shared"))
    if not d.is_dir():
        pytest.skip(f"{d} absent: tests that need ../shared skip")
    return d


def run_cli(binary, args, input_bytes=b"", check=True, timeout=120):
    """Runs the CLI; returns CompletedProcess with bytes stdout/stderr."""
    p = subprocess.run([binary, *args], input=input_bytes, capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{binary} {' '.join(map(str, args))} exited {p.returncode}:\n"
                             f"{p.stderr.decode(errors='replace')}")
    return p


@pytest.fixture(scope="session")
def cuobjdump():
    """The disassembler for the SASS tests (scripts/cuda-tools.sh, via `make test`: CUOBJDUMP)."""
    c = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not c or not Path(c).exists():
        pytest.skip("no cuobjdump (make test fetches it when nvcc is present: scripts/cuda-tools.sh)")
    return c


def cuda_objects(*parts):
    """The CUDA objects of this build whose path holds every one of parts; skips without any."""
    objs = [o for o in sorted((ROOT / "build/cuda").rglob("*.o")) if all(p in str(o) for p in parts)]
    if not objs:
        pytest.skip("no CUDA objects under build/cuda (built without nvcc)")
    return objs
