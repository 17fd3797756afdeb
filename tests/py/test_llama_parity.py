"""Parity of `aiinfra run` with llama.cpp on the default model (SmolLM2-135M-Instruct Q4_1).

The reference lives in tests/fixtures/llama/smollm2_q4_1_<ref>.json, made by
scripts/make_llama_fixtures.py (llama-cpp-python; see its docstring). For every prompt (English,
Chinese, code, chat-templated, long):
  1. our prompt token ids == the reference's (our tokenizer + template vs llama.cpp's + jinja2),
  2. the greedy continuation (64 tokens, or up to end-of-generation) is identical up to the
     reference's first near tie (top-1 minus top-2 logit < NEAR_TIE at that step), and entirely
     when the reference has none; how many of the prompts match for all 64 tokens is printed,
  3. the logits of the prompt's last position: the reference's top 50 and 512 ids spread over the
     whole vocabulary are within LOGIT_TOL of ours, and the arg-max agrees when it is clear.
We run with `--kv f16`, llama.cpp's default KV cache (the reference ran with it).

Tolerances (see docs/model.md, "Parity"). Our CPU forward with an f16 KV cache computes what
llama.cpp's AVX2 path computes in the same float order (bit-identical q8 activations and integer
dots, its lane order in the f16 attention products, its SIMD expf in softmax and SiLU, its FMA in
RoPE, its f16 attention probabilities). Measured 2026-12-02 against the llama-cpp-python fixture on
this host: every logit of every position of prompt + 64 reference tokens identical (max |diff| 0),
and the greedy 64-token continuation identical on 10/10 prompts. LOGIT_TOL = 1e-3 leaves room for a
libm whose cosf/sinf/expf round differently; MIN_IDENTICAL = 8 of 10 prompts must match for all 64
tokens (the issue's requirement, test_greedy_identical). Per prompt, the continuation must also be
identical at least up to llama.cpp's first near tie (top-2 gap < NEAR_TIE), and the teacher-forced
check covers every decided step of all prompts.
"""
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli

FIXTURES = ROOT / "tests/fixtures/llama"
LOGIT_TOL = 1e-3
NEAR_TIE = 0.5
MIN_IDENTICAL = 8  # prompts whose 64-token greedy continuation must equal llama.cpp's
# per reference: (logit tolerance, our KV cache type)
REFS = {
    "llama": (LOGIT_TOL, "f16"),
    "numpy": (1.5, "f32"),  # fallback without activation quantization (fixture script --ref numpy)
}


# The fixtures were made by llama.cpp's AVX2 build, and our forward matches it bit for bit on the AVX2
# kernels; the AVX-512 kernels sum the f32 lanes in another order. Pin every CLI call of this module
# to the AVX2 path so an AVX-512 machine compares like with like (cpu_isa_best reads this variable).
@pytest.fixture(autouse=True)
def _pin_avx2(monkeypatch):
    monkeypatch.setenv("AIINFRA_CPU_ISA", "avx2")


def fixture_files():
    return sorted(FIXTURES.glob("smollm2_q4_1_*.json"))


@pytest.fixture(scope="module")
def model_path():
    p = subprocess.run(["bash", str(ROOT / "scripts/fetch_model.sh")], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"default model unavailable (scripts/fetch_model.sh failed: {p.stderr.strip()[-300:]})")
    return p.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def release_bin(aiinfra_bin):
    b = ROOT / "build/aiinfra"
    return str(b) if b.exists() else aiinfra_bin


_RUNS = {}


def run_case(binary, model, case, n_gen, kv):
    """One `aiinfra run` per (binary, prompt, kv), shared by test_parity and test_greedy_identical."""
    key = (binary, model, case["name"], case["prompt"], n_gen, kv)
    if key not in _RUNS:
        _RUNS[key] = _run_case(binary, model, case, n_gen, kv)
    return _RUNS[key]


def _run_case(binary, model, case, n_gen, kv):
    with tempfile.TemporaryDirectory() as d:
        dump, logits = Path(d) / "o.json", Path(d) / "o.f32"
        args = ["run", "-q", "-m", model, "-n", str(n_gen), "--kv", kv, "--dump", str(dump), "--logits",
                str(logits), "-p", case["prompt"]]
        if case["chat"]:
            args.append("--chat")
        if case.get("system"):
            args += ["--system", case["system"]]
        p = run_cli(binary, args, timeout=300)
        return p.stdout.decode("utf-8", "replace"), json.loads(dump.read_text()), np.fromfile(logits, dtype=np.float32)


def load_cases():
    out = []
    for f in fixture_files():
        ref = f.stem.rsplit("_", 1)[1]
        d = json.loads(f.read_text())
        for c in d["cases"]:
            out.append(pytest.param(ref, d, c, id=f"{ref}-{c['name']}"))
    return out


def test_fixtures_present():
    assert fixture_files(), "no tests/fixtures/llama/smollm2_q4_1_*.json: run scripts/make_llama_fixtures.py"
    for f in fixture_files():
        d = json.loads(f.read_text())
        assert len(d["cases"]) >= 8


@pytest.mark.parametrize("ref,fixture,case", load_cases())
def test_parity(release_bin, model_path, ref, fixture, case):
    tol, kv = REFS[ref]
    if os.path.basename(model_path) != fixture["model"]:
        pytest.skip("fixture is for another model")
    text, ours, lg = run_case(release_bin, model_path, case, fixture["n_gen"], kv)
    assert ours["prompt_ids"] == case["prompt_ids"], "prompt tokenization differs from the reference"
    ref_top = np.array(case["top_logits"], dtype=np.float64)
    d_top = np.abs(lg[case["top_ids"]] - ref_top)
    d_samp = np.abs(lg[case["sampled_ids"]] - np.array(case["sampled_logits"]))
    print(f"{case['name']}: max|diff| top50 {d_top.max():.4f} sampled {d_samp.max():.4f}")
    assert d_top.max() <= tol, f"top-50 logits differ by up to {d_top.max():.4f} (> {tol})"
    assert d_samp.max() <= tol, f"sampled logits differ by up to {d_samp.max():.4f} (> {tol})"
    if ref_top[0] - ref_top[1] > 2 * tol:  # a clear winner must be ours too
        assert int(np.argmax(lg)) == case["top_ids"][0]
    ref_gen, got = case["gen_ids"], ours["gen_ids"]
    margins = case.get("gen_margins")
    same = 0
    while same < min(len(got), len(ref_gen)) and got[same] == ref_gen[same]:
        same += 1
    print(f"{case['name']}: greedy identical for {same} of {len(ref_gen)} tokens")
    if margins:  # identical up to the reference's first near tie, and entirely when there is none
        tie = next((i for i, m in enumerate(margins) if m < NEAR_TIE), len(ref_gen))
        assert same >= tie, (f"greedy continuation differs at step {same} where llama.cpp's top-2 gap was "
                             f"{margins[same]:.3f} (first near tie at {tie}); our text: {text!r}")
        if tie == len(ref_gen):
            assert got == ref_gen, f"greedy continuation differs; our text: {text!r}"
    elif ref_top[0] - ref_top[1] > 2 * tol:  # numpy fallback: the first token when it is clear
        assert got[0] == ref_gen[0]


def test_greedy_identical(release_bin, model_path):
    """The issue's requirement: identical 64-token greedy continuations on >= MIN_IDENTICAL of the
    prompts of the llama.cpp fixture."""
    cases = [c.values for c in load_cases() if c.values[0] == "llama"]
    if not cases:
        pytest.skip("no llama.cpp fixture")
    if os.path.basename(model_path) != cases[0][1]["model"]:
        pytest.skip("fixture is for another model")
    same = []
    for _, fixture, case in cases:
        _, ours, _ = run_case(release_bin, model_path, case, fixture["n_gen"], "f16")
        if ours["gen_ids"] == case["gen_ids"]:
            same.append(case["name"])
    print(f"greedy identical for all tokens on {len(same)}/{len(cases)} prompts: {same}")
    assert len(same) >= min(MIN_IDENTICAL, len(cases))


@pytest.mark.parametrize("ref,fixture,case", [c for c in load_cases() if c.values[0] == "llama"])
def test_teacher_forced_greedy(release_bin, model_path, ref, fixture, case, tmp_path):
    """Our greedy pick at every step of llama.cpp's own continuation (prompt + its 64 tokens, one
    forward with --all-logits): it must equal llama.cpp's token at every step whose top-2 gap is at
    least NEAR_TIE. Unlike free-running decoding this checks all 64 steps of every prompt, because a
    near tie early on cannot send the two sequences down different paths."""
    if os.path.basename(model_path) != fixture["model"]:
        pytest.skip("fixture is for another model")
    ids = case["prompt_ids"] + case["gen_ids"][:-1]
    out = tmp_path / "all.f32"
    run_cli(release_bin, ["run", "-q", "-m", model_path, "--kv", "f16", "-n", "1", "--all-logits", str(out),
                          "--prompt-ids", " ".join(map(str, ids))], timeout=300)
    n_vocab = 49152
    rows = np.memmap(out, dtype=np.float32, mode="r").reshape(len(ids), n_vocab)
    n_p = len(case["prompt_ids"])
    checked = wrong = 0
    for i, (tok, margin) in enumerate(zip(case["gen_ids"], case["gen_margins"])):
        if margin < NEAR_TIE:
            continue
        checked += 1
        wrong += int(np.argmax(rows[n_p - 1 + i])) != tok
    print(f"{case['name']}: {checked} decided steps checked, {wrong} differ")
    assert wrong == 0 and checked > 0


def test_asan_cli_one_prompt(aiinfra_bin, model_path):
    """The ASan/UBSan CLI on the default model: a chat-templated prompt, greedy, a few tokens."""
    p = run_cli(aiinfra_bin, ["run", "-m", model_path, "-n", "8", "--chat", "-p", "Say hello."], timeout=300)
    assert p.stdout.strip(), "no text generated"
    assert b"tok/s" in p.stderr


def test_chat_multi_turn(release_bin, model_path):
    """Two turns over stdin: the second reuses the first turn's KV cache."""
    p = run_cli(release_bin, ["chat", "-m", model_path, "-n", "16"],
                input_bytes="What is 2+2?\nAnd 3+3?\n".encode(), timeout=300)
    out = p.stdout.decode()
    assert out.count("\n") == 2, out
    err = p.stderr.decode()
    reused = [int(x.split("(")[1].split()[0]) for x in err.splitlines() if "reused" in x]
    assert len(reused) == 2 and reused[0] == 0 and reused[1] > 20, err


def test_chat_fp8_kv(release_bin, model_path):
    """--kv-cache-dtype fp8: two turns through the paged runner over an e4m3 cache; a bad value exits 2."""
    p = run_cli(release_bin, ["chat", "-m", model_path, "-n", "8", "--kv-cache-dtype", "fp8"],
                input_bytes="What is 2+2?\nAnd 3+3?\n".encode(), timeout=300)
    assert p.stdout.decode().strip()
    err = p.stderr.decode()
    reused = [int(x.split("(")[1].split()[0]) for x in err.splitlines() if "reused" in x]
    assert len(reused) == 2 and reused[0] == 0 and reused[1] > 20, err  # the second turn keeps the first's blocks
    p = run_cli(release_bin, ["chat", "-m", model_path, "--kv-cache-dtype", "int4"], check=False)
    assert p.returncode == 2 and b"--kv-cache-dtype" in p.stderr


def test_info(release_bin, model_path):
    p = run_cli(release_bin, ["info", model_path])
    out = p.stdout.decode()
    assert "architecture:   llama" in out
    assert "parameters:     134515008" in out  # sum of the GGUF tensors' element counts
    assert "q4_1" in out and "q8_0" in out
    # 30 layers * (K + V) * 3 kv heads * 64 dims * 4 bytes
    assert f"{30 * 2 * 3 * 64 * 4} bytes" in out


def test_run_errors(release_bin, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 8)
    p = run_cli(release_bin, ["run", "-m", str(bad), "-p", "x"], check=False)
    assert p.returncode != 0 and b"bad.gguf" in p.stderr and not p.stdout
    p = run_cli(release_bin, ["run", "-m", str(tmp_path / "absent.gguf"), "-p", "x"], check=False)
    assert p.returncode != 0 and b"absent.gguf" in p.stderr
    p = run_cli(release_bin, ["run", "-p", "x", "--temp", "abc"], check=False)
    assert p.returncode == 2
    env = dict(os.environ, AIINFRA_CACHE=str(tmp_path / "empty"))
    p = subprocess.run([release_bin, "run", "-p", "x"], capture_output=True, env=env)
    assert p.returncode != 0 and b"fetch_model.sh" in p.stderr


def test_sampling_seed_and_stop(release_bin, model_path):
    """Same seed -> same text; a stop string ends the text right before it."""
    args = ["run", "-q", "-m", model_path, "-n", "24", "--temp", "0.9", "--top-p", "0.95", "--top-k", "40",
            "--min-p", "0.02", "--repeat-penalty", "1.1", "-p", "Once upon a time"]
    a = run_cli(release_bin, args + ["--seed", "7"]).stdout
    b = run_cli(release_bin, args + ["--seed", "7"]).stdout
    assert a == b and a
    outs = {run_cli(release_bin, args + ["--seed", str(s)]).stdout for s in (1, 2, 3)}
    assert len(outs) > 1, "different seeds gave the same text every time"
    greedy = run_cli(release_bin, ["run", "-q", "-m", model_path, "-n", "16", "-p", "The capital of France is"]).stdout
    word = greedy.decode().split()[1] if len(greedy.decode().split()) > 1 else None
    if word:
        cut = run_cli(release_bin, ["run", "-q", "-m", model_path, "-n", "16", "--stop", word,
                                    "-p", "The capital of France is"]).stdout.decode()
        assert word not in cut and greedy.decode().startswith(cut)
