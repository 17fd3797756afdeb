"""`aiinfra bench` (speed against the roofline) and the CUDA entry points on a machine without a GPU.

The benchmark's numbers are not asserted (speed is measured by benchmarks, not tests); what is checked is that
it runs a real model end to end on the CPU backend, reports every field with consistent arithmetic, and that
the CUDA paths fail with a clear message where there is no device instead of crashing."""
import json
import os
import subprocess

import pytest

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf", "llama")


def test_bench_cpu_json(aiinfra_bin):
    r = subprocess.run([aiinfra_bin, "bench", "-m", FIX, "--backend", "cpu", "--threads", "2", "--batch", "3",
                        "--prompt", "20", "--gen", "8", "--chunk", "16", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    for k in ("prefill_tok_s", "decode_tok_s", "decode_ms_per_step", "copy_gb_s", "decode_step_bytes",
              "decode_bound_tok_s", "decode_frac_of_bound"):
        assert o[k] > 0, k
    assert o["backend"] == "cpu" and o["batch"] == 3 and o["prompt"] == 20 and o["gen"] == 8
    # the CPU backend has no GEMM threshold: small steps are the GEMV class, without fusion for float weights
    assert o["decode_matmul"] == "gemv"
    # the bound is memory-bound here: bytes / bandwidth, batch sequences per step
    assert abs(o["decode_bound_tok_s"] - 3 / (o["decode_step_bytes"] / (o["copy_gb_s"] * 1e9))) < 1e-3 * o["decode_bound_tok_s"] + 1e-6
    assert abs(o["decode_frac_of_bound"] - o["decode_tok_s"] / o["decode_bound_tok_s"]) < 1e-3


def test_bench_fuse_defer_and_skip_ops(aiinfra_bin):
    """--fuse defer,rope runs (and is reported), and --skip-ops turns ops into no-ops without breaking the run: the
    greedy tokens of the undefined logits are clamped, the JSON and the text output say which ops were skipped."""
    base = [aiinfra_bin, "bench", "-m", FIX, "--backend", "cpu", "--threads", "2", "--batch", "2", "--prompt", "12",
            "--gen", "6"]
    r = subprocess.run(base + ["--fuse", "defer,rope", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["fuse"] == "defer,rope" and o["skip_ops"] == 0 and o["decode_tok_s"] > 0
    r = subprocess.run(base + ["--skip-ops", "norm,rope,attn,swiglu", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["skip_ops"] == 15
    r = subprocess.run(base + ["--skip-ops", "attn"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "SKIPPED" in r.stdout, r.stderr


@pytest.mark.parametrize("args", [
    ["bench", "--arch", "nope", "--random-weights"],
    ["bench", "--arch", "llama3-8b"],                 # --random-weights missing
    ["bench", "-m", FIX, "--dtype", "q9_9"],
    ["bench", "-m", FIX, "--batch", "0"],
    ["bench", "-m", FIX, "--skip-ops", "bogus"],
    ["bench", "-m", FIX, "--fuse", "defer,bogus"],
])
def test_bench_bad_arguments(aiinfra_bin, args):
    r = subprocess.run([aiinfra_bin] + args, capture_output=True, text=True, timeout=60)
    assert r.returncode in (1, 2) and r.stderr.strip(), r.stderr


def test_cuda_without_device_is_a_clear_error(aiinfra_bin):
    probe = subprocess.run([aiinfra_bin, "bench", "-m", FIX, "--backend", "cuda", "--gen", "2", "--prompt", "4"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode == 0:
        pytest.skip("a CUDA device is present")
    assert "cuda" in probe.stderr.lower() and "Sanitizer" not in probe.stderr
    r = subprocess.run([aiinfra_bin, "run", "-m", FIX, "-p", "hi", "-n", "2", "--backend", "cuda"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "cuda" in r.stderr.lower() and "Sanitizer" not in r.stderr
