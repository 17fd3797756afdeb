"""`aiinfra run -m FOLDER` on a Hugging Face folder (config.json + safetensors + tokenizer.json).

The folder is written here with numpy (random weights; bf16 norms so the f16/bf16 -> f32 vector path
runs; sharded with an index) and checked against a numpy forward written from HF's modeling code:
half-split ("neox") RoPE on unpermuted Wq/Wk, GQA, SwiGLU, tied or separate lm_head. This tests the
folder path (names, shapes, dtypes, shards); tests/py/test_hf_parity.py checks against transformers.
"""
import json
import shutil
import struct

import numpy as np
import pytest

from conftest import run_cli

D, H, KV, F, L, CTX = 64, 4, 2, 96, 2, 128
HD = D // H


def bf16(a):
    """f32 -> bf16 bits (round to nearest even), and the f32 values they stand for."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_folder(d, tokdir, vocab, tied, rng):
    w = {}  # name -> f32 values used by the reference
    st = {}  # name -> (dtype, stored array)

    def mat(name, out, inp):
        a = (rng.standard_normal((out, inp)) * 0.3).astype(np.float32)
        w[name], st[name] = a, ("F32", a)

    def vec(name, n):
        bits, vals = bf16(1.0 + 0.2 * rng.standard_normal(n))
        w[name], st[name] = vals, ("BF16", bits)

    mat("model.embed_tokens.weight", vocab, D)
    vec("model.norm.weight", D)
    if not tied:
        mat("lm_head.weight", vocab, D)
    for l in range(L):
        p = f"model.layers.{l}."
        vec(p + "input_layernorm.weight", D)
        vec(p + "post_attention_layernorm.weight", D)
        mat(p + "self_attn.q_proj.weight", H * HD, D)
        mat(p + "self_attn.k_proj.weight", KV * HD, D)
        mat(p + "self_attn.v_proj.weight", KV * HD, D)
        mat(p + "self_attn.o_proj.weight", D, H * HD)
        mat(p + "mlp.gate_proj.weight", F, D)
        mat(p + "mlp.up_proj.weight", F, D)
        mat(p + "mlp.down_proj.weight", D, F)
    names = sorted(st)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for fn, ns in shards.items():
        write_safetensors(d / fn, {n: st[n] for n in ns})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: fn for fn, ns in shards.items() for n in ns}}))
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": vocab,
        "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": tied, "torch_dtype": "float32"}))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokdir / f, d / f)
    return w


def reference(w, ids, tied):
    def rms(x, g):
        return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * g

    def rope(x, pos):  # (T, h, HD), HF rotate_half
        inv = 10000.0 ** (-np.arange(0, HD, 2) / HD)
        ang = np.concatenate([pos[:, None] * inv[None]] * 2, -1)[:, None, :]
        rot = np.concatenate([-x[..., HD // 2:], x[..., :HD // 2]], -1)
        return x * np.cos(ang) + rot * np.sin(ang)

    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = w["model.embed_tokens.weight"][ids].astype(np.float64)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, HD), pos)
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, HD), pos)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, HD)
        k, v = np.repeat(k, H // KV, 1), np.repeat(v, H // KV, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(HD)
        s = np.where(np.triu(np.ones((T, T), bool), 1)[None], -np.inf, s)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", a, v).reshape(T, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    out = w["model.embed_tokens.weight" if tied else "lm_head.weight"]
    return rms(x[-1], w["model.norm.weight"]) @ out.T


@pytest.mark.parametrize("tied", [True, False])
def test_hf_folder_matches_numpy(aiinfra_bin, tokdata, tmp_path, tied):
    tokdir = tokdata / "hf/llama2"
    vocab = json.loads((tokdir / "tokenizer.json").read_text())["model"]["vocab"]
    n_vocab = max(vocab.values()) + 1
    w = make_folder(tmp_path, tokdir, n_vocab, tied, np.random.default_rng(5 + tied))
    out = tmp_path / "last.f32"
    dump = tmp_path / "d.json"
    p = run_cli(aiinfra_bin, ["run", "-m", str(tmp_path), "-p", "Hello world, this is a test", "-n", "3",
                              "--ignore-eos", "-q", "-t", "2", "--logits", str(out), "--dump", str(dump)])
    ids = json.loads(dump.read_text())["prompt_ids"]
    assert len(ids) >= 5
    ours = np.fromfile(out, dtype=np.float32)
    ref = reference(w, np.array(ids), tied)
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    assert err <= 1e-4, f"relative error {err:.2e}"
    info = run_cli(aiinfra_bin, ["info", str(tmp_path)]).stdout.decode()
    assert "architecture:   llama" in info and "bf16" in info and "rope:           neox" in info


def test_hf_folder_errors(aiinfra_bin, tokdata, tmp_path):
    tokdir = tokdata / "hf/llama2"
    make_folder(tmp_path, tokdir, 32000, True, np.random.default_rng(1))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["num_hidden_layers"] = 3  # one more layer than the safetensors hold
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = run_cli(aiinfra_bin, ["run", "-m", str(tmp_path), "-p", "x", "-n", "1"], check=False)
    assert p.returncode != 0 and b"missing tensor model.layers.2.input_layernorm.weight" in p.stderr
    cfg["num_hidden_layers"] = 2
    cfg["model_type"] = "gpt_neox"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    p = run_cli(aiinfra_bin, ["run", "-m", str(tmp_path), "-p", "x", "-n", "1"], check=False)
    assert p.returncode != 0 and b"model_type 'gpt_neox' is not supported" in p.stderr
