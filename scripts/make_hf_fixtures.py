#!/usr/bin/env python3
"""Generates tests/fixtures/hf/<name>/: tiny random-weight Hugging Face models, the reference that
tests/py/test_hf_parity.py checks our forward against (issue 3, "Against HF transformers").

Each folder is a complete HF model folder (config.json, model.safetensors or shards +
model.safetensors.index.json, generation_config.json, tokenizer.json, tokenizer_config.json) plus
expected.json: what transformers computes on it.

Models (every architecture the engine supports; shapes tiny but not degenerate):
  llama         LlamaForCausalLM, plain RoPE
  llama3_rope   LlamaForCausalLM with rope_scaling llama3 (factor 8, low 1, high 4, original 64: with
                head_dim 16 and theta 10000 the 8 frequencies fall in all three llama3 bands)
  mistral       MistralForCausalLM, SHARDED (save_pretrained max_shard_size -> index.json + 3 shards)
  qwen2         Qwen2ForCausalLM (q/k/v biases), rope_theta 1e6
  qwen3         Qwen3ForCausalLM (per-head q/k RMSNorm)
  smollm        LlamaForCausalLM with tie_word_embeddings=True (no lm_head.weight in the file)
  llama_bf16    the llama model's weights rounded to bf16 and stored bf16 (config dtype bfloat16)
Shapes: hidden 64, 2 layers, 4 query heads / 2 KV heads (GQA), head_dim 16, intermediate 96
(128 for llama and llama_bf16), max_position_embeddings 256, vocab = the tokenizer's (300).
Size budget: ~3 MB for all folders, no file over 1 MiB (the script checks the latter).

Weights: every matrix N(0, STD=0.15) from a torch.Generator seeded with `seed` (model k tries
seeds BASE_SEED + 1000k, +1, ...: the models do not share weights), biases N(0, 0.1), RMSNorm
weights U(0.5, 1.5) (not ones, so a forgotten norm weight shows). With std 0.15 the logits spread
over several units, so greedy picks are well separated.

Greedy margin rule: along every greedy path (each step's logits, first step = last prompt position),
the gap between the top-2 logits must be >= MIN_MARGIN (1e-2; 10x the 1e-3 floor of the brief, and
more than 2 x 1e-4 x max|logit|, the most two logits may move under the test's tolerance). If any
gap is smaller, the seed is increased by one and the model rebuilt, so float reordering in another
implementation cannot flip a greedy pick. For llama the bf16-rounded copy must pass the same rule.
The seed used is recorded in expected.json.

Tokenizer: a byte-level BPE (NFC, Qwen2's split regex then ByteLevel; ByteLevel decoder; see
SPLIT_RE for why) of vocab 300 trained with the `tokenizers` library on CORPUS below; special tokens <s> (0, bos) and </s> (1, eos); a
TemplateProcessing post-processor adds <s>, and tokenizer_config.json says add_bos_token. The same
tokenizer goes into every folder.

expected.json (logits: each f32 value written as the shortest decimal that reads back as the same
f32, numpy's float32 repr):
  prompts[i]: text, ids (tokenized by transformers.AutoTokenizer from the folder, BOS included),
              last_logits (n_vocab floats at the last prompt position), greedy (16 ids: argmax loop
              over the full sequence, no EOS stop), min_margin (smallest top-2 gap on the path)
  all_logits: {prompt: index, logits: [n_prompt][n_vocab]} for every position of one prompt
  how: how the numbers were computed (dtype, attention implementation, versions)

Usage (torch is NOT in the test venv; it lives in its own venv):
  python3 -m venv ~/.cache/aiinfra/venv-torch
  ~/.cache/aiinfra/venv-torch/bin/pip install torch transformers==5.24.0 tokenizers==0.23.3 safetensors numpy
  ~/.cache/aiinfra/venv-torch/bin/python scripts/make_hf_fixtures.py [--out tests/fixtures/hf] [--verify]
Regenerating is deterministic (same versions -> byte-identical folders). --verify only reloads the
committed folders with AutoTokenizer/AutoModelForCausalLM and re-checks ids, logits and generate().
"""
import argparse
import copy
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STD = 0.15
BIAS_STD = 0.1
MIN_MARGIN = 1e-2
N_GEN = 16
VOCAB = 300
BASE_SEED = 1000
MAX_TRIES = 200

CORPUS = """\
The quick brown fox jumps over the lazy dog. A language model reads a sequence of tokens and
predicts the next one. Each layer mixes information across positions with attention, then
transforms every position with a small feed-forward network. The weights are just numbers; the
program that multiplies them is what we test here. Hello, world! It is a sunny day in the park,
and the children are playing with a red ball while their parents talk about the weather.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 42 100 256 1024.

def add(a, b):
    return a + b

def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

for i in range(10):
    print(i, fibonacci(i))

int main(void) {
    int x = 0;
    for (int i = 0; i < 10; i++) {
        x += i * i;
    }
    printf("%d\\n", x);
    return 0;
}
"""

# The split regex of Qwen2's tokenizer (digits one by one, letters with one leading non-letter).
# transformers 5 ignores tokenizer.json's pre-tokenizer for model_type qwen2 and rebuilds the
# pipeline as NFC + this Split + ByteLevel(use_regex=False) (Qwen2Tokenizer); using that pipeline in
# every folder makes AutoTokenizer agree with tokenizer.json for every architecture (checked below).
SPLIT_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

PROMPTS = [
    "The quick brown fox",
    "def add(a, b):\n    return",
    "Hello, world! The weather in the park is",
]
ALL_LOGITS_PROMPT = 1   # the shortest prompt: keeps expected.json small

COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5,
              bos_token_id=0, eos_token_id=1, pad_token_id=None)

# name -> (config class name, model class name, extra config, options)
MODELS = [
    ("llama", "LlamaConfig", "LlamaForCausalLM", dict(rope_theta=10000.0, intermediate_size=128), {}),
    ("llama3_rope", "LlamaConfig", "LlamaForCausalLM",
     dict(rope_theta=10000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}), {}),
    ("mistral", "MistralConfig", "MistralForCausalLM", dict(rope_theta=10000.0, sliding_window=None),
     {"shard": "150KB"}),
    ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1000000.0, use_sliding_window=False), {}),
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(rope_theta=1000000.0, attention_bias=False), {}),
    ("smollm", "LlamaConfig", "LlamaForCausalLM", dict(rope_theta=100000.0, tie_word_embeddings=True), {}),
]
BF16_OF = "llama"


def f9(x):
    import numpy as np
    v = np.float32(x)
    d = float(str(v))           # numpy prints the shortest digits that round-trip this f32
    assert np.float32(d) == v
    return d


def build_tokenizer(folder):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id("<s>") == 0 and tok.token_to_id("</s>") == 1
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "pad_token": "</s>", "unk_token": None,
           "add_bos_token": True, "add_eos_token": False, "model_max_length": 256,
           "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return tok


def check_tokenizer(folder, prompt_ids):
    """AutoTokenizer on the finished folder (which may pick a model-specific class from config.json)
    must give the same ids as tokenizer.json itself, and add no tokens beyond the vocabulary."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) == VOCAB, (folder.name, type(tok).__name__, len(tok))
    for p, ids in zip(PROMPTS, prompt_ids):
        assert tok(p)["input_ids"] == ids, (folder.name, type(tok).__name__, p)


def randomize(model, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=g) * BIAS_STD)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * STD)


def run_reference(model, prompt_ids):
    """Last-position logits, greedy path (manual argmax over the full sequence, no EOS stop) with
    its smallest top-2 gap, and the logits of every prompt position."""
    import torch
    with torch.no_grad():
        ids = list(prompt_ids)
        out = model(torch.tensor([ids])).logits[0].float()
        all_rows = out.numpy().copy()
        last = all_rows[-1].copy()
        greedy, margin = [], float("inf")
        row = out[-1]
        for _ in range(N_GEN):
            top2 = torch.topk(row, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(row))
            greedy.append(nxt)
            ids.append(nxt)
            row = model(torch.tensor([ids])).logits[0, -1].float()
    return last, greedy, margin, all_rows


def evaluate(model, prompt_ids):
    res = [run_reference(model, ids) for ids in prompt_ids]
    return res, min(r[2] for r in res)


def write_expected(folder, info, prompts, prompt_ids, res):
    exp = dict(info)
    exp["n_gen"] = N_GEN
    exp["prompts"] = []
    for text, ids, (last, greedy, margin, _) in zip(prompts, prompt_ids, res):
        exp["prompts"].append({"text": text, "ids": ids, "greedy": greedy, "min_margin": f9(margin),
                               "last_logits": [f9(v) for v in last]})
    rows = res[ALL_LOGITS_PROMPT][3]
    exp["all_logits"] = {"prompt": ALL_LOGITS_PROMPT, "logits": [[f9(v) for v in r] for r in rows]}
    (folder / "expected.json").write_text(json.dumps(exp, separators=(",", ":")) + "\n")


def verify(out):
    """Reloads every folder the way a user would (AutoTokenizer, AutoModelForCausalLM, f32) and checks
    expected.json against it: prompt ids, logits (max abs diff), and model.generate(do_sample=False)
    against the manual greedy loop."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(1)
    for folder in sorted(p for p in Path(out).iterdir() if (p / "expected.json").is_file()):
        exp = json.loads((folder / "expected.json").read_text())
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
        worst = 0.0
        for p in exp["prompts"]:
            ids = tok(p["text"])["input_ids"]
            assert ids == p["ids"], (folder.name, p["text"])
            with torch.no_grad():
                last = model(torch.tensor([ids])).logits[0, -1]
                gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False, max_new_tokens=N_GEN, min_new_tokens=N_GEN,
                                     eos_token_id=None, pad_token_id=1)
            worst = max(worst, float((last - torch.tensor(p["last_logits"])).abs().max()))
            assert gen[0, len(ids):].tolist() == p["greedy"], (folder.name, p["text"])
        print(f"verify {folder.name}: ids and generate() match, last logits max abs diff {worst:.2e}", file=sys.stderr)
        assert worst <= 1e-5, folder.name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures/hf"))
    ap.add_argument("--verify", action="store_true", help="only re-check existing fixtures against transformers")
    args = ap.parse_args()
    if args.verify:
        verify(args.out)
        return

    import tokenizers
    import torch
    import transformers
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__}

    tok_dir = out / "_tok"
    raw_tok = build_tokenizer(tok_dir)
    hf_tok = AutoTokenizer.from_pretrained(str(tok_dir))
    prompt_ids = []
    for p in PROMPTS:
        ids = hf_tok(p)["input_ids"]
        assert ids == raw_tok.encode(p).ids, (p, ids)
        assert ids[0] == 0 and ids.count(0) == 1, ids   # exactly one BOS
        prompt_ids.append(ids)

    def save_tok(folder):
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok_dir / f, folder / f)

    bf16_src = None
    for k, (name, cfg_cls, model_cls, extra, opts) in enumerate(MODELS):
        cfg = getattr(transformers, cfg_cls)(vocab_size=VOCAB, **{**COMMON, **extra})
        cfg._attn_implementation = "eager"
        for seed in range(BASE_SEED + 1000 * k, BASE_SEED + 1000 * k + MAX_TRIES):
            torch.manual_seed(seed)
            model = getattr(transformers, model_cls)(cfg).float().eval()
            randomize(model, seed)
            res, margin = evaluate(model, prompt_ids)
            if name == BF16_OF:   # the bf16 copy's greedy paths must be well separated too
                margin = min(margin, evaluate(copy.deepcopy(model).to(torch.bfloat16).float(), prompt_ids)[1])
            if margin >= MIN_MARGIN:
                break
            print(f"{name}: seed {seed} min top-2 margin {margin:.2e} < {MIN_MARGIN}, re-rolling", file=sys.stderr)
        else:
            sys.exit(f"{name}: no seed in {MAX_TRIES} tries gives margins >= {MIN_MARGIN}")
        folder = out / name
        kw = {"max_shard_size": opts["shard"]} if "shard" in opts else {}
        model.save_pretrained(str(folder), safe_serialization=True, **kw)
        save_tok(folder)
        check_tokenizer(folder, prompt_ids)
        info = {"name": name, "model_class": model_cls, "seed": seed, "dtype": "float32", "versions": versions,
                "how": "weights f32 as stored; forward in torch f32 on the CPU, eager attention, "
                       "transformers " + transformers.__version__ + "; greedy = argmax loop re-running the "
                       "full sequence each step, no EOS stop; prompt ids from AutoTokenizer of this folder"}
        write_expected(folder, info, PROMPTS, prompt_ids, res)
        print(f"{name}: seed {seed}, min top-2 margin {margin:.4f}", file=sys.stderr)
        if name == BF16_OF:
            bf16_src = (folder, model_cls)

    # bf16: round the llama weights to bf16, store them bf16, reload and run in f32.
    src, model_cls = bf16_src
    folder = out / (BF16_OF + "_bf16")
    m = getattr(transformers, model_cls).from_pretrained(str(src), dtype=torch.float32)
    m.to(torch.bfloat16).save_pretrained(str(folder), safe_serialization=True)
    save_tok(folder)
    check_tokenizer(folder, prompt_ids)
    m = getattr(transformers, model_cls).from_pretrained(str(folder), dtype=torch.bfloat16, attn_implementation="eager")
    assert next(m.parameters()).dtype == torch.bfloat16
    m = m.float().eval()
    res, margin = evaluate(m, prompt_ids)
    if margin < MIN_MARGIN:
        sys.exit(f"{folder.name}: min top-2 margin {margin:.2e} < {MIN_MARGIN} after bf16 rounding; "
                 f"change BASE_SEED")
    info = {"name": folder.name, "model_class": model_cls, "seed": json.loads((src / "expected.json").read_text())["seed"],
            "dtype": "bfloat16", "versions": versions,
            "how": "weights stored bf16 (the f32 " + BF16_OF + " fixture rounded to bf16 by torch); loaded bf16, "
                   "converted exactly to f32 (.float()), forward in torch f32 on the CPU, eager attention; "
                   "greedy = argmax loop, no EOS stop"}
    write_expected(folder, info, PROMPTS, prompt_ids, res)
    print(f"{folder.name}: min top-2 margin {margin:.4f}", file=sys.stderr)
    shutil.rmtree(tok_dir)

    big = [p for p in out.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"total {total / 1e6:.2f} MB in {out}", file=sys.stderr)
    if big:
        sys.exit(f"files over 1 MiB: {big}")


if __name__ == "__main__":
    main()
