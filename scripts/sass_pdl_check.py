#!/usr/bin/env python3
r"""Which global loads can run before a kernel's PDL wait, read from the compiled SASS.

Under programmatic dependent launch (cuk_launch.h) a kernel's CTAs start while the previous kernel
still runs; `griddepcontrol.wait` (SASS: ACQBULK) is where they wait for its writes. A load of
anything that kernel writes must come after the wait. Source order is not enough: ptxas treats
`ld.global.nc` (const __restrict__ pointers, __ldg) as reading memory that no one writes while the
kernel lives, and moves such loads across ACQBULK in either direction (a GEMV's x loads went above
the wait once: docs/gpu.md, "Early weight loads under PDL"). Coherent loads (ld.global, __ldcg) stay
after it.

For every kernel in the object files given, this walks the control-flow graph of its SASS from the
entry, stopping at ACQBULK, and prints each load reachable on a path that has not waited: LDG / LD
(loads), LDGSTS (cp.async), UBLKCP / UTMALDG (bulk and tensor copies). A kernel may mean some of
them (weights, block tables, cache rows written by kernels that finished earlier): each line of the
allow file is `KERNEL_REGEX OPCODE_REGEX # why`, the first searched in the demangled kernel name, the
second matched against the whole opcode (e.g. `UTMALDG\.2D`), so an allowed kernel is still caught
loading anything else early. Exit status 1 when some kernel has an early load that no line allows.
Kernels with no ACQBULK at all are not PDL-aware and are not checked (-v lists those with loads).

    scripts/sass_pdl_check.py [--allow FILE] [--cuobjdump PATH] OBJ.o ...

cuobjdump (and the nvdisasm it runs) is not in every CUDA toolkit install: scripts/cuda-tools.sh
fetches both from NVIDIA's PyPI wheels, and `make test` runs this through tests/py/test_sass_pdl.py.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")
LOADS = re.compile(r"^(LDG|LD|LDGSTS|UBLKCP|UTMALDG)(\.|$)")
BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


def parse_functions(sass):
    """{name: [(addr, pred, op, args)]} from cuobjdump -sass output."""
    funcs, cur = {}, None
    for line in sass.splitlines():
        if "Function :" in line:
            cur = line.split("Function :", 1)[1].strip()
            funcs[cur] = []
            continue
        m = INSN.match(line)
        if not m or cur is None:
            continue
        text = m.group(2)
        pred = ""
        if text.startswith("@"):
            pred, text = text.split(None, 1)
        parts = text.split(None, 1)
        funcs[cur].append((int(m.group(1), 16), pred, parts[0], parts[1] if len(parts) > 1 else ""))
    return funcs


PRED_DEF = re.compile(r"^(?:U?ISETP)\.(NE|EQ)(?:\.U32)?\.AND$")
CBANK = re.compile(r"^c\[0x0\]\[(0x[0-9a-f]+)\]$")


def operands(args):
    return [x.strip() for x in args.split(",")]


def early_loads(insns):
    """Loads reachable from the entry without passing an ACQBULK, and whether the kernel has one.

    Path-sensitive for the one pattern that matters here: a kernel parameter tested against 0 twice
    (e.g. `early`: wait at the top when 0, after the first loads otherwise). A register loaded from the
    parameter bank (ULDC / LDC) and compared with zero by ISETP gives a predicate tied to that
    parameter; a branch on it records the parameter's zero-ness on each path, and a later branch on
    the same fact follows only the consistent edge."""
    index = {a: i for i, (a, _, _, _) in enumerate(insns)}
    has_wait = any(op == "ACQBULK" for _, _, op, _ in insns)
    found, seen = {}, set()
    # state: (i, facts: frozenset of (param, nonzero)), reg -> param, pred -> (param, nonzero_when_true)
    stack = [(0, frozenset(), {}, {})]
    while stack:
        i, facts, regs, preds = stack.pop()
        key = (i, facts, frozenset(preds.items()))
        if i >= len(insns) or key in seen:
            continue
        seen.add(key)
        addr, pred, op, args = insns[i]
        base = op.split(".")[0]
        ops = operands(args)
        if op == "ACQBULK":
            continue  # waited: what follows on this path is safe
        if LOADS.match(op):
            found.setdefault(addr, (pred + " " if pred else "") + op + " " + args)
        regs, preds = dict(regs), dict(preds)
        if base in ("ULDC", "LDC") and len(ops) == 2 and CBANK.match(ops[1]) and ".64" not in op:
            regs[ops[0]] = CBANK.match(ops[1]).group(1)
        elif ops and ops[0] in regs:
            del regs[ops[0]]  # written (predicated or not): the parameter is no longer known to be there
        for d in ops[:2]:  # destination predicates (ISETP, PLOP3, ... write their first one or two)
            preds.pop(d, None)
        m = PRED_DEF.match(op)
        if m and len(ops) == 5 and not pred and ops[1] == "PT" and ops[4] == "PT":
            a, b = ops[2], ops[3]
            src = regs.get(b) if a == "RZ" else regs.get(a) if b == "RZ" else None
            if src:
                preds[ops[0]] = (src, m.group(1) == "NE")  # (param, pred true means param != 0)

        def follow(j, taken_if_pred_true):
            """successor j, reached when the branch predicate has the given value"""
            neg = pred.startswith("@!")
            p = pred.lstrip("@!")
            fact = None
            if p in preds:
                param, true_means_nonzero = preds[p]
                pred_value = taken_if_pred_true != neg
                nonzero = pred_value == true_means_nonzero
                if (param, not nonzero) in facts:
                    return
                fact = (param, nonzero)
            stack.append((j, facts | {fact} if fact else facts, regs, preds))

        if base in ("BRA", "JMP", "CALL", "BRX", "JMX"):
            t = BRANCH_TARGET.search(args)
            if base in ("BRX", "JMX") or not t:
                found.setdefault(addr, "indirect branch " + op + " (not followed)")
            elif int(t.group(1), 16) in index:
                if pred and base == "BRA":
                    follow(index[int(t.group(1), 16)], True)
                else:
                    stack.append((index[int(t.group(1), 16)], facts, regs, preds))
            if pred and base == "BRA":
                follow(i + 1, False)
            elif base == "CALL" or pred:
                stack.append((i + 1, facts, regs, preds))
        elif base in ("EXIT", "RET"):
            if pred:
                stack.append((i + 1, facts, regs, preds))
        else:
            stack.append((i + 1, facts, regs, preds))
    return sorted(found.items()), has_wait


def opcode(text):
    """the opcode of a listed load ('@!P0 LDG.E.CONSTANT R1, ...' -> 'LDG.E.CONSTANT')"""
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


def run_cuobjdump(tool, args, obj):
    """`tool ARGS obj`'s output, nvdisasm looked up beside the tool first (scripts/cuda-tools.sh)."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(shutil.which(tool) or tool) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([tool] + args + [obj], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} {obj}: {r.stderr.strip()}")
    return r.stdout


def demangle(names):
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--allow", help="kernels allowed to load before the wait (regex # reason per line)")
    ap.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP", "cuobjdump"))
    ap.add_argument("-v", "--verbose", action="store_true", help="print the allowed kernels' early loads too")
    ap.add_argument("objs", nargs="+")
    args = ap.parse_args()
    allow = []
    if args.allow:
        for line in open(args.allow):
            fields = line.split("#", 1)[0].split()
            if len(fields) == 2:
                allow.append((re.compile(fields[0]), re.compile(fields[1])))
            elif fields:
                print(f"{args.allow}: want KERNEL_REGEX OPCODE_REGEX: {line.strip()}", file=sys.stderr)
                return 2
    bad = 0
    n_kernels = 0
    for obj in args.objs:
        try:
            funcs = parse_functions(run_cuobjdump(args.cuobjdump, ["-sass"], obj))
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
        names = demangle(list(funcs))
        for mangled, insns in funcs.items():
            n_kernels += 1
            found, has_wait = early_loads(insns)
            name = names[mangled]
            if not has_wait:
                if found and args.verbose:
                    print(f"note: {obj}: {name}: no PDL wait ({len(found)} loads)")
                continue
            if not found:
                continue
            ops = [(addr, text) for addr, text in found]
            rules = [o for k, o in allow if k.search(name)]
            left = [(a, t) for a, t in ops if not any(o.fullmatch(opcode(t)) for o in rules)]
            if not left and not args.verbose:
                continue
            print(f"{'EARLY LOAD' if left else 'allowed'}: {obj}: {name}")
            for addr, text in (left or ops)[:12]:
                print(f"    /*{addr:04x}*/ {text}")
            if len(left or ops) > 12:
                print(f"    ... {len(left or ops) - 12} more")
            bad += bool(left)
    print(f"sass_pdl_check: {n_kernels} kernels, {bad} with loads before the PDL wait that are not allowed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
