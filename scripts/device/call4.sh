#!/usr/bin/env bash
# Session 4 of 2026-12-01, the last call: the fused router (GPTOSS_ROUTER_FUSED=1, moe_router_route)
# — gpu_test_moe (bit for bit against gemv_bf16 + moe_route_split), gpu_test_cuda_forward with the
# flag on, then bench latency base vs fused at batch 1, 2, 4 (2 rounds, interleaved); then, with what
# time is left, the FP8 KV accuracy after the sink fix (gpu_test_cuda_forward --kv-accuracy).
set -uo pipefail
out=${OUT:-/tmp/call4-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
sum="$out/call4-summary.md"
echo "# call 4, commit $(cat .devcarry/commit.txt)" >"$sum"
t() { # name timeout env... -- args
  local name=$1 lim=$2
  shift 2
  timeout "$lim" env "$@" >"$out/$name.log" 2>&1
  echo "- $name: exit $? — $(grep -E 'checks passed|FAILED' "$out/$name.log" | tail -1)" >>"$sum"
}
t moe 90 .devcarry/bin/gpu_test_moe
grep -E "^router_route" "$out/moe.log" | sed 's/^/  /' >>"$sum"
t forward_rf 150 GPTOSS_ROUTER_FUSED=1 .devcarry/bin/gpu_test_cuda_forward --skip-real --skip-fp8
OUT="$out/v" VARIANTS="base=- rf=GPTOSS_ROUTER_FUSED=1" BATCHES=1,2,4 ROUNDS=2 \
  bash scripts/device/variants.sh >"$out/v.txt" 2>&1
tail -12 "$out/v.txt" >>"$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
cat "$sum"
timeout 150 .devcarry/bin/gpu_test_cuda_forward --kv-accuracy >"$out/kvacc.log" 2>&1
echo "## --kv-accuracy: exit $?" >>"$sum"
grep -E "^\|" "$out/kvacc.log" >>"$sum"
tar czf "$out/call4-logs.tgz" -C "$out" moe.log forward_rf.log kvacc.log res 2>/dev/null
rm -rf "$out/v" "$out/res" "$out"/*.log "$out/v.txt"
cat "$sum"
