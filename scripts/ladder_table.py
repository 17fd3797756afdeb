#!/usr/bin/env python3
"""Markdown tables from `aiinfra kernels bench --json` output (for docs/kernels/*.md and docs/perf.md).

usage: scripts/ladder_table.py LADDERS.json [--op OP] [--skip-versions v1_,v2_]
One table per op: version, shape, dtype, time, GB/s, % of copy, TFLOP/s, speed against the library
measured on the same shape in the same run (when the ladder has one), error and bound.
"""
import argparse
import json


def fmt_time(ms):
    us = ms * 1e3
    return f"{us:,.1f}" if us < 1e4 else f"{us:,.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--op", default=None)
    ap.add_argument("--skip-versions", default="", help="comma-separated version prefixes to leave out")
    a = ap.parse_args()
    d = json.load(open(a.json))
    skip = [s for s in a.skip_versions.split(",") if s]
    ops = []
    for r in d["versions"]:
        if r["op"] not in ops:
            ops.append(r["op"])
    print(f"Device: {d['device']}; copy ceiling {d['copy_gbps']:,.0f} GB/s"
          + (f"; cuBLASLt bf16 8192^3 {d['gemm_gflops'] / 1e3:,.0f} TFLOP/s" if d.get("gemm_gflops") else "") + "\n")
    for op in ops:
        if a.op and op != a.op:
            continue
        rows = [r for r in d["versions"] if r["op"] == op and not any(r["version"].startswith(s) for s in skip)]
        print(f"| {op} version | shape | dtype | time (us) | GB/s | % of copy | TFLOP/s | vs library | error (bound) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            vs = f"{r['frac_ref']:.2f}x {r['ref']}" if r.get("ref") else "-"
            err = r.get("rel_err")
            err_s = f"{err:.1e}" if err is not None else "NaN"
            ok = "" if r["ok"] else " **FAIL**"
            print(f"| {r['version']} | {r['shape']} | {r['dtype']} | {fmt_time(r['ms'])} | {r['gbps']:,.0f} | "
                  f"{100 * r['frac_copy']:.1f}% | {r['gflops'] / 1e3:,.1f} | {vs} | {err_s} ({r['bound']:.0e}){ok} |")
        print()


if __name__ == "__main__":
    main()
