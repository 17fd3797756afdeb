#!/usr/bin/env python3
"""What each kernel's machine code (SASS) holds, and whether it holds what it should.

    scripts/sass_kernels.py report OBJ.o ...            one line per kernel: registers, local memory
                                                          (spills), tensor-core and TMA instruction counts
    scripts/sass_kernels.py check EXPECT OBJ.o ...      each line of EXPECT is `KERNEL_REGEX RULE...`,
                                                          a rule `+OP` (some instruction's opcode starts
                                                          with OP) or `-OP` (none does); exit 1 on a miss

The rules are the claims the kernel pages make (docs/kernels/*.md: "HGMMA present, no local-memory
spills"), checked on every build so that a compiler or source change that breaks one is caught
without a GPU. Local memory (LDL / STL) is where ptxas puts registers it could not fit, and tensor-core
kernels that lose their HGMMA / HMMA / IMMA have fallen back to something far slower. Every regex must
match at least one kernel, so a renamed kernel cannot silently drop its rules.

cuobjdump (with nvdisasm beside it) comes from scripts/cuda-tools.sh; CUOBJDUMP names it.
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_pdl_check import demangle, parse_functions, run_cuobjdump  # noqa: E402  (the same SASS reader)

COUNTED = ("HGMMA", "HMMA", "IMMA", "IDP", "UTMALDG", "UBLKCP", "LDGSTS", "LDL", "STL")
RES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def cuobjdump(args, obj):
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "cuobjdump"
    try:
        return run_cuobjdump(tool, args, obj)
    except RuntimeError as e:
        sys.exit(str(e))


def kernels(objs):
    """[(obj, demangled name, {REG, STACK, SHARED, LOCAL}, {opcode prefix: count}, [opcodes])]"""
    out = []
    for obj in objs:
        res = {m.group(1): dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, m.groups()[1:])))
               for m in RES.finditer(cuobjdump(["-res-usage"], obj))}
        funcs = parse_functions(cuobjdump(["-sass"], obj))
        names = demangle(list(funcs))
        for mangled, insns in funcs.items():
            ops = [op for _, _, op, _ in insns]
            counts = {c: sum(1 for o in ops if o.split(".")[0] == c) for c in COUNTED}
            out.append((obj, names[mangled], res.get(mangled, {}), counts, ops))
    return out


def report(objs):
    print(f"{'REG':>4} {'LOCAL':>5} {'STACK':>5}  " + " ".join(f"{c:>7}" for c in COUNTED) + "  kernel (object)")
    for obj, name, res, counts, _ in kernels(objs):
        print(f"{res.get('REG', '?'):>4} {res.get('LOCAL', '?'):>5} {res.get('STACK', '?'):>5}  " +
              " ".join(f"{counts[c]:>7}" for c in COUNTED) + f"  {name} ({os.path.basename(obj)})")
    return 0


def check(expect, objs):
    rules = []
    for n, line in enumerate(open(expect), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        bad = [f for f in fields[1:] if f[:1] not in "+-" or len(f) < 2]
        if len(fields) < 2 or bad:
            sys.exit(f"{expect}:{n}: want KERNEL_REGEX +OP|-OP ...")
        rules.append((n, re.compile(fields[0]), fields[1:]))
    ks = kernels(objs)
    fails = 0
    for n, rx, want in rules:
        hit = [k for k in ks if rx.search(k[1])]
        if not hit:
            print(f"{expect}:{n}: no kernel matches {rx.pattern}")
            fails += 1
        for obj, name, _, _, ops in hit:
            for w in want:
                has = any(o.startswith(w[1:]) for o in ops)
                if has != (w[0] == "+"):
                    print(f"{expect}:{n}: {name} ({os.path.basename(obj)}): "
                          f"{'no ' + w[1:] if w[0] == '+' else str(sum(o.startswith(w[1:]) for o in ops)) + ' x ' + w[1:]}")
                    fails += 1
    print(f"sass_kernels: {len(ks)} kernels, {len(rules)} rules, {fails} misses")
    return 1 if fails else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "report":
        return report(sys.argv[2:])
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        return check(sys.argv[2], sys.argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
