"""Tokenizer encode speed: ours (the release CLI, one process, load excluded) vs HF tokenizers,
both single-threaded and timed in process CPU time (the machine may be shared), on >= 10 MB of English and >= 10 MB of Chinese text; checks equal ids.

usage: bench_tokenizer.py AIINFRA_BIN TOKDATA [--mb 10]

Text sources (all offline):
  English: Python's own documentation - pydoc_data/topics.py (the help() topics) and the docstrings
           of the standard library modules - repeated until the size is reached.
  Chinese: no package installed here ships Chinese prose, so the text is made of the multi-character
           CJK tokens of the Qwen3 vocabulary (real Chinese words and phrases mined from text),
           drawn with a fixed seed into sentences of 8-30 words with Chinese punctuation.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"          # before tokenizers is imported
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import importlib
import json
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def english_text(target):
    import pydoc_data.topics as topics
    parts = list(topics.topics.values())
    names = sorted(n for n in sys.stdlib_module_names
                   if not n.startswith(("_", "test", "idlelib", "tkinter", "turtle", "antigravity", "this")))
    for m in names:
        try:
            mod = importlib.import_module(m)
        except Exception:
            continue
        for obj in [mod] + [getattr(mod, a, None) for a in dir(mod)]:
            d = getattr(obj, "__doc__", None)
            if isinstance(d, str) and len(d) > 40:
                parts.append(d)
    base = "\n\n".join(dict.fromkeys(parts))
    reps = target // len(base.encode()) + 1
    return (base + "\n\n") * reps


def chinese_text(target, qwen_json):
    vocab = json.loads(Path(qwen_json).read_text(encoding="utf-8"))["model"]["vocab"]
    dec = {c: b for b, c in zip(range(256), [])}
    # undo GPT-2's byte-level spelling, keep tokens that are 2+ CJK characters
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    words = []
    for tok in vocab:
        try:
            w = bytes(dec[c] for c in tok).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if re.fullmatch(r"[\u4e00-\u9fff]{2,}", w):
            words.append(w)
    words.sort()
    rng = random.Random(1234)
    out, size = [], 0
    while size < target:
        s = "".join(rng.choice(words) for _ in range(rng.randrange(8, 30))) + rng.choice("。，；！？、") 
        if rng.random() < 0.1:
            s += "\n"
        out.append(s)
        size += len(s.encode())
    return "".join(out), len(words)


def documents(text, size=4000):
    """Cuts text into documents of about `size` bytes at paragraph breaks (how a tokenizer is used:
    many prompts/documents, not one 10 MB string - HF's per-string bookkeeping makes that case slow)."""
    docs, cur, n = [], [], 0
    for line in text.split("\n"):
        cur.append(line)
        n += len(line.encode()) + 1
        if n >= size and (line == "" or n >= 4 * size):   # prefer a paragraph break
            docs.append("\n".join(cur))
            cur, n = [], 0
    if cur:
        docs.append("\n".join(cur))
    return docs


def ours(binary, model, path):
    p = subprocess.run([binary, "tokenize", "-m", str(model), "--no-special", "--jsonl", "--stats"],
                       stdin=open(path, "rb"), capture_output=True, check=True)
    m = re.search(r"cpu ([0-9.]+) s = ([0-9.]+) MB/s", p.stderr.decode())
    return [[int(x) for x in line.split()] for line in p.stdout.decode().split("\n")[:-1]], float(m.group(2))


def hf_tokenizer(model):
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    if (model / "tokenizer.json").exists():
        return Tokenizer.from_file(str(model / "tokenizer.json"))
    vocab = json.loads((model / "encoder.json").read_text(encoding="utf-8"))
    merges = [tuple(l.split(" ")) for l in (model / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:] if l]
    t = Tokenizer(BPE(vocab, merges))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens(["<|endoftext|>"])
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("tokdata")
    ap.add_argument("--mb", type=float, default=10.0)
    a = ap.parse_args()
    tokdata = Path(a.tokdata)
    target = int(a.mb * 1e6)
    tmp = Path(tempfile.mkdtemp(prefix="tokbench-"))
    en = english_text(target)
    zh, n_words = chinese_text(target, tokdata / "hf/qwen3/tokenizer.json")
    texts = {"en": en, "zh": zh}
    docs = {k: documents(v) for k, v in texts.items()}
    for k, v in docs.items():
        (tmp / f"{k}.txt").write_text("".join(json.dumps(d) + "\n" for d in v), encoding="utf-8")
    print(f"# {time.strftime('%Y-%m-%d')} {platform.node()} {platform.processor() or platform.machine()}, "
          f"en {len(en.encode()) / 1e6:.1f} MB, zh {len(zh.encode()) / 1e6:.1f} MB ({n_words} Qwen3 CJK words), "
          f"documents of ~4 KB: en {len(docs['en'])}, zh {len(docs['zh'])}; single thread, CPU time")
    print(f"{'model':8} {'text':4} {'ours MB/s':>10} {'HF MB/s':>9} {'ratio':>6}  same ids")
    ok = True
    for name in ["llama3", "qwen3", "gpt2"]:
        model = tokdata / ("hf/" + name if name != "gpt2" else "gpt2")
        ref = hf_tokenizer(model)
        for k, text in texts.items():
            ids, mbs = ours(a.binary, model, tmp / f"{k}.txt")
            t0 = time.process_time()   # CPU time, like ours: fair on a shared machine
            encs = ref.encode_batch(docs[k], add_special_tokens=False)
            dt = time.process_time() - t0   # encode only; turning results into Python lists is not timed
            ref_ids = [e.ids for e in encs]
            hf_mbs = sum(len(d.encode()) for d in docs[k]) / dt / 1e6
            same = ids == ref_ids
            ok &= same
            print(f"{name:8} {k:4} {mbs:10.1f} {hf_mbs:9.1f} {mbs / hf_mbs:6.2f}  {'yes' if same else 'NO'}", flush=True)
    for k in texts:
        (tmp / f"{k}.txt").unlink()
    tmp.rmdir()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
