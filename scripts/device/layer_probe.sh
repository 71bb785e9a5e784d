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
# Measured (session 20): kernels 68.7-73.1, pdl 68.3, persist 64.1, prefetch/preload no better, a
# barrier 1.2-1.7 us: persist 6.7 % under kernels, undecided -- but every form read its weights
# after the boundary (or a few rows before it), so each phase still started its stream cold.
# Session 21 adds two forms (one block an SM): stream (a producer warp streams the block's rows of
# every phase through a 24-stage shared-memory ring with bulk copies, never waiting for a barrier,
# only for a free stage) and routed (the same, gate_up's rows held until the router's barrier).
# Prediction (session 21, before the run): stream 28-31 us a layer (the bytes at ~3.6-3.9 TB/s: the
# ring's ~140 KB an SM of requests keeps DRAM busy ~4 us into each barrier, longer than a barrier
# plus the input's staging), routed 3-4 us more (DRAM idles from the router's start until gate_up's
# first rows land). Decision: routed >= 30 % under kernels (<= ~48 us) -> build the persistent layer
# kernel on this structure (a producer streaming each phase's weights ahead of the consumers);
# otherwise record where the stream form's time goes per phase.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/lp-out "the layer probe (persistent kernel vs launches)"
test_table
run_logged test_layer_probe 120 $bin/gpu_test_layer_probe
timeout 300 $bin/gpu_test_layer_probe --bench 2>&1 | grep -E '^\||^A batch' | tee -a "$sum"
t | tee -a "$sum"
