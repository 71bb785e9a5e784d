#!/usr/bin/env bash
# Session 37, call 1 (~6 min; any card). Prepare with
#   SLIM=all bash scripts/device/prepare.sh
# (all test binaries: the GPU tests run at the end).
# 1. GPTOSS_ROUTER_COLS=1 (written in session 36, never run): the layer loop at one token with the
#    router by columns in attn_stream's O epilogue (attn_stream_kernel<1, true>: h + o written
#    back, the block's share of its sum of squares, the router's sums over the block's rows by
#    their columns of a transposed router, 2^-24 fixed point in 8 groups) and route_sums (one
#    block: the sums scaled by 1 / rms, the top-k and grouping of moe_route_small, the MoE's
#    input row), in place of gemv_norm_route (7.7 µs a layer on the H100, session 36's CUPTI
#    table). Correctness first: gpu_test_cuda_forward whole with the switch on (every forward
#    check takes it wherever a step is one token), then every GPU test program (the plain
#    attn_stream kernels are instruction for instruction session 34's: the routed one is compiled
#    in its own translation unit, attn_stream_routed.cu).
#    Prediction: attn_stream +0.8 µs a layer (the step kernel's O grew 0.8 µs with the same
#    epilogue), route_sums ~3 µs against gemv_norm_route's 7.7: -4 µs a layer, 120b decode at
#    batch 1 +4 to +6 % (20b +5 to +7 %: its layers are a larger share).
#    Rule: the default flips to on if the switch gains more than 1 % at 120b batch 1, does not
#    lose at 20b, and every GPU test passes with it; else it stays off (or goes, if it loses).
# 2. The forward test's (c) with session 36's failing seed: the CPU's and the GPU's experts of the
#    row off by 9.9e-2 (GPTOSS_ROUTE_DUMP, new in session 36).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s37c1 "session 37 call 1: the router by columns in attn_stream's O; the failing seed's experts"
test_table
GPTOSS_ROUTER_COLS=1 run_logged forward_rcols 300 $bin/gpu_test_cuda_forward
grep -E "^summary|FAILED" "$out/logs/forward_rcols.log" | head -12 | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- rcols=GPTOSS_ROUTER_COLS=1" 120b:1 20b:1
run_logged forward_seed 240 $bin/gpu_test_cuda_forward --seed 10216668540260478008 --skip-tp
grep -E "20b x 2 layers|layer . token" "$out/logs/forward_seed.log" | tee -a "$sum"
gpu_tests_table
finish_call
