#!/usr/bin/env bash
# The next lease's first call (~8 min), as session 19 planned it: scripts/device/gemv_mma.sh (the
# tensor-core QKV and O for 1-16 tokens and its fused forms: tests, bench with the block shapes,
# forward tests, decode variants, the steps by kernel) and scripts/device/layer_probe.sh (the
# persistent-kernel question), one after the other into $OUT/gemv_mma and $OUT/probe, their
# summaries joined in $OUT/summary.md. The predictions and the decision rules are in the two
# scripts. Needs .devcarry (scripts/device/prepare.sh; the trace library for the steps by kernel).
set -uo pipefail
out=${OUT:-/tmp/s20c1-out}
mkdir -p "$out"
OUT=$out/gemv_mma bash scripts/device/gemv_mma.sh >"$out/gemv_mma.log" 2>&1
OUT=$out/probe bash scripts/device/layer_probe.sh >"$out/probe.log" 2>&1
cat "$out/gemv_mma/summary.md" "$out/probe/summary.md" >"$out/summary.md"
cat "$out/summary.md"
# what comes back is limited to ~8 files: the rest in one archive
(cd "$out" && tar czf extra.tgz gemv_mma.log probe.log probe/logs 2>/dev/null && rm -rf gemv_mma.log probe.log probe/logs)
