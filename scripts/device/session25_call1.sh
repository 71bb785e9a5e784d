#!/usr/bin/env bash
# The next session's first call (~4 min), written in session 24: why dense_mma streams the O
# projection at ~1.7 TB/s (H100) when the card's plain read gives ~3.0.
#  (1) gpu_test_dense_mma (its checks) and --bench: dense_mma against cuBLASLt, then O's bytes read
#      alone with dense_mma's geometry in four patterns (test_dense_mma.cu's read_pattern_kernel):
#      its 16-byte pieces (8 rows x 64 bytes a warp load, rows 8 KB apart) by plain loads and by
#      cp.async; one row at a time in 512-byte warp loads; the tile's 16 adjacent rows as one range.
#  (2) gpu_test_layer_probe --bench (the stream forms and the ring alone again, on whatever card
#      comes: if an H200, the first H200 figures for both), with the new "stream big" form (each
#      block's rows of a phase contiguous, 3-4 rows a 23-24 KB copy; unrun). Prediction (H100):
#      stream big 45-50 µs a layer against stream's 57.6 (the ring alone: ~42 µs at the stream's
#      ~6-8 KB copies, ~37 at 16-32 KB); its checks (bits equal to the launches') pass.
# Prediction (session 24, before any run; H100): the pieces ~1.7-1.9 TB/s by either path (what
# dense_mma reaches), one row at a time ~2.6-2.9, the one range ~2.9-3.0. Decision: rows and range
# well above the pieces -> the runs are the cost: dense_mma's next form copies 512-byte row runs
# into a row-major tile (padded rows) and reads its fragments from there; all four alike -> the
# runs are not the cost, and the next look is the kernel's ramp and tail (ncu).
#  (3) dense_ring (built after session 24's closing call, unrun: the whole-row form, GPTOSS_DENSE_MMA=3
#      for O and QKV): its checks are in (1); gpu_test_cuda_forward under =3; the step with the
#      default (dense_mma for O) against =3 and =0, 120b decode 2, 4, 8 and 20b 4, 8, two rounds.
#      Prediction (session 24, H100): alone O 13.9 -> 10-12 µs, QKV 17.3 -> 11.5-13.5 (cuBLASLt
#      15.7); the step +3-5 % over the default at batch 2, +2-4 % at 4, +1.5-3 % at 8. Decision: at
#      or above the default everywhere beyond the spread -> the default for 2-8 tokens.
# Needs .devcarry (scripts/device/prepare.sh, then gzip). Prints $OUT/summary.md.
set -uo pipefail
root=${OUT:-/tmp/s25c1}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 25 call 1: dense_mma's read patterns"
test_table
run_logged test_dense_mma 60 $bin/gpu_test_dense_mma
echo -e "\n## gpu_test_dense_mma --bench $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_dense_mma --bench 2>&1 | grep -E '^\||checks|^O' | tee -a "$sum"
echo -e "\n## gpu_test_layer_probe --bench $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_layer_probe --bench 2>&1 | grep -E '^\||^A batch|^The ring|checks' | tee -a "$sum"
GPTOSS_DENSE_MMA=3 run_logged test_cuda_forward_ring 240 $bin/gpu_test_cuda_forward
V="default=- ring=GPTOSS_DENSE_MMA=3 off=GPTOSS_DENSE_MMA=0"
ROUNDS=2 decode_variants "$V" 120b:2,4,8
ROUNDS=2 decode_variants "$V" 20b:4,8
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
