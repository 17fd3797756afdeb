#!/usr/bin/env python3
"""Prefix caching, on vs off: N requests that share a long system prompt (and differ in the question), one
after the other against `aiinfra serve` started with and without --no-prefix-cache. Prints mean TTFT and the
server's prefix-cache counters. Usage: bench_prefix_cache.py AIINFRA_BIN MODEL [N] [THREADS]"""
import json
import sys
import time
import urllib.request

from serve_cpu import cpu_server

BIN, MODEL = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 8
THREADS = sys.argv[4] if len(sys.argv) > 4 else "2"
SYSTEM = " ".join(f"Rule {i}: answer politely, briefly and with care about item number {i}." for i in range(40))


def run(extra, port):
    with cpu_server(BIN, MODEL, port, THREADS, extra):
        ttfts = []
        for i in range(N):
            body = json.dumps({"model": MODEL, "prompt": SYSTEM + f"\nQuestion {i}: what is {i} plus {i}?\nAnswer:",
                               "max_tokens": 1, "temperature": 0}).encode()
            t0 = time.perf_counter()
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                                          {"Content-Type": "application/json"})).read()
            ttfts.append(time.perf_counter() - t0)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        hits = [l for l in metrics.splitlines() if l.startswith(("vllm:prefix_cache_hits", "vllm:prompt_tokens"))]
        return ttfts, hits


for label, extra, port in (("prefix cache on ", [], 18301), ("prefix cache off", ["--no-prefix-cache"], 18302)):
    t, hits = run(extra, port)
    rest = sorted(t[1:])
    print(f"{label}: first request {t[0] * 1e3:7.1f} ms, later requests median {rest[len(rest) // 2] * 1e3:7.1f} ms; "
          + "; ".join(h.split("{")[0] + " " + h.split()[-1] for h in hits))
