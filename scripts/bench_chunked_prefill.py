#!/usr/bin/env python3
"""Chunked prefill, on vs off: 4 streams decode 48 tokens each; 0.3 s in, a request with a long prompt arrives.
With a small per-step token budget (--max-num-batched-tokens 32: chunked) the long prompt is prefilled a
chunk per step beside the running decodes; with a budget larger than the prompt it is prefilled in one step,
and every running stream waits for it. Prints the running streams' worst inter-token gap and the long
request's time to first token. Usage: bench_chunked_prefill.py AIINFRA_BIN MODEL [THREADS]"""
import json
import sys
import threading
import time
import urllib.request

from serve_cpu import cpu_server

BIN, MODEL = sys.argv[1], sys.argv[2]
THREADS = sys.argv[3] if len(sys.argv) > 3 else "2"
LONG = " ".join(f"Sentence {i} of a long document about rivers, mountains and the sea." for i in range(50))


def stream(port, prompt, max_tokens, gaps, ttft):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    t0 = last = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            now = time.perf_counter()
            if ttft is not None and not ttft:
                ttft.append(now - t0)
            gaps.append(now - last)
            last = now


def run(budget, port):
    with cpu_server(BIN, MODEL, port, THREADS,
                    ["--max-num-batched-tokens", str(budget), "--max-num-seqs", "8", "--no-prefix-cache"]):
        gaps = [[] for _ in range(4)]
        ts = [threading.Thread(target=stream, args=(port, f"Story {i}:", 48, gaps[i], None)) for i in range(4)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        ttft = []
        stream(port, LONG, 1, [], ttft)
        for t in ts:
            t.join()
        worst = max(max(g[1:]) for g in gaps if len(g) > 1)
        return worst, ttft[0]


for label, budget, port in (("chunked (budget 32)  ", 32, 18401), ("unchunked (budget 2048)", 2048, 18402)):
    worst, ttft = run(budget, port)
    print(f"{label}: running streams' worst inter-token gap {worst * 1e3:7.1f} ms; long prompt TTFT {ttft * 1e3:7.1f} ms")
