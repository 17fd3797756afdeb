"""scripts/roofline_plot.py on a hand-written ladder JSON (no GPU needed). Skips without matplotlib
(the test venv has none); the input validation is checked either way."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "roofline_plot.py"

# Hand-written: a copy ceiling of 4000 GB/s, a reduce point at 0.25 FLOP/byte reaching 900 GFLOP/s
# (3600 GB/s) and a softmax point at 0.625 FLOP/byte; a GEMM ceiling of 700 TFLOP/s.
DATA = {
    "device": "hand-written",
    "copy_gbps": 4000.0,
    "gemm_gflops": 700000.0,
    "versions": [
        {"op": "reduce", "version": "v7_single_pass", "shape": "n=67108864", "dtype": "f32",
         "intensity": 0.25, "gflops": 900.0},
        {"op": "softmax", "version": "v6_vec_online", "shape": "1024x32768", "dtype": "f32",
         "intensity": 0.625, "gflops": 2000.0},
        {"op": "softmax", "version": "v1_naive", "shape": "1024x32768", "dtype": "f32",
         "intensity": 0.625, "gflops": 15.0},
    ],
}


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_rejects_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"copy_gbps": 4000, "versions": [{"op": "reduce", "intensity": -1, "gflops": 3}]}))
    r = run(bad, "--out", tmp_path / "x.svg")
    assert r.returncode == 1 and "intensity" in r.stderr
    r = run(bad, "--out", tmp_path / "x.pdf")
    assert r.returncode == 2
    assert not (tmp_path / "x.svg").exists()


@pytest.mark.parametrize("ext", ["svg", "png"])
def test_plot(tmp_path, ext):
    pytest.importorskip("matplotlib")
    src = tmp_path / "ladder.json"
    src.write_text(json.dumps(DATA))
    out = tmp_path / f"roofline.{ext}"
    r = run(src, "--out", out)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    if ext == "png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        text = data.decode()
        assert "<svg" in text
        # the fastest version of each (op, shape) is labelled, the slower rungs are not; every
        # operator and both ceilings are in the legend
        assert "v7_single_pass" in text and "v6_vec_online" in text and "v1_naive" not in text
        assert "reduce" in text and "softmax" in text
        assert "4000 GB/s" in text and "700 TFLOP/s" in text
