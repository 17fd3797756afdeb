"""Byte parity of our quantizers and dequantizers with the `gguf` package's gguf.quants (numpy
reference implementations of ggml's quantize_row_*_ref) and numpy's float16.

How: the test compiles src/core/dtype.c (+ fp8.c, status.c) into a small shared object with gcc and calls
dtype_quantize_row / dtype_dequantize_row through ctypes. Building from sources (not from
build/libaiinfra.a) keeps it independent of -fPIC in the main build. Inputs are fresh random rows
(seed printed on failure) including all-zero, constant and tiny-magnitude blocks.
"""
import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# our dtype enum values (include/aiinfra/dtype.h)
DT = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 3, "q4_0": 4, "q4_1": 5}
GG = {"bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1}
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler to build the ctypes shim")
    so = tmp_path_factory.mktemp("dtype") / "libdtype_test.so"
    srcs = [ROOT / "src/core/dtype.c", ROOT / "src/core/fp8.c", ROOT / "src/core/status.c"]
    subprocess.run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-fPIC", "-shared",
                    f"-I{ROOT / 'include'}", "-o", str(so), *map(str, srcs), "-lm"], check=True)
    L = ctypes.CDLL(str(so))
    for fn in (L.dtype_quantize_row, L.dtype_dequantize_row):
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return L


@pytest.fixture
def rng():
    seed = int(time.time_ns() % (1 << 32))
    print(f"seed={seed}")  # shown by pytest on failure
    return np.random.default_rng(seed)


def row_bytes(name, n):
    if name == "f32":
        return 4 * n
    if name in ("f16", "bf16"):
        return 2 * n
    return n // 32 * BLOCK_BYTES[name]


def ours_quantize(lib, name, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(row_bytes(name, x.size), dtype=np.uint8)
    rc = lib.dtype_quantize_row(DT[name], x.ctypes.data, out.ctypes.data, x.size, None)
    assert rc == 0
    return out


def ours_dequantize(lib, name, q, n):
    q = np.ascontiguousarray(q, dtype=np.uint8)
    out = np.full(n, np.nan, dtype=np.float32)
    rc = lib.dtype_dequantize_row(DT[name], q.ctypes.data, out.ctypes.data, n, None)
    assert rc == 0
    return out


def make_rows(rng, n):
    """Random rows with the awkward cases spliced in as whole blocks."""
    x = (rng.standard_normal(n) * rng.choice([1e-3, 0.05, 1.0, 30.0])).astype(np.float32)
    nb = n // 32
    x[0:32] = 0.0                                   # all-zero block: d = 0 path
    if nb > 2:
        x[32:64] = np.float32(0.25)                 # constant block: q4_1 d = 0
    if nb > 3:
        x[64:96] = (rng.standard_normal(32) * 1e-6).astype(np.float32)  # f16 subnormal scales
    if nb > 4:
        x[96:128] = rng.integers(-8, 8, 32).astype(np.float32)          # exact ties for q4 rounding
    if nb > 5:
        x[128:160] = -np.abs(x[128:160])            # largest magnitude negative
    if nb > 6:
        # q8_0: amax 127 -> d = 1, so k + 0.5 is an exact tie (roundf: away from zero)
        x[160:192] = (rng.integers(-100, 100, 32) + 0.5).astype(np.float32)
        x[160] = np.float32(127.0)
    return x


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q4_1"])
def test_quantize_bytes_match_gguf(lib, rng, name):
    for n in (32, 192, 4096, 32 * 77):
        x = make_rows(rng, n)
        ref = quants.quantize(x.reshape(1, -1), GG[name]).reshape(-1)
        got = ours_quantize(lib, name, x)
        assert got.size == ref.size
        bad = np.nonzero(got != ref)[0]
        assert bad.size == 0, f"{name} n={n}: first differing byte {bad[:8]} (block {bad[0] // BLOCK_BYTES[name]})"


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q4_1"])
def test_dequantize_matches_gguf(lib, rng, name):
    n = 32 * 129
    # random block bytes (any code pattern), with finite f16 scales
    nb = n // 32
    raw = rng.integers(0, 256, nb * BLOCK_BYTES[name], dtype=np.uint8).reshape(nb, -1)
    scales = rng.standard_normal((nb, 2)).astype(np.float16).view(np.uint8)
    raw[:, 0:2] = scales[:, 0:2]
    if name == "q4_1":
        raw[:, 2:4] = scales[:, 2:4]
    raw = raw.reshape(-1)
    ref = quants.dequantize(raw.reshape(1, -1), GG[name]).reshape(-1).astype(np.float32)
    got = ours_dequantize(lib, name, raw, n)
    np.testing.assert_array_equal(got, ref)


def test_bf16_matches_gguf(lib, rng):
    n = 4096 + 5
    x = np.concatenate([rng.standard_normal(n).astype(np.float32),
                        np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, -3e-39, 3.4e38, 1.0 + 2**-8,
                                  1.0 + 3 * 2**-8], dtype=np.float32),
                        rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    x = x[~np.isnan(x)]  # NaN payload rules are tested exhaustively in tests/unit/test_dtype.c
    ref = quants.quantize(x, QT.BF16).view(np.uint16)
    got = ours_quantize(lib, "bf16", x).view(np.uint16)
    np.testing.assert_array_equal(got, ref)
    back = ours_dequantize(lib, "bf16", got.view(np.uint8), x.size)
    np.testing.assert_array_equal(back, quants.dequantize(ref.view(np.uint8), QT.BF16).reshape(-1))


def test_f16_matches_numpy(lib, rng):
    """numpy's float32 -> float16 is IEEE round-to-nearest-even, the reference for dtype_f32_to_f16."""
    bits = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32),
                        (rng.standard_normal(20000) * 1e-5).astype(np.float32),    # subnormal range
                        (rng.standard_normal(20000) * 6e4).astype(np.float32)])    # overflow edge
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    got = ours_quantize(lib, "f16", x).view(np.uint16)
    bad = np.nonzero(got != ref)[0]
    assert bad.size == 0, f"f16 mismatch at {x[bad[:4]]}: got {got[bad[:4]]} want {ref[bad[:4]]}"
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = h[~np.isnan(h.view(np.float16))]
    back = ours_dequantize(lib, "f16", h.view(np.uint8), h.size)
    np.testing.assert_array_equal(back, h.view(np.float16).astype(np.float32))


def test_bad_row_length_is_an_error(lib):
    x = np.zeros(33, dtype=np.float32)
    out = np.zeros(64, dtype=np.uint8)
    assert lib.dtype_quantize_row(DT["q4_0"], x.ctypes.data, out.ctypes.data, 33, None) != 0
