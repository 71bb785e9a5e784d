#!/usr/bin/env bash
# Session 38, call 2 (~6-9 min; any card): issue 13's evidence for PDL (on every kernel, "proven
# race-free": compute-sanitizer racecheck and synccheck clean, and the seeded forward test giving
# identical output across 20 runs with and without PDL). Prepare with
#   SLIM=all bash scripts/device/prepare.sh
# 1. gpu_test_cuda_forward --digest 20 with GPTOSS_PDL=0 and with =1, the same seed: each process
#    checks its 20 runs (fresh backends, graphs on, decode at 1 and 8 tokens on a 2-layer 20b)
#    hash alike; this script then compares the two digests. Prediction: equal (every kernel's
#    arithmetic is in a fixed order; PDL changes when blocks start, not what they compute). A
#    difference names a race PDL opens: the next step is to bisect by kernel (pdl_launch_attr).
# 2. compute-sanitizer racecheck and synccheck (scripts/device/sanitize.sh, PDL on) over the tests
#    that drive the decode kernels at small sizes: gpu_test_attn_stream --quick, gpu_test_moe,
#    gpu_test_norm, gpu_test_rope_kv, gpu_test_gemv, gpu_test_sampling. Note: racecheck sees shared
#    memory hazards only, so it cannot see a PDL race (global memory between kernels): the digest is
#    the evidence that can. Prediction: clean.
# 3. 120b bench latency at batch 1 and 8 with GPTOSS_PDL=0 / 1 (decode_variants, two rounds).
# 4. (added in session 38, d6404ee) GPTOSS_ATTN_PDL=1, a trial: the one-token routed attn_stream
#    kernel launched with PDL as well as cooperatively; its producer fills the ring with QKV's
#    weights (up to 16 stages, 184 KB an SM, ~24 MB of QKV's 29.5 MB at 120b) before the consumers'
#    griddepcontrol.wait, while the MoE down before it finishes. gpu_test_attn_stream's router case
#    runs it behind a kernel that writes h ~50 µs late (its h poisoned before). Prediction: the
#    cooperative launch's fixed cost (3.2 µs measured alone) partly hidden and phase 1 shorter by
#    the bytes landed early: 1-3 µs a layer, +1.5 to +4 % at 120b batch 1 (20b alike). Its digest
#    (with GPTOSS_PDL=1 too) must equal the others.
# Rule: PDL becomes the default if the digests are equal, the sanitizer is clean, and it gains
# at batch 1 beyond the rounds' spread. GPTOSS_ATTN_PDL becomes the default (with PDL on) if its
# test case passes, its digest is the same, and it gains beyond the spread at 120b batch 1 without
# a loss at 20b; else it is removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s38c2 "session 38 call 2: PDL's evidence (digests, sanitizer) and its speed"
test_table
run_logged attn_stream 120 $bin/gpu_test_attn_stream
grep -E "router by columns|FAILED|PDL" "$out/logs/attn_stream.log" | head -8 | tee -a "$sum"
seed=${DIGEST_SEED:-424242}
GPTOSS_PDL=0 run_logged digest_pdl0 200 $bin/gpu_test_cuda_forward --digest 20 --seed $seed
GPTOSS_PDL=1 run_logged digest_pdl1 200 $bin/gpu_test_cuda_forward --digest 20 --seed $seed
GPTOSS_PDL=1 GPTOSS_ATTN_PDL=1 run_logged digest_apdl 200 $bin/gpu_test_cuda_forward --digest 20 --seed $seed
d0=$(grep -E "^digest:" "$out/logs/digest_pdl0.log" | awk '{print $2}')
d1=$(grep -E "^digest:" "$out/logs/digest_pdl1.log" | awk '{print $2}')
d2=$(grep -E "^digest:" "$out/logs/digest_apdl.log" | awk '{print $2}')
grep -E "^digest:|FAILED" "$out/logs/digest_pdl0.log" "$out/logs/digest_pdl1.log" "$out/logs/digest_apdl.log" | tee -a "$sum"
if [ -n "$d0" ] && [ "$d0" = "$d1" ]; then echo "digests equal: $d0" | tee -a "$sum"; else echo "DIGESTS DIFFER: '$d0' vs '$d1'" | tee -a "$sum"; fi
if [ -n "$d0" ] && [ "$d0" = "$d2" ]; then echo "attn PDL digest equal: $d2" | tee -a "$sum"; else echo "ATTN PDL DIGEST DIFFERS: '$d0' vs '$d2'" | tee -a "$sum"; fi
ROUNDS=2 decode_variants "pdl0=- pdl1=GPTOSS_PDL=1 apdl=GPTOSS_ATTN_PDL=1 both=GPTOSS_ATTN_PDL=1+GPTOSS_PDL=1" 120b:1 20b:1
ROUNDS=2 decode_variants "pdl0=- pdl1=GPTOSS_PDL=1" 120b:8
if before 420; then
  OUT=$out/sanitize TOOLS="racecheck synccheck" LIMIT=60 \
    TESTS="gpu_test_attn_stream gpu_test_moe gpu_test_norm gpu_test_rope_kv gpu_test_gemv gpu_test_sampling" \
    bash scripts/device/sanitize.sh 2>&1 | grep -E "^- " | tee -a "$sum"
fi
finish_call
