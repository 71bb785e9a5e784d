#!/usr/bin/env bash
# Issue 13's megakernel question, measured before anything is built (~1 min): gpu_test_layer_probe
# (tests/gpu/test_layer_probe.cu) checks its five forms and times, per batch-1-sized layer (six
# dependent GEMVs with a 120b layer's 108 MB, 36 layers of distinct weights), one launch a phase in
# a CUDA graph (kernels), the same with PDL and each kernel's first rows requested into L2 before
# its wait (pdl), one persistent kernel with a grid barrier between phases (persist), the same
# requesting each block's next-phase rows into L2 before the barrier (prefetch), the same loading
# each warp's first next-phase chunks into registers before the barrier (preload), and the barriers
# alone, at 2 and 4 blocks an SM; then the same per phase.
# Prediction (session 19, before any run): the layer's bytes take 25.6 us at 4.2 TB/s; kernels
# ~40-45 us a layer (each launch's ramp and tail ~2-3 us, as the model's small kernels show),
# persist ~33-38 (a barrier ~1-1.5 us: an atomic and an L2 round trip per block), prefetch 1-3 us
# under persist, preload 2-4 us under persist; pdl within 3 % of kernels (session 8: no launch
# gaps to hide under graphs). Decision: the best persistent form >= 15 % under kernels -> a
# persistent layer kernel is worth building (MoE phases first: they are ~45 % of the batch-1
# layer); < 5 % -> drop that route for issue 13 and say so in the NOTES. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/lp-out "the layer probe (persistent kernel vs launches)"
test_table
run_logged test_layer_probe 120 $bin/gpu_test_layer_probe
timeout 300 $bin/gpu_test_layer_probe --bench 2>&1 | grep -E '^\||^A batch' | tee -a "$sum"
t | tee -a "$sum"
