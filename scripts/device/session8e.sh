#!/usr/bin/env bash
# Session 8 (2026-12-03), call 5: the down projection launched to overlap gate_up
# (GPTOSS_MOE_EARLY_DOWN=1, moe.h) against main's defaults (early O and the norm in the router's
# kernel at one token), and the norm in the router's kernel off; gpu_test_moe (its bytes), the
# forward test with it on, ncu's DRAM-side and per-SM counters of moe_small_kernel at batch 1, and
# the batch-1 timeline with it on. Needs .devcarry (prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s8e-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 8, call 5: the early down projection, ncu counters"
timeout 150 $bin/gpu_test_moe >"$out/logs/moe.log" 2>&1
echo "| gpu_test_moe | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/moe.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAIL|differ|changes' "$out/logs/moe.log" | head -5 | tee -a "$sum"
echo -e "\n## bench latency variants $(t)" | tee -a "$sum"
OUT="$out" ROUNDS=${ROUNDS:-3} MODEL=120b BATCHES=${BATCHES:-1,2,4,8,64} \
  VARIANTS=${VARIANTS:-"base=- ed=GPTOSS_MOE_EARLY_DOWN=1 no_nr=GPTOSS_NORM_ROUTE=0 fm=GPTOSS_ATTN_FUSED_MERGE=1 ed_fm=GPTOSS_MOE_EARLY_DOWN=1+GPTOSS_ATTN_FUSED_MERGE=1"} \
  bash "$(dirname "$0")/variants.sh" 2>&1 | tee -a "$sum"
GPTOSS_MOE_EARLY_DOWN=1 timeout 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
echo "| forward --skip-tp --skip-real, MOE_EARLY_DOWN=1 | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/fwd.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAILED|failed' "$out/logs/fwd.log" | head -6 | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo -e "\n## ncu moe_small_kernel, batch 1 (2-layer 120b, eager) $(t)" | tee -a "$sum"
timeout 150 "$ncu" --clock-control none -k regex:moe_small --launch-skip 8 --launch-count 4 --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_elapsed.max,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum \
  $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" --enforce-eager \
  --decode-steps 3 --warmup 1 >"$out/ncu-b1.csv" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
python3 - "$out/ncu-b1.csv" <<'PY' | tee -a "$sum"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no ncu rows"); sys.exit()
h = rows[0]; idx = {k: i for i, k in enumerate(h)}
by = {}
for r in rows[1:]:
    if "Metric Name" not in idx: break
    key = (r[idx["ID"]], r[idx["Kernel Name"]][:40])
    by.setdefault(key, {})[r[idx["Metric Name"]]] = r[idx["Metric Value"]]
for (i, k), m in by.items():
    print(f"- launch {i} {k}:")
    for n in sorted(m): print(f"    {n} = {m[n]}")
PY
GPTOSS_MOE_EARLY_DOWN=1 OUT="$out/bubble" BATCHES=1 bash "$(dirname "$0")/bubble.sh" >/dev/null 2>&1
head -8 "$out/bubble/bubble-b1.md" | tail -3 | tee -a "$sum"
grep -E '^\| [0-9]+ \|' "$out/bubble/bubble-b1.md" | sed -n 1,22p | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
