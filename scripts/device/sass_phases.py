#!/usr/bin/env python3
"""The step kernel's ncu source counters (`ncu ... --page source --print-source sass --csv`, gzipped
or not; env.sh's ncu_step_kernel writes them) cut into its phases by the probe's stamps: each
64-bit `CS2R ... SR_GLOBALTIMER` instruction (sk_stamp) ends a region, so the regions in address order are
the layer's start, phases 0-6 and the producer with the tail. For each region: its share of all
stall samples and its top stall reasons; then, with --loops, the hot loops (runs of instructions
executed at least 4 times as often as the region's median instruction: the k loops) against the rest of
their region, which is where a chunk's fixed cost shows.
Usage: sass_phases.py FILE.csv[.gz] [--loops] [--top N]."""
import collections
import sys

import sass_csv  # this folder

args = [a for a in sys.argv[1:] if not a.startswith("--")]
loops = "--loops" in sys.argv
top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 4
path = args[0]
hdr, sections = sass_csv.load(path)
ds = next(iter(sections.values()))  # the step kernel: the file's one kernel
num = sass_csv.num
stalls = sass_csv.stall_columns(hdr)
total = sum(num(d, "Warp Stall Sampling (All Samples)") for d in ds) or 1
# sk_stamp's 64-bit reads (CS2R R, SR_GLOBALTIMERLO); the blocks' probe reads 32 bits (CS2R.32)
marks = [i for i, d in enumerate(ds) if "GLOBALTIMER" in d["Source"] and "CS2R.32" not in d["Source"]]
names = ["kernel start", "layer start -> 0 end", "1: QKV", "2: attention", "3: O",
         "4: MLP norm, router", "5: routing, gate_up", "6: down", "producer, tail"]


def summary(lo, hi):
    s = sum(num(ds[i], "Warp Stall Sampling (All Samples)") for i in range(lo, hi))
    st = collections.Counter()
    for i in range(lo, hi):
        for c in stalls:
            st[c] += num(ds[i], c)
    why = ", ".join(f"{k[6:]} {100 * v / total:.1f}" for k, v in st.most_common(top))
    return f"{100 * s / total:5.1f} % of samples  ({why})"


bounds = [0] + marks + [len(ds)]
for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
    name = names[n] if n < len(names) and len(marks) == 8 else f"region {n}"
    print(f"{name:22s} {hi - lo:6d} instructions  {summary(lo, hi)}")
    if not loops:
        continue
    ex = [num(ds[i], "Instructions Executed") for i in range(lo, hi)]
    run = sorted(e for e in ex if e > 0)
    floor = run[len(run) // 2] if run else 1  # the median: the region's once-a-layer code
    hot = [lo + j for j, e in enumerate(ex) if e >= 4 * floor]
    if not hot:
        continue
    a, b = hot[0], hot[-1] + 1
    print(f"{'':22s}   hot loops [{a - lo}, {b - lo}): {summary(a, b)}")
    print(f"{'':22s}   the rest:            {summary(lo, a)} + {summary(b, hi)}")
