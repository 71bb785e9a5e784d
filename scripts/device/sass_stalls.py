#!/usr/bin/env python3
"""Summarise ncu's per-SASS source counters (`ncu -i R --page source --print-source sass --csv`,
gzipped or not): per kernel, the instructions executed, how many of them are poll loops (an
instruction executed more than LOOP times as often as any memory or MMA instruction, which run at
most once a k step: the mbarrier try_wait loops),
the stall reasons over all samples, and the TOP most-sampled instructions with their main stalls.
A kernel's section that ncu prints twice is shown once.
Usage: sass_stalls.py FILE.csv[.gz] [TOP] [LOOP]."""
import collections
import re
import sys

import sass_csv  # this folder

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
loop = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
hdr, sections = sass_csv.load(path)
num = sass_csv.num
for name, ds in sections.items():
    stalls = sass_csv.stall_columns(hdr)
    ex = [num(d, "Instructions Executed") for d in ds]
    step = max([num(d, "Instructions Executed") for d in ds
                if re.search(r"HGMMA|STS|LDS|LDG|FENCE|HMMA", d["Source"])] or [1])
    polls = sum(e for e in ex if e > loop * step)
    samples = sum(num(d, "Warp Stall Sampling (All Samples)") for d in ds) or 1
    agg = collections.Counter()
    for d in ds:
        for c in stalls:
            agg[c[6:]] += num(d, c)
    print(f"== {name}\n  instructions {sum(ex) / 1e6:.1f} M, of which poll loops {polls / 1e6:.1f} M;"
          f" {samples} stall samples")
    print("  stalls: " + ", ".join(f"{k} {100 * v / samples:.1f} %" for k, v in agg.most_common(8)))
    for d in sorted(ds, key=lambda d: -num(d, "Warp Stall Sampling (All Samples)"))[:top]:
        s = num(d, "Warp Stall Sampling (All Samples)")
        main = sorted(((num(d, c), c[6:]) for c in stalls), reverse=True)[:2]
        print(f"  {d['Address'][-5:]} {100 * s / samples:5.1f} % ex={num(d, 'Instructions Executed'):>10}"
              f"  {d['Source'].strip()[:60]:60s} {', '.join(f'{n} {v}' for v, n in main if v)}")
