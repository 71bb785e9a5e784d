#!/usr/bin/env python3
"""The decode step's bubble from a CUPTI kernel timeline (tools/cupti_trace.c's CSV).

Every kernel of one cudaGraphLaunch shares the launch's correlation id, so the timeline falls into
steps. For each replayed step (a launch of at least MIN_KERNELS kernels):
  span   first kernel start to last kernel end;
  busy   the union of the kernels' [start, end) intervals (overlapping kernels, e.g. under PDL,
         count once);
  bubble span - busy: the time inside the step when no kernel of it runs.
The host's time between steps (end of one launch's last kernel to the next one's first) is shown
apart. Then a per-kernel table of the median step: each kernel's median duration and the median gap
before it. Usage: bubble.py TRACE.csv [--title T] [--min-kernels N]
"""
import csv
import re
import statistics
import sys


def short(name):
    m = re.match(r"_Z(\d+)(\w+)", name)
    if m:
        n = int(m.group(1))
        return m.group(2)[:n]
    return name.split("(")[0]


def union(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    title, min_kernels = "decode step", 20
    if "--title" in args:
        i = args.index("--title")
        title = args[i + 1]
        del args[i : i + 2]
    if "--min-kernels" in args:
        i = args.index("--min-kernels")
        min_kernels = int(args[i + 1])
        del args[i : i + 2]
    groups, in_graphs = {}, []
    with open(args[0]) as f:
        for row in csv.DictReader(f):
            k = (int(row["start_ns"]), int(row["end_ns"]), short(row["name"]))
            groups.setdefault(int(row["correlation"]), []).append(k)
            if int(row["graph"]):
                in_graphs.append(k)
    steps = [sorted(g) for g in groups.values() if len(g) >= min_kernels]
    if not steps and in_graphs:
        # a CUPTI that gives graph kernels their own correlation ids: cut the graph kernels'
        # timeline where no kernel runs for SPLIT_NS (the host's wait between steps)
        SPLIT_NS = 20000
        in_graphs.sort()
        cur = [in_graphs[0]]
        for k in in_graphs[1:]:
            if k[0] - max(e for _, e, _ in cur[-4:]) > SPLIT_NS:
                steps.append(cur)
                cur = []
            cur.append(k)
        steps.append(cur)
        steps = [g for g in steps if len(g) >= min_kernels]
    steps.sort(key=lambda g: g[0][0])
    if not steps:
        print(f"no launch with >= {min_kernels} kernels in {args[0]}")
        return 1
    # the most common shape (kernel count) is the replayed decode step
    shape = statistics.mode(len(g) for g in steps)
    steps = [g for g in steps if len(g) == shape]
    spans = [g[-1][1] - g[0][0] for g in steps]
    busies = [union([(s, e) for s, e, _ in g]) for g in steps]
    sums = [sum(e - s for s, e, _ in g) for g in steps]
    between = [b[0][0] - a[-1][1] for a, b in zip(steps, steps[1:])]
    med = statistics.median
    span, busy = med(spans), med(busies)
    print(f"## {title}: {len(steps)} steps of {shape} kernels (CUPTI timeline)\n")
    print("| span µs | kernels busy µs | sum of kernel times µs | bubble µs | bubble % of span | host gap between steps µs |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    gap = f"{med(between) / 1e3:.1f}" if between else "-"
    print(f"| {span / 1e3:.1f} | {busy / 1e3:.1f} | {med(sums) / 1e3:.1f} | {(span - busy) / 1e3:.1f} "
          f"| {100 * (span - busy) / span:.1f} % | {gap} |\n")
    # per kernel position: median duration and the gap before it
    print("| # | kernel | µs | gap before µs |")
    print("| ---: | --- | ---: | ---: |")
    for i in range(shape):
        d = med(g[i][1] - g[i][0] for g in steps)
        gb = med(g[i][0] - g[i - 1][1] for g in steps) if i else 0
        print(f"| {i} | {steps[0][i][2]} | {d / 1e3:.2f} | {gb / 1e3:.2f} |")
    by_name = {}
    for i in range(shape):
        by_name.setdefault(steps[0][i][2], []).append(med(g[i][1] - g[i][0] for g in steps))
    print("\n| kernel | per step | µs per step | share of busy |")
    print("| --- | ---: | ---: | ---: |")
    for n, ds in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {n} | {len(ds)} | {sum(ds) / 1e3:.1f} | {100 * sum(ds) / busy:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
