#!/usr/bin/env bash
# Session 29, call 2 (~8 min): the step kernel's first run (step_kernel.h; GPTOSS_STEP_KERNEL=1,
# off by default).
#  (1) gpu_test_cuda_forward --step-kernel: the kernel against the layer loop (20b x 3 layers,
#      120b x 2 layers; eager and graphs), and that it ran. On a failure the rest is skipped but
#      the test_attn_stream binary still runs (the phases' header changed: CG forms of the norm).
#  (2) decode at batch 1, the loop against the kernel, two interleaved rounds: 120b, 20b.
#      Prediction (before any run; H100): the layer's ~70 µs (session 28: attention 35.7, router
#      8.5, MoE 25.9) -> ~50-58 µs: the next layer's QKV rows stream under this layer's router and
#      experts, four launches a layer become six grid barriers; 120b batch 1 +10-25 % (337 ->
#      370-420 tok/s), 20b +10-25 %. Wrong if below +5 %: then the by-phase probe is next.
#      Decision: it stays behind its switch this session whatever the figure (one run); the
#      default changes only after the whole GPU test suite passes with it on and a second call
#      confirms the gain.
#  (3) the whole forward test with GPTOSS_STEP_KERNEL=1 (the CPU reference, the transformers
#      fixture, real width) and test_attn_stream (its kernel shares the changed header).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c2 "session 29 call 2: the step kernel's first run"
test_table
run_logged step_kernel 300 $bin/gpu_test_cuda_forward --step-kernel
ok=$?
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
run_logged attn_stream 200 $bin/gpu_test_attn_stream
if [ $ok -eq 0 ]; then
  ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
  test_table
  run_logged forward_step_on 400 env GPTOSS_STEP_KERNEL=1 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "seed|summary" "$out/logs/forward_step_on.log" | head -6 | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs 2>/dev/null) &&
  rm -rf "$out"/logs && mv /tmp/logs.tgz "$out/"
