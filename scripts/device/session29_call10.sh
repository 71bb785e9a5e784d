#!/usr/bin/env bash
# Session 29, call 10 (~1.5 min): the head's step kernel after the review (the measurement switches
# removed, the sinks' L2 prefetch bounded by the head count): the (h) checks against the layer loop.
# Expected: pass, with call 8's figures (relL2 2.7e-3 / 1.8e-3, top-1 equal).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c10 "session 29 call 10: the head's step kernel against the layer loop"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
t | tee -a "$sum"
rm -rf "$out"/logs
