#!/usr/bin/env bash
# Session 9 (2026-12-03), call 1 (~7 min): the warp-specialised wgmma MoE (moe_wgmma_ws.cu,
# GPTOSS_MOE_WGMMA=2). gpu_test_moe (its bound against the CPU, both token tiles), the experts alone
# (gpu_test_moe --bench: kind 1 and kind 2 rows side by side), the forward test with it on, then
# bench latency with it off and on, interleaved (decode 1024, prefill 1k and 8k). Needs .devcarry
# (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/s9a-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 9, call 1: the warp-specialised wgmma MoE"
run_test() { # LOG LIMIT CMD...
  local log=$1 lim=$2; shift 2
  timeout "$lim" "$@" >"$out/logs/$log.log" 2>&1
  local rc=$?
  echo "| $log | $(res $rc) | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/$log.log" | tail -1) | $(t) |" | tee -a "$sum"
  grep -E 'FAILED|failed|error' "$out/logs/$log.log" | head -6 | sed 's/^/    /' | tee -a "$sum"
  return $rc
}
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_test moe 90 $bin/gpu_test_moe
ok=$?
grep -E "wgmma|rel err" "$out/logs/moe.log" | grep -B1 -A1 "ws" | head -30 | sed 's/^/    /' | tee -a "$sum"
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_moe --bench >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "T=(256|1024|4096|16384)" | grep -E "wgmma" | tee -a "$sum"
if [ "${SPIN:-0}" = 1 ]; then # the hand-offs by test_wait loops
  echo "with GPTOSS_MOE_WS_SPIN=1:" | tee -a "$sum"
  GPTOSS_MOE_WS_SPIN=1 timeout 120 $bin/gpu_test_moe --bench >"$out/logs/bench-spin.log" 2>&1
  grep -E "experts" "$out/logs/bench-spin.log" | grep -E "T=(256|1024|4096|16384)" | grep -E "wgmma ws" | tee -a "$sum"
fi
# Only when the warp-specialised kernel beats kind 1 at T = 1024 (64-token tiles), or FULL=1.
ws=$(grep -E "T=1024 large wgmma ws n64" "$out/logs/bench.log" 2>/dev/null | awk -F'|' '{print $3+0}')
k1=$(grep -E "T=1024 large wgmma n64" "$out/logs/bench.log" 2>/dev/null | awk -F'|' '{print $3+0}')
echo "T=1024 n64: kind 1 $k1 us, ws $ws us" | tee -a "$sum"
faster=$(python3 -c "print(1 if ${ws:-1e9} < ${k1:-0} else 0)")
if [ $ok -eq 0 ] && { [ "$faster" = 1 ] || [ "${FULL:-0}" = 1 ]; }; then
  run_test forward_ws 150 env GPTOSS_MOE_WGMMA=2 $bin/gpu_test_cuda_forward --skip-tp --skip-real
  grep -E "^summary:" "$out/logs/forward_ws.log" | head -3 | sed 's/^/    /' | tee -a "$sum"
  echo -e "\n## bench latency, wgmma (kind 1) vs warp-specialised (kind 2) $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${WS_BATCHES:-256,1024} PREFILL=${WS_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-2} \
    VARIANTS="wgmma=- ws=GPTOSS_MOE_WGMMA=2" bash scripts/device/variants.sh | tee -a "$sum"
fi
if [ "${NCU:-0}" = 1 ]; then # stall reasons of the warp-specialised kernel (first gate_up launch, T = 256)
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_ws_kernel" --launch-skip ${NCU_SKIP:-0} --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section MemoryWorkloadAnalysis $bin/gpu_test_moe --bench >"$out/ncu-ws.txt" 2>&1 || echo "ncu failed ($?)"
  grep -E "Duration|Throughput|Issue|Eligible|Active Warps|Stall|stall|Warp Cycles|No Eligible" "$out/ncu-ws.txt" | head -40 | tee -a "$sum"
  # where the warps wait: stall samples per SASS instruction, the top 30
  timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_ws_kernel" --launch-skip ${NCU_SKIP:-0} --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    $bin/gpu_test_moe --bench >"$out/ncu-ws-sass.csv" 2>&1 || echo "ncu sass failed ($?)"
  python3 - "$out/ncu-ws-sass.csv" <<'PY' | tee -a "$sum"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 5]
hdr = next((i for i, r in enumerate(rows) if any("Source" == c.strip('"') for c in r)), None)
if hdr is None:
    print("no source table"); sys.exit()
h = rows[hdr]
def col(name):
    return next((i for i, c in enumerate(h) if c.startswith(name)), None)
src, smp = col("Source"), col("Warp Stall Sampling (All")
if src is None or smp is None:
    print("columns:", h[:30]); sys.exit()
body = rows[hdr + 1:]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[smp]) for r in body) or 1
for r in sorted(body, key=lambda r: -num(r[smp]))[:30]:
    print(f"{100 * num(r[smp]) / tot:5.1f}%  {r[src][:110]}")
PY
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
