#!/usr/bin/env python3
"""Each kernel of an nvdisasm listing (scripts/sass/disasm.sh) whose mangled name holds PATTERN: its
instruction count and, for each loop (a backward branch) that holds tensor-core MMAs (HMMA or HGMMA), the loop's
length and how many of its instructions are MMAs, register moves, zeroings (CS2R), compares, global
loads and shared loads. With --mix, the loop's whole instruction mix by opcode.

    loops.py LISTING [PATTERN] [--mix]
"""
import collections
import re
import sys


def kernels(lines):
    """{name: (instructions, {label: index})} in listing order."""
    out = collections.OrderedDict()
    name = None
    for line in lines:
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            out[name] = ([], {})
            continue
        if name is None:
            continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            out[name][1][m.group(1)] = len(out[name][0])
            continue
        m = re.match(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out[name][0].append(m.group(1))
    return out


def opcode(ins):
    ins = re.sub(r"^@!?U?P\w+\s+", "", ins)  # the predicate
    return ins.split()[0].split(".")[0]


def loops(ins, labels):
    """Each backward branch's body (label .. branch), innermost first as they appear."""
    for i, x in enumerate(ins):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", x)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            yield ins[labels[m.group(1)]: i + 1]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mix = "--mix" in sys.argv
    pattern = args[1] if len(args) > 1 else ""
    for name, (ins, labels) in kernels(open(args[0]).read().split("\n")).items():
        if pattern not in name:
            continue
        print(f"{name}: {len(ins)} instructions")
        for body in loops(ins, labels):
            c = collections.Counter(opcode(x) for x in body)
            if not c["HMMA"] and not c["HGMMA"]:
                continue
            moves = sum(1 for x in body if re.search(r"IMAD\.MOV|(^|\s)MOV ", x))
            print(f"  loop of {len(body)}: HMMA {c['HMMA']}, HGMMA {c['HGMMA']}, R2UR {c['R2UR']}, "
                  f"moves {moves}, CS2R {c['CS2R']}, "
                  f"ISETP {c['ISETP']}, LDG {c['LDG']}, LDS {c['LDS']}")
            if mix:
                print("    " + ", ".join(f"{k} {v}" for k, v in c.most_common()))


if __name__ == "__main__":
    main()
