#!/usr/bin/env bash
# Session 18, call 1 (~10 min): every GPU test binary (route_small_block now takes the moe_routing:
# the default router kernel's and moe_route_small's code changed), then the tensor-core router's
# measurement as scripts/device/router_mma.sh (its prediction there: the router at 8 tokens
# 13.3 -> ~7 us a layer, 120b decode batch 8 +3 %). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s18c1-out "session 18 call 1: GPU tests; the tensor-core router"
gpu_tests_table
echo -e "\n## router_mma $(t)" | tee -a "$sum"
OUT=$out/rm bash scripts/device/router_mma.sh >/dev/null 2>&1
sed 1,3d "$out/rm/summary.md" | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs tests rm 2>/dev/null && rm -rf "$out/logs" "$out/tests" "$out/rm"
