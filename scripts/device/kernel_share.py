#!/usr/bin/env python3
"""Share of GPU time per kernel name in a CUPTI trace (tools/cupti_trace.c's CSV): which kernels a
whole `gptoss bench latency` run spends its time in. Usage: kernel_share.py TRACE.csv [TOP]."""
import csv
import collections
import re
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
by = collections.Counter()
n = collections.Counter()
for r in rows:
    name = re.sub(r"^void ", "", r["name"])
    name = re.sub(r"\(.*$", "", name)  # drop the parameter list, keep template arguments
    d = int(r["end_ns"]) - int(r["start_ns"])
    by[name] += d
    n[name] += 1
total = sum(by.values())
print(f"| kernel | share | ms | launches |\n| --- | ---: | ---: | ---: |")
for name, d in by.most_common(top):
    print(f"| `{name[:90]}` | {100 * d / total:.1f} % | {d / 1e6:.1f} | {n[name]} |")
print(f"| all | 100 % | {total / 1e6:.1f} | {sum(n.values())} |")
