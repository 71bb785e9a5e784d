#!/usr/bin/env python3
"""Per-kernel table of a decode step from ncu's CSV (scripts/device/kernel_table.sh).

Reads `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum` of
`gptoss bench latency --model synthetic:MODEL:layers=2 --batches B --enforce-eager`, cuts the
kernel list into forward steps (each starts with the token-resolve kernel), keeps the last
--steps decode steps, and takes per kernel position the median time and bytes. The 2-layer model
holds one sliding and one full layer; a 36-layer step is the embedding and tail kernels once plus
the two layers' kernels 18 times. Prints a markdown table and, given --step-ms (the graph-replayed
36-layer step time from bench latency), the bubble: step time minus the sum of kernel times."""
import argparse, csv, statistics, sys

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--layers", type=int, default=36)
ap.add_argument("--step-ms", type=float, default=0.0)
ap.add_argument("--title", default="")
a = ap.parse_args()

rows = {}
with open(a.csv, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    name = r["Kernel Name"].removeprefix("void ").split("(")[0].split("<")[0]
    k = rows.setdefault(int(r["ID"]), {"name": name})
    v = float(r["Metric Value"].replace(",", "")) if r["Metric Value"] not in ("", "n/a") else 0.0
    unit = r["Metric Unit"]
    if r["Metric Name"] == "gpu__time_duration.sum":
        k["us"] = v * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
    else:
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1, "KB": 1e3, "MB": 1e6,
                 "GB": 1e9}[unit]
        k["bytes"] = k.get("bytes", 0.0) + v * scale
kernels = [rows[i] for i in sorted(rows)]
steps, cur = [], None
for k in kernels:
    if k["name"].startswith("resolve_kernel"):
        cur = []
        steps.append(cur)
    if cur is not None:
        cur.append(k)
# The decode steps all have the same kernel list; a cut-off last step or the fill differ.
tail = steps[-(a.steps + 2):]
n = statistics.mode(len(s) for s in tail)
steps = [s for s in steps if len(s) == n][-a.steps:]
# the head is the token resolve and the embedding + first norm; the tail starts at the final norm
tail_first = next(i for i, k in enumerate(steps[0]) if k["name"].startswith("final_rows"))
print(f"## {a.title}\n")
print("| # | kernel | part | µs | MB | TB/s | × per 36-layer step | µs per step |")
print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
total = 0.0
reps_layer = a.layers / 2
for i in range(n):
    us = statistics.median(s[i].get("us", 0.0) for s in steps)
    by = statistics.median(s[i].get("bytes", 0.0) for s in steps)
    part = "head" if i < 2 else ("tail" if i >= tail_first else "layers")
    reps = reps_layer if part == "layers" else 1
    total += us * reps
    tbs = by / (us * 1e-6) / 1e12 if us > 0 else 0
    print(f"| {i} | {steps[0][i]['name'][:48]} | {part} | {us:.1f} | {by/1e6:.2f} | {tbs:.2f} | {reps:g} | {us*reps:.0f} |")
print(f"\nSum of kernel times for a {a.layers}-layer step: **{total/1000:.3f} ms**")
if a.step_ms > 0:
    print(f"Graph-replayed step (bench latency): {a.step_ms:.3f} ms; bubble = {a.step_ms - total/1000:.3f} ms "
          f"({100*(a.step_ms - total/1000)/a.step_ms:.1f} % of the step)")
