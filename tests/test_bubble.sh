#!/usr/bin/env bash
# scripts/device/bubble.py (the decode step's bubble from a CUPTI kernel timeline) on a timeline
# whose answer is known: 3 replayed steps of 20 kernels, each kernel 5 µs, 1 µs apart except two
# that overlap by 2 µs (PDL), plus a lone eager kernel that is not a step. Per step: 18 gaps of 1 µs
# and one overlap, so span = 100 + 18 − 2 = 116 µs, busy = 100 − 2 = 98 µs, bubble 18 µs (15.5 %),
# the sum of kernel times 100 µs.
set -eu
SRC=${2:-$(dirname "$0")/..}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/t.csv" <<'PY'
import sys
rows = ["start_ns,end_ns,correlation,graph,grid,block,name"]
t = 1_000_000
for step in range(3):
    for i in range(20):
        if i == 10:
            t -= 3000  # kernel 10 starts 2 µs before kernel 9 ends
        name = "_Z16moe_small_kernelILi1ELi0ELb1EEv8moe_args" if i % 2 else "nvjet_sm90_tss_64x8"
        rows.append(f"{t},{t + 5000},{7 + step},3,132,128,{name}")
        t += 6000
    t += 40000
rows.append(f"{t},{t + 1000},99,0,1,32,lonely_kernel")
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
out=$(python3 "$SRC/scripts/device/bubble.py" "$tmp/t.csv" --title test)
echo "$out" | head -6
row=$(echo "$out" | sed -n '5p')
# | span | busy | sum | bubble | bubble % | host gap |
echo "$row" | grep -q '^| 116.0 | 98.0 | 100.0 | 18.0 | 15.5 % | ' || {
  echo "test_bubble: unexpected summary row: $row"
  exit 1
}
echo "$out" | grep -q '^| moe_small_kernel | 10 | 50.0 |' || {
  echo "test_bubble: the per-kernel totals are wrong"
  exit 1
}
echo "test_bubble: passed"
