#!/usr/bin/env bash
# Issue 13's proof that the kernels are race-free with PDL on every launch: compute-sanitizer's
# racecheck (shared-memory hazards), synccheck (barriers) and memcheck (out-of-bounds and misaligned
# accesses) over the GPU tests that drive every kernel, with GPTOSS_PDL=1 and the fused split merge
# on (GPTOSS_ATTN_FUSED_MERGE=1). The sanitizer serialises and slows kernels ~10-100x, so the tests
# run their small configurations: gpu_test_attention, gpu_test_sampling, gpu_test_masked_sampling,
# gpu_test_moe, gpu_test_norm, gpu_test_rope_kv, gpu_test_gemv, and gpu_test_cuda_forward
# --skip-real --skip-fp8. Prints one line per (tool, test): the sanitizer's error summary.
# Needs .devcarry (scripts/device/prepare.sh); the device call: carry [".devcarry"], command
# `bash scripts/device/sanitize.sh` (TOOLS="racecheck synccheck memcheck", TESTS to narrow it,
# LIMIT seconds per run, 150).
set -uo pipefail
out=${OUT:-/tmp/sanitize-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
export GPTOSS_PDL=1 GPTOSS_ATTN_FUSED_MERGE=1
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$cs" ] || { echo "compute-sanitizer not found"; exit 1; }
sum="$out/sanitize-summary.md"
echo "# compute-sanitizer, PDL on, commit $(cat .devcarry/commit.txt 2>/dev/null)" | tee "$sum"
tests=${TESTS:-"gpu_test_attention gpu_test_sampling gpu_test_masked_sampling gpu_test_moe gpu_test_norm gpu_test_rope_kv gpu_test_gemv gpu_test_cuda_forward"}
for tool in ${TOOLS:-racecheck synccheck memcheck}; do
  for t in $tests; do
    args=()
    [ "$t" = gpu_test_cuda_forward ] && args=(--skip-real --skip-fp8)
    [ "$t" = gpu_test_attn_stream ] && args=(--quick)
    log="$out/logs/$tool-$t.log"
    timeout "${LIMIT:-150}" "$cs" --tool "$tool" --error-exitcode 9 ".devcarry/bin/$t" "${args[@]}" \
      >"$log" 2>&1
    rc=$?
    res=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    echo "- $tool $t: exit $rc; ${res:-no summary (timeout or crash: see the log)}" | tee -a "$sum"
  done
done
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
