#!/usr/bin/env python3
"""Generates tests/fixtures/llama/*.json: the reference for tests/py/test_llama_parity.py.

For each prompt: the reference's prompt token ids, its greedy continuation (64 tokens, with the
top-1 minus top-2 logit gap at each step, so a test can tell a decided step from a near tie) and the
logits of the prompt's last position (top 50 ids/values, plus the values at 512 fixed ids spread
over the vocabulary so the whole row is checked, not only its head).

Reference (--ref):
  llama   llama-cpp-python (llama.cpp's CPU backend, the primary reference). Run it with the venv
          where it is installed:  ~/.cache/aiinfra/venv-llama/bin/python scripts/make_llama_fixtures.py
  numpy   an independent f32 Llama forward in numpy over weights dequantized by the `gguf` package
          (no activation quantization), with HF `tokenizers` built from the GGUF vocabulary; the
          fallback when llama-cpp-python is not available.
Chat-templated prompts are rendered with jinja2 from the GGUF's tokenizer.chat_template
(add_generation_prompt=True), independently of our template engine.

Usage: python scripts/make_llama_fixtures.py [--ref llama|numpy] [--model PATH] [--out DIR]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_GEN = 64
N_TOP = 50
N_SAMPLED = 512

LONG = ("The history of computing is a story of abstraction. Early machines were programmed by "
        "rewiring panels; then came stored programs, assemblers, compilers and operating systems. "
        "Each layer hid the one below it, so that programmers could think in larger pieces. "
        "Today a single line of Python may run millions of machine instructions across many cores, "
        "and a language model answering a question performs billions of multiplications. ") * 4

PROMPTS = [
    {"name": "en_fact", "prompt": "The capital of France is", "chat": False},
    {"name": "en_story", "prompt": "Once upon a time, in a small village by the sea,", "chat": False},
    {"name": "zh", "prompt": "人工智能是", "chat": False},
    {"name": "code_py", "prompt": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "chat": False},
    {"name": "code_c", "prompt": "#include <stdio.h>\n\nint main(void) {\n", "chat": False},
    {"name": "chat_en", "prompt": "What is the capital of France?", "chat": True},
    {"name": "chat_recipe", "prompt": "Give me three tips for baking bread.", "chat": True, "system": "You are a concise assistant."},
    {"name": "chat_zh", "prompt": "请用一句话介绍你自己。", "chat": True},
    {"name": "long", "prompt": LONG + "In summary,", "chat": False},
    {"name": "numbers", "prompt": "1, 2, 3, 5, 8, 13,", "chat": False},
]


def default_model():
    out = subprocess.run(["bash", str(ROOT / "scripts/fetch_model.sh")], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def render_chat(template, case):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    msgs = []
    if case.get("system"):
        msgs.append({"role": "system", "content": case["system"]})
    msgs.append({"role": "user", "content": case["prompt"]})
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True)


def sampled_ids(n_vocab):
    return [int(i) for i in np.linspace(0, n_vocab - 1, N_SAMPLED).round().astype(np.int64)]


# --- numpy reference ---------------------------------------------------------------------

class NumpyLlama:
    def __init__(self, path):
        from gguf import GGUFReader
        from gguf.quants import dequantize
        r = GGUFReader(path)
        self.kv = {f.name: f for f in r.fields.values()}
        arch = self.str("general.architecture")
        assert arch == "llama", f"numpy reference handles llama only, got {arch}"
        g = lambda k: self.val(f"{arch}.{k}")
        self.dim, self.n_layer = int(g("embedding_length")), int(g("block_count"))
        self.n_head, self.n_kv = int(g("attention.head_count")), int(g("attention.head_count_kv"))
        self.hd = self.dim // self.n_head
        self.eps, self.base = float(g("attention.layer_norm_rms_epsilon")), float(g("rope.freq_base"))
        self.w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
            [int(x) for x in reversed(t.shape)]) for t in r.tensors}
        self.out_w = self.w.get("output.weight", self.w["token_embd.weight"])
        self.template = self.str("tokenizer.chat_template")

    def val(self, k):
        f = self.kv[k]
        return f.parts[f.data[0]][0]

    def str(self, k):
        f = self.kv[k]
        return bytes(f.parts[f.data[0]]).decode()

    def rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps)).astype(np.float32) * w

    def rope(self, x, pos):  # x (T, H, hd); adjacent pairs, as llama.cpp's GGUF llama ("normal")
        i = np.arange(self.hd // 2, dtype=np.float64)
        theta = pos[:, None].astype(np.float64) * self.base ** (-2.0 * i / self.hd)[None, :]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def run(self, ids, n_gen):
        self.k = [None] * self.n_layer
        self.v = [None] * self.n_layer
        logits = self.forward(np.array(ids), 0)
        first = logits
        out, pos = [], len(ids)
        for _ in range(n_gen):
            t = int(np.argmax(logits))
            out.append(t)
            if t in self.eog:
                break
            logits = self.forward(np.array([t]), pos)
            pos += 1
        return first, out

    def forward(self, ids, pos0):
        W = self.w
        T = len(ids)
        pos = np.arange(pos0, pos0 + T)
        x = W["token_embd.weight"][ids]
        rep = self.n_head // self.n_kv
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.rms(x, W[p + "attn_norm.weight"])
            q = (h @ W[p + "attn_q.weight"].T).reshape(T, self.n_head, self.hd)
            k = (h @ W[p + "attn_k.weight"].T).reshape(T, self.n_kv, self.hd)
            v = (h @ W[p + "attn_v.weight"].T).reshape(T, self.n_kv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k[l] = k if self.k[l] is None else np.concatenate([self.k[l], k])
            self.v[l] = v if self.v[l] is None else np.concatenate([self.v[l], v])
            K, V = np.repeat(self.k[l], rep, axis=1), np.repeat(self.v[l], rep, axis=1)  # (S, H, hd)
            att = np.einsum("thd,shd->hts", q, K) / np.sqrt(self.hd)
            S = K.shape[0]
            mask = np.arange(S)[None, :] > (pos[:, None])
            att = np.where(mask[None], -np.inf, att)
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", att, V).reshape(T, -1)
            x = x + o @ W[p + "attn_output.weight"].T
            h = self.rms(x, W[p + "ffn_norm.weight"])
            g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down.weight"].T
        h = self.rms(x[-1:], W["output_norm.weight"])
        return (h @ self.out_w.T)[0]


def numpy_tokenizer(path):
    """HF tokenizers built from the GGUF vocabulary: BPE + digits split + GPT-2 byte-level (smollm)."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken, Regex
    r = GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    merges = [tuple(bytes(f["tokenizer.ggml.merges"].parts[i]).decode().split(" ", 1)) for i in f["tokenizer.ggml.merges"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)}, merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
    eog = {i for i, (t, ty) in enumerate(zip(toks, types)) if ty == 3 and t in ("<|im_end|>", "<|endoftext|>")}
    return tk, eog


# --- llama-cpp-python reference ------------------------------------------------------------

def run_llama(path, cases):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_batch=512, n_threads=2, logits_all=False, verbose=False,
                          seed=0)
    template = llm.metadata["tokenizer.chat_template"]
    cp = llm.context_params
    fa = getattr(cp, "flash_attn_type", getattr(cp, "flash_attn", "?"))

    def is_eog(t):
        for fn, arg in (("llama_vocab_is_eog", "vocab"), ("llama_token_is_eog", "vocab"), ("llama_token_is_eog", "model")):
            f = getattr(llama_cpp, fn, None)
            if f is not None and hasattr(llm._model, arg):
                try:
                    return bool(f(getattr(llm._model, arg), t))
                except Exception:
                    pass
        return t == llm.token_eos()

    results = []
    for c in cases:
        text = render_chat(template, c) if c["chat"] else c["prompt"]
        ids = llm.tokenize(text.encode(), add_bos=True, special=True)
        assert len(ids) + N_GEN <= llm.n_ctx(), f"context {llm.n_ctx()} too small"
        n_vocab = llm.n_vocab()

        def last_logits():  # Llama.scores is not filled by eval() in 0.3.36: read the context's row
            p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
            return np.ctypeslib.as_array(p, shape=(n_vocab,)).astype(np.float32).copy()

        llm.reset()
        llm.eval(ids)
        first = last_logits()
        gen, margins = [], []
        logits = first
        for _ in range(N_GEN):
            t = int(np.argmax(logits))
            gen.append(t)
            top2 = np.partition(logits, -2)[-2:]
            margins.append(round(float(top2[1] - top2[0]), 4))
            if is_eog(t):
                break
            llm.eval([t])
            logits = last_logits()
        results.append((c, text, ids, first, gen, margins))
    return results, (f"llama-cpp-python {llama_cpp.__version__} (llama.cpp CPU, KV {cp.type_k}/{cp.type_v} "
                     f"(ggml type ids; 1 = f16), flash_attn {fa}, n_threads 2)")


def run_numpy(path, cases):
    m = NumpyLlama(path)
    tk, m.eog = numpy_tokenizer(path)
    results = []
    for c in cases:
        text = render_chat(m.template, c) if c["chat"] else c["prompt"]
        ids = tk.encode(text, add_special_tokens=False).ids
        first, gen = m.run(ids, N_GEN)
        results.append((c, text, ids, first, gen, None))
    return results, "numpy f32 forward over gguf.quants-dequantized weights; HF tokenizers from the GGUF vocab"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", choices=["llama", "numpy"], default="llama")
    ap.add_argument("--model")
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/llama"))
    ap.add_argument("--only", help="comma-separated case names")
    a = ap.parse_args()
    path = a.model or default_model()
    cases = [c for c in PROMPTS if not a.only or c["name"] in a.only.split(",")]
    results, ref = (run_llama if a.ref == "llama" else run_numpy)(path, cases)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    out = {"model": os.path.basename(path), "model_sha256": sha, "reference": ref, "n_gen": N_GEN, "cases": []}
    for c, text, ids, first, gen, margins in results:
        top = np.argsort(-first, kind="stable")[:N_TOP]
        samp = sampled_ids(len(first))
        out["cases"].append({
            "name": c["name"], "prompt": c["prompt"], "chat": c["chat"], "system": c.get("system"),
            "prompt_text": text, "prompt_ids": [int(i) for i in ids], "gen_ids": [int(i) for i in gen],
            "gen_margins": margins,  # top-1 minus top-2 logit at each greedy step (llama only)
            "top_ids": [int(i) for i in top], "top_logits": [round(float(first[i]), 5) for i in top],
            "sampled_ids": samp, "sampled_logits": [round(float(first[i]), 5) for i in samp],
        })
    Path(a.out).mkdir(parents=True, exist_ok=True)
    dst = Path(a.out) / f"smollm2_q4_1_{a.ref}.json"
    dst.write_text(json.dumps(out, ensure_ascii=False, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {dst} ({len(out['cases'])} cases, reference: {ref})", file=sys.stderr)


if __name__ == "__main__":
    main()
