#!/usr/bin/env python3
"""roofline_plot.py - roofline plot of the kernel ladders (tooling; needs matplotlib).

Input: the JSON of `aiinfra kernels bench --json` (what `aiinfra kernels roofline` passes):
  {"device": str, "copy_gbps": float, "gemm_gflops": float or null,
   "versions": [{"op", "version", "shape", "dtype", "intensity" (FLOP/byte), "gflops", ...}, ...]}
Output: PNG or SVG (by the extension of --out).

x = arithmetic intensity (FLOP per byte of minimum traffic), y = achieved GFLOP/s, both log scale.
Ceilings, both measured in the same run as the points: the memory roof y = copy_gbps * x (GB/s times
FLOP/byte = GFLOP/s) and, when given, the GEMM rate as a flat line; the roofline is their minimum.
Each version is a point coloured by operator; the fastest version of each (op, shape) is labelled. A point on the slanted roof is bandwidth-bound
at the copy ceiling; the vertical gap below the roof is what is left.
"""
import argparse
import json
import sys


def load(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("versions"), list):
        raise ValueError(f"{path}: expected an object with a 'versions' array")
    bw = data.get("copy_gbps")
    if not isinstance(bw, (int, float)) or bw <= 0:
        raise ValueError(f"{path}: 'copy_gbps' must be a positive number")
    pts = []
    for i, v in enumerate(data["versions"]):
        ai, gf = v.get("intensity"), v.get("gflops")
        if not isinstance(ai, (int, float)) or not isinstance(gf, (int, float)) or ai <= 0 or gf <= 0:
            raise ValueError(f"{path}: versions[{i}]: 'intensity' and 'gflops' must be positive numbers")
        label = f"{v.get('op', '?')}/{v.get('version', '?')}"
        if v.get("shape"):
            label += f" {v['shape']}"
        pts.append((float(ai), float(gf), label, v.get("op", "?"), v.get("shape", "")))
    gemm = data.get("gemm_gflops")
    if gemm is not None and (not isinstance(gemm, (int, float)) or gemm <= 0):
        raise ValueError(f"{path}: 'gemm_gflops' must be a positive number or null")
    return data.get("device", "GPU"), float(bw), (float(gemm) if gemm else None), pts


def plot(device, bw, gemm, pts, out):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # labels stay text in the SVG (searchable, editable)
    import matplotlib.pyplot as plt

    xs = [p[0] for p in pts] or [0.25]
    lo, hi = min(xs) / 4, max(xs) * 4
    if gemm:
        hi = max(hi, 4 * gemm / bw)  # show the ridge point
    fig, ax = plt.subplots(figsize=(10, 6.5))
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    mem = [bw * x for x in grid]
    if gemm:
        ax.plot(grid, [min(m, gemm) for m in mem], "k-", lw=2, label="roofline")
        ax.plot(grid, [gemm] * len(grid), "k:", lw=1, label=f"GEMM rate {gemm / 1e3:.0f} TFLOP/s")
    ax.plot(grid, mem, "k--", lw=1, label=f"copy bandwidth {bw:.0f} GB/s")
    # one colour and marker per operator; only the fastest version of each (op, shape) is labelled,
    # the other rungs of its ladder sit below it at the same intensity
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    ops = sorted({p[3] for p in pts})
    best = {}
    for p in pts:
        if p[1] > best.get((p[3], p[4]), (0, 0, ""))[1]:
            best[(p[3], p[4])] = p
    for i, op in enumerate(ops):
        mine = [p for p in pts if p[3] == op]
        ax.plot([p[0] for p in mine], [p[1] for p in mine], markers[i % len(markers)], ms=5, alpha=0.7,
                color=f"C{i}", label=op, linestyle="none")
    for x, y, label, op, shape in best.values():
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 3), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"kernel ladders on {device}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="output of `aiinfra kernels bench --json`")
    ap.add_argument("--out", default="roofline.svg", help="FILE.svg or FILE.png")
    ap.add_argument("--gemm-gflops", type=float, default=None, help="override/add the flat GEMM ceiling")
    a = ap.parse_args(argv)
    if not a.out.lower().endswith((".svg", ".png")):
        print("roofline_plot: --out must end in .svg or .png", file=sys.stderr)
        return 2
    try:
        device, bw, gemm, pts = load(a.json)
    except (OSError, ValueError) as e:
        print(f"roofline_plot: {e}", file=sys.stderr)
        return 1
    if a.gemm_gflops:
        gemm = a.gemm_gflops
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("roofline_plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 1
    plot(device, bw, gemm, pts, a.out)
    print(f"wrote {a.out} ({len(pts)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
