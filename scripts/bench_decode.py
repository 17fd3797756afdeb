#!/usr/bin/env python3
"""Decode and prefill tok/s of `aiinfra run` and of llama.cpp (llama-cpp-python) on the same GGUF,
in the same run, alternating runs so that machine noise hits both alike. Prints a markdown table
for docs/perf.md ("CPU decode").

Usage (llama-cpp-python must be importable, e.g. its venv):
  ~/.cache/aiinfra/venv-llama/bin/python scripts/bench_decode.py [--model M] [--threads 1,2] [--reps 3]
Decode: 128 tokens after "Once upon a time" (EOS ignored); prefill: a 512-token prompt.
The load average is printed at the start and the end (other jobs on a shared machine skew both sides).
llama.cpp timing: wall time of Llama.eval calls (prefill: one call over the prompt; decode: one call
per token, greedy argmax on the returned logits), with its default f16 KV cache.
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_DECODE = 128
PROMPT = ("The history of computing is a story of abstraction. Early machines were programmed by rewiring "
          "panels; then came stored programs, assemblers, compilers and operating systems. ") * 40


def ours(binary, model, threads, ids, kv):
    tokfile = " ".join(map(str, ids))
    out = {}
    p = subprocess.run([binary, "run", "-m", model, "--prompt-ids", tokfile, "-n", "1", "-t", str(threads),
                        "--batch", "512", "--kv", kv], capture_output=True, text=True, check=True)
    out["prefill"] = float(re.search(r"prompt \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", p.stderr).group(1))
    p = subprocess.run([binary, "run", "-m", model, "-p", "Once upon a time", "-n", str(N_DECODE), "--ignore-eos",
                        "-t", str(threads), "--kv", kv], capture_output=True, text=True, check=True)
    out["decode"] = float(re.search(r"decode ([\d.]+) tok/s", p.stderr).group(1))
    return out


def llama(model, threads, ids):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill = len(ids) / (time.perf_counter() - t0)
    llm.reset()
    llm.eval(llm.tokenize(b"Once upon a time", add_bos=True, special=True))
    t = 0.0
    for _ in range(N_DECODE - 1):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = time.perf_counter()
        llm.eval([tok])
        t += time.perf_counter() - t0
    return {"prefill": prefill, "decode": (N_DECODE - 1) / t}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--bin", default=str(ROOT / "build/aiinfra"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kv", default="f16")
    a = ap.parse_args()
    model = a.model or subprocess.run(["bash", str(ROOT / "scripts/fetch_model.sh")], capture_output=True,
                                      text=True, check=True).stdout.strip().splitlines()[-1]
    import llama_cpp
    ids = llama_cpp.Llama(model_path=model, n_ctx=64, verbose=False, vocab_only=True).tokenize(
        PROMPT.encode(), add_bos=True, special=True)[:512]
    print(f"llama-cpp-python {llama_cpp.__version__}; prompt {len(ids)} tokens; decode {N_DECODE} tokens; "
          f"our KV {a.kv}; median of {a.reps}; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); "
          f"load average at start {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print("| threads | ours decode | llama.cpp decode | ratio | ours prefill | llama.cpp prefill | ratio |")
    print("|---|---|---|---|---|---|---|")
    for t in map(int, a.threads.split(",")):
        o, l = [], []
        for _ in range(a.reps):
            o.append(ours(a.bin, model, t, ids, a.kv))
            l.append(llama(model, t, ids))
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        od, ld, op, lp = med(o, "decode"), med(l, "decode"), med(o, "prefill"), med(l, "prefill")
        print(f"| {t} | {od:.1f} | {ld:.1f} | {od / ld:.2f} | {op:.1f} | {lp:.1f} | {op / lp:.2f} |", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)", file=sys.stderr)


if __name__ == "__main__":
    main()
