#!/usr/bin/env python3
"""Per-kernel table of one decode step from an Nsight Compute CSV (tooling, not part of the product).

Where a decode step's time goes, kernel by kernel: each kernel alone (ncu replays it with L2 flushed,
no PDL overlap with its neighbours), so the sum is above the step's graph time; what it shows is
which products stream their weights below copy bandwidth. Made by `scripts/gpu-check.sh profile`:

    ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        --print-units base --launch-count 1400 build/gpu/bin/aiinfra bench --arch llama3-8b --random-weights \
        --dtype bf16 --batch 1 --prompt 64 --gen 2 [--fuse SET] > ncu_step.csv
    scripts/ncu_step.py ncu_step.csv [more.csv ...]

The step is the kernels from the last embedding gather (k_embed) to the end of the capture. Kernels
of one name and grid are summed into one line: count, us each, GB read from DRAM each (when the CSV
has dram__bytes_read.sum) and the rate those make, TB/s.
"""
import collections
import csv
import re
import sys


SCALE = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def kernels(path):
    """[(id, name, grid, {metric: value in ns or bytes})] in launch order."""
    out, hdr = collections.OrderedDict(), None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                hdr = row
                continue
            if not hdr or len(row) != len(hdr):
                continue
            r = dict(zip(hdr, row))
            k = out.setdefault(r["ID"], (r["Kernel Name"], r["Grid Size"], {}))
            scale = SCALE.get(r.get("Metric Unit", ""), 1.0)
            k[2][r["Metric Name"]] = float(r["Metric Value"].replace(",", "")) * scale
    return [(i, n, g, m) for i, (n, g, m) in out.items()]


def table(path):
    ks = kernels(path)
    starts = [j for j, k in enumerate(ks) if "k_embed" in k[1]]
    step = ks[starts[-1]:] if starts else ks
    groups = collections.OrderedDict()
    for _, name, grid, m in step:
        key = re.sub(r"\(.*", "", name).replace("void ", "").strip()[:58] + " " + grid
        g = groups.setdefault(key, [0, 0.0, 0.0])
        g[0] += 1
        g[1] += m.get("gpu__time_duration.sum", 0.0)
        g[2] += m.get("dram__bytes_read.sum", 0.0)
    total = sum(g[1] for g in groups.values())
    print(f"{path}: {len(step)} kernels, {total / 1e3:.1f} us summed (each alone)")
    print(f"  {'n':>4} {'us each':>9} {'MB each':>9} {'TB/s':>6}  kernel grid")
    for key, (n, ns, b) in groups.items():
        rate = f"{b / ns / 1e3:6.2f}" if b and ns else "     -"
        mb = f"{b / n / 1e6:9.2f}" if b else "        -"
        print(f"  {n:4d} {ns / n / 1e3:9.2f} {mb} {rate}  {key}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        table(p)
