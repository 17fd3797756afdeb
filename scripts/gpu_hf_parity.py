#!/usr/bin/env python3
"""GPU model parity at 1B scale against HF transformers / PyTorch. Runs ON the GPU machine (it has torch and
transformers; scripts/gpu-check.sh parity calls it):

    gpu_hf_parity.py AIINFRA_BIN TOKENIZER_DIR WORK_DIR

Builds a Llama-3.2-1B-shaped LlamaForCausalLM with random weights (HF's own init, seed 0), saves it as an
HF folder in f32 and in bf16, and compares `aiinfra run --backend cuda` (the batched paged step, f16 KV cache)
with a PyTorch forward in f32 (TF32 off) on the same weights:
  - logits of the last prompt token: max |ours - ref| / max |ref| <= 1e-2 (f32 weights) and <= 2e-2 (bf16
    weights; the reference computes in f32 on the bf16-rounded weights, i.e. the same function);
  - 16 greedy tokens: equal to the reference's, except that a divergence is accepted where the reference's
    top two logits are closer than the logit tolerance (a tie that rounding may break either way); from there
    the sequences legitimately differ and the comparison stops.
Prints one line per dtype and exits 1 on a failure."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

BIN, TOK, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
DEV = "cuda" if torch.cuda.is_available() else "cpu"   # cpu: a dry run of this script (with PARITY_SMALL=1)
BACKEND = os.environ.get("PARITY_BACKEND", "cuda")
N_PROMPT, N_GEN = 40, 16
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                  rms_norm_eps=1e-5, rope_theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001)
if os.environ.get("PARITY_SMALL"):  # a 2-layer model of the same widths: checks this script, not the GPU
    cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 256, 512
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 4, 2, 64
torch.manual_seed(0)
with torch.device(DEV):
    base = LlamaForCausalLM(cfg).float().eval()
gen = torch.Generator().manual_seed(1)
prompt = torch.randint(0, 128000, (N_PROMPT,), generator=gen).tolist()


@torch.no_grad()
def reference(model):
    """Last-prompt-token logits and N_GEN greedy tokens with each step's top-2 gap, in f32."""
    ids = torch.tensor([prompt], device=DEV)
    out = model(ids, use_cache=True)
    first = out.logits[0, -1].double().cpu().numpy()
    past, logits, toks, gaps = out.past_key_values, out.logits[0, -1], [], []
    for _ in range(N_GEN):
        top2 = torch.topk(logits.float(), 2)
        toks.append(int(top2.indices[0]))
        gaps.append(float(top2.values[0] - top2.values[1]))
        out = model(torch.tensor([[toks[-1]]], device=DEV), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return first, toks, gaps


ok = True
ONLY = os.environ.get("PARITY_DTYPES", "f32,bf16").split(",")  # e.g. PARITY_DTYPES=f32 for a bisection
for name, dtype, tol in (("f32", torch.float32, 1e-2), ("bf16", torch.bfloat16, 2e-2)):
    if name not in ONLY:
        continue
    folder = os.path.join(WORK, "llama1b-" + name)
    shutil.rmtree(folder, ignore_errors=True)
    base.to(dtype).save_pretrained(folder, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, f), folder)
    ref_model = base.to(dtype).float()  # bf16: the rounded weights, computed in f32
    ref_logits, ref_toks, gaps = reference(ref_model)
    lf, df = os.path.join(WORK, name + ".f32"), os.path.join(WORK, name + ".json")
    cmd = [BIN, "run", "-m", folder, "--backend", BACKEND, "--prompt-ids", " ".join(map(str, prompt)), "-n",
           str(N_GEN), "--ignore-eos", "--logits", lf, "--dump", df, "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: aiinfra run failed ({r.returncode}): {r.stderr.strip()[-400:]}")
        ok = False
        continue
    ours = np.fromfile(lf, dtype=np.float32).astype(np.float64)
    rel = float(np.max(np.abs(ours - ref_logits)) / np.max(np.abs(ref_logits)))
    got = json.load(open(df))["gen_ids"][:N_GEN]
    same, verdict = 0, "equal"
    for i, (a, b) in enumerate(zip(got, ref_toks)):
        if a != b:
            tie = gaps[i] <= tol * float(np.max(np.abs(ref_logits)))
            verdict = (f"diverge at {i} (reference top-2 gap {gaps[i]:.2g}: {'a tie, accepted' if tie else 'FAIL'}; "
                       f"ours {got[:i + 2]}, reference {ref_toks[:i + 2]})")
            ok &= tie
            break
        same += 1
    ok &= rel <= tol and len(got) == N_GEN
    print(f"{name}: last-token logits max rel err {rel:.3g} (tolerance {tol:g}); greedy {same}/{N_GEN} {verdict}; "
          f"logit range {np.min(ref_logits):.3f}..{np.max(ref_logits):.3f}")
sys.exit(0 if ok else 1)
