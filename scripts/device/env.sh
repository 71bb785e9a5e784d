# Sourced by every scripts/device/*.sh that runs on the GPU machine: the shared libraries and the
# tokenizer that scripts/device/prepare.sh carries in .devcarry (run from the repository root).
export LD_LIBRARY_PATH="$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}"
[ -d "$PWD/.devcarry/cache" ] && export GPTOSS_CACHE="${GPTOSS_CACHE:-$PWD/.devcarry/cache}"
# The carry holds the tokenizer gzipped (the carry's size limit): unpacked once, so that the tests
# that need it (gpu_test_masked_sampling) run instead of skipping, as they did in sessions 17-20.
tok=$PWD/.devcarry/cache/tokenizer/tokenizer.json
[ -f "$tok.gz" ] && [ ! -f "$tok" ] && gunzip -kf "$tok.gz"
# A test's exit status as a word for the summaries.
res() { case $1 in 0) echo PASS ;; 77) echo SKIP ;; *) echo "FAIL($1)" ;; esac; }
# summary_header FILE TITLE: the summary's first lines (title, GPU, commit carried), also printed.
summary_header() {
  {
    echo "# $2"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "commit $(cat .devcarry/commit.txt 2>/dev/null), $(nvidia-smi --list-gpus | wc -l) GPU(s)"
  } | tee "$1"
}
# run_logged LOG LIMIT CMD...: runs CMD under a time limit into $out/logs/LOG.log, adds a row
# (result, checks, seconds since $start) to $sum and prints its failures; returns CMD's status.
run_logged() {
  local log=$1 lim=$2; shift 2
  timeout "$lim" "$@" >"$out/logs/$log.log" 2>&1
  local rc=$?
  echo "| $log | $(res $rc) | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/$log.log" | tail -1) | ($(($(date +%s) - start)) s) |" | tee -a "$sum"
  grep -E 'FAILED|failed|error' "$out/logs/$log.log" | head -6 | sed 's/^/    /' | tee -a "$sum"
  return $rc
}
# device_script DEFAULT_OUT TITLE: a device script's common start: out ($OUT, else DEFAULT_OUT, with
# logs/ made), bin (the carried binaries), sum (the summary, headed with TITLE) and start (for t).
device_script() {
  out=${OUT:-$1}
  mkdir -p "$out/logs"
  bin=.devcarry/bin
  sum="$out/summary.md"
  start=$(date +%s)
  summary_header "$sum" "$2"
}
# t: seconds since device_script, for the summary's section lines.
t() { echo "($(($(date +%s) - start)) s)"; }
# before S: true while fewer than S seconds have passed since device_script (a call's later steps
# run only if the device time allows them).
before() { [ $(($(date +%s) - start)) -lt "$1" ]; }
# test_table: the header of the table run_logged's rows go into.
test_table() { echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"; }
# decode_by_kernel B...: for each batch B, a 120b decode run under the CUPTI kernel-timeline library
# (.devcarry/lib/libgptoss_trace.so) and bubble.py's table of the median graph step by kernel, into
# $sum and $out/bubble-bB.md (scripts/device/bubble.sh says more).
decode_by_kernel() {
  local lib=$PWD/.devcarry/lib/libgptoss_trace.so B
  for B in "$@"; do
    echo -e "\n## decode batch $B, the median graph step by kernel $(t)" | tee -a "$sum"
    CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/logs/trace-b$B.csv" timeout 200 \
      $bin/gptoss bench latency --model synthetic:120b --batches "$B" --prefill "" \
      --decode-steps 8 --warmup 2 >"$out/logs/bench-b$B.log" 2>&1 || echo "bench B=$B failed ($?)" | tee -a "$sum"
    grep -E "^\| synthetic" "$out/logs/bench-b$B.log" | tee -a "$sum"
    python3 scripts/device/bubble.py "$out/logs/trace-b$B.csv" --title "batch $B, context 1024" \
      >"$out/bubble-b$B.md" 2>&1
    head -5 "$out/bubble-b$B.md" | tee -a "$sum"
    sed -n '/| kernel | per step/,$p' "$out/bubble-b$B.md" | head -30 | tee -a "$sum"
    gzip -f "$out/logs/trace-b$B.csv"
  done
}

# gpu_tests_table: every GPU test binary carried (gpu_tests.sh test mode, TEST_LIMIT seconds each,
# logs in $out/tests), one row each into $sum, their verdicts, and the forward test's seed and
# failures.
gpu_tests_table() {
  TEST_LIMIT=${TEST_LIMIT:-200} OUT=$out/tests bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
  local f
  for f in "$out"/tests/gpu_test_*.log; do
    echo "| $(basename "$f" .log) | $(grep -E 'checks (passed|FAILED)|checks? failed|SKIP' "$f" | tail -1) |" | tee -a "$sum"
  done
  grep -E "^gpu_test_[a-z_]+: " "$out/logs/gpu_tests.log" | tee -a "$sum"
  grep -E "FAILED|seed" "$out"/tests/gpu_test_cuda_forward.log 2>/dev/null | head -8 | tee -a "$sum"
}
# decode_variants "VARIANTS" MODEL:BATCHES...: scripts/device/variants.sh for each model at its
# batches (e.g. 120b:1,8 20b:1), ROUNDS (2) interleaved rounds, each table into $sum under a
# heading, the JSON to $out/v-MODEL$VTAG (VTAG: to keep two calls' files apart).
decode_variants() {
  local v=$1 m; shift
  for m in "$@"; do
    echo -e "\n## ${m%%:*} decode ${m##*:}: $v $(t)" | tee -a "$sum"
    OUT=$out/v-${m%%:*}${VTAG:-} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} VARIANTS="$v" \
      bash scripts/device/variants.sh | tee -a "$sum"
  done
}
# roofline_and_latency: `gptoss roofline` (the H200's figures) beside `gptoss bench latency` on this
# card (120b decode 1, 8, 64; 20b decode 1; 1k context), into $sum; the JSON to $out/latency-*.json.
roofline_and_latency() {
  local rb m
  echo -e "\n## roofline and bench latency $(t)" | tee -a "$sum"
  for rb in 120b:1 120b:8 120b:64 20b:1; do
    $bin/gptoss roofline --model ${rb%%:*} --batch ${rb##*:} --context 1024 | grep -E "^bound" | sed "s/^/${rb} /" | tee -a "$sum"
  done
  for m in 120b:1,8,64 20b:1; do
    timeout 100 $bin/gptoss bench latency --model synthetic:${m%%:*} --batches ${m##*:} --prefill "" \
      --output-json "$out/latency-${m%%:*}.json" >"$out/logs/lat-${m%%:*}.log" 2>&1
    grep -E "^\| synthetic" "$out/logs/lat-${m%%:*}.log" | tee -a "$sum"
  done
}
# served_10xc LEVELS: gpt-oss-120b served 1k/1k at InferenceMAX's settings (10 x C prompts, 2 x C
# warm-ups) at the concurrencies LEVELS (e.g. 16,64), against `gptoss serve` with the server
# defaults served_close.sh uses; the figures into $sum, the JSON to $out/served-1k1k-10xC.json.
# Needs the tokenizer in .devcarry/cache (gzipped there: it is unpacked here).
served_10xc() {
  [ -f .devcarry/cache/tokenizer/tokenizer.json.gz ] && gunzip -kf .devcarry/cache/tokenizer/tokenizer.json.gz
  local G=$bin/gptoss pid
  local keys="Maximum request concurrency|Output token throughput|Median TPOT|Median TTFT|P99 TTFT|Failed requests|Successful"
  echo -e "\n## served 1k/1k, C = $1, 10 x C prompts, 2 x C warm-ups $(t)" | tee -a "$sum"
  "$G" serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
    --no-enable-prefix-caching --max-model-len 10240 >"$out/logs/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q "ready:" "$out/logs/serve.log" && break; sleep 1; done
  timeout "${SERVE_LIMIT:-430}" "$G" bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 \
    --concurrency "$1" --prompts-per-concurrency 10 --warmups-per-concurrency 2 \
    --label "gptoss 120b 1k/1k (H200, 10xC)" --output-json "$out/served-1k1k-10xC.json" --no-progress 2>&1 |
    grep -E "$keys" | tee -a "$sum"
  kill -TERM $pid; wait $pid
}
# step_kernel_vs_base: the step kernel of this build against the one of the base build carried in
# .devcarry/base (BASE=REV BASE_TESTS=gpu_test_cuda_forward scripts/device/prepare.sh; and of a
# second base in .devcarry/base2 when BASE2=REV was given too): the new
# build's (h) checks, the phases with the experts' probes of both, decode batch 1 of the loop and
# both step kernels (120b and 20b, two interleaved rounds), into $sum (the caller then finish_call).
step_kernel_vs_base() {
  test_table
  run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
  grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
  local bases=base v="loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1"
  if [ -d .devcarry/base2 ]; then # a second base (prepare.sh BASE2=REV)
    bases="base base2" v="$v step0b=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1"
  fi
  step_kernel_phases $bases new
  ROUNDS=2 decode_variants "$v step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
}
# step_kernel_phases B...: the step kernel by phase with the experts' probes (gpu_test_cuda_forward
# --step-kernel --bench) of each build B: "new" is this build's, any other the one carried in
# .devcarry/B (prepare.sh BASE / BASE2); into $sum.
step_kernel_phases() {
  local b tb
  for b in "$@"; do
    tb=$bin/gpu_test_cuda_forward; [ "$b" != new ] && tb=.devcarry/$b/gpu_test_cuda_forward
    echo -e "\n## the step kernel by phase, with the experts' probes: $b $(t)" | tee -a "$sum"
    timeout 200 $tb --step-kernel --bench >"$out/logs/bench-$b.log" 2>&1
    grep -E "^\||^the |FAILED|passed" "$out/logs/bench-$b.log" | tee -a "$sum"
  done
}
# ncu_step_kernel NAME SKIP [TOP]: ncu's source counters on this build's step kernel (launch SKIP
# of gpu_test_cuda_forward --step-kernel --bench: ~1,014 launches a probe mode, whole first), the
# warp-state lines and sass_stalls.py's TOP (25) instructions into $sum, the CSV gzipped into $out
# as sass-NAME.csv.gz.
ncu_step_kernel() {
  local name=$1 skip=$2 top=${3:-25} ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo -e "\n## ncu: the step kernel, $name (launch $skip) $(t)" | tee -a "$sum"
  timeout 150 "$ncu" --clock-control none -k "regex:step_kernel" --launch-skip "$skip" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source no \
    -o "$out/logs/sass-$name" -f $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/ncu-$name.log" 2>&1 ||
    echo "ncu $name failed ($?)" | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-$name.ncu-rep" --page details >"$out/logs/details-$name.txt" 2>&1
  grep -E "Warp Cycles Per Issued|Issued Warp|Eligible Warps|Active Warps Per|No Eligible|One or More" \
    "$out/logs/details-$name.txt" | head -12 | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-$name.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass-$name.csv" 2>&1 &&
    python3 scripts/device/sass_stalls.py "$out/logs/sass-$name.csv" "$top" | head -$((top + 10)) | tee -a "$sum"
  rm -f "$out/logs/sass-$name.ncu-rep"
  gzip -f "$out/logs/sass-$name.csv" && cp "$out/logs/sass-$name.csv.gz" "$out/"
}
# head_figures: the head's figures for the issues' acceptance tables (an H200 with needs_h200: the
# decode at 1,024 sequences needs ~148 GB): roofline_and_latency; 120b decode 256 and 1024 with a 1k
# prefill and an 8k prefill; the step kernel against the loop at 120b batch 1 (one round); served
# 1k/1k at concurrency 1 (10 prompts); into $sum, the JSON to $out.
head_figures() {
  local pid keys b
  roofline_and_latency
  echo -e "\n## 120b decode 256, 1024 and prefill 1k $(t)" | tee -a "$sum"
  timeout 200 $bin/gptoss bench latency --model synthetic:120b --batches 256,1024 --prefill 1024 \
    --output-json "$out/latency-120b-1024.json" >"$out/logs/lat-1024.log" 2>&1
  grep -E "^\| synthetic" "$out/logs/lat-1024.log" | tee -a "$sum"
  echo -e "\n## 120b prefill 8k $(t)" | tee -a "$sum"
  timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 8192 \
    --output-json "$out/latency-120b-8k.json" >"$out/logs/lat-8k.log" 2>&1
  grep -E "^\| synthetic" "$out/logs/lat-8k.log" | tee -a "$sum"
  for b in 256 1024; do $bin/gptoss roofline --model 120b --batch $b --context 1024 | grep -E "^bound" | sed "s/^/120b:$b /" | tee -a "$sum"; done
  ROUNDS=1 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1" 120b:1
  echo -e "\n## served 1k/1k, concurrency 1 $(t)" | tee -a "$sum"
  [ -f .devcarry/cache/tokenizer/tokenizer.json.gz ] && gunzip -kf .devcarry/cache/tokenizer/tokenizer.json.gz
  $bin/gptoss serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
    --no-enable-prefix-caching --max-model-len 10240 >"$out/logs/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q "ready:" "$out/logs/serve.log" && break; sleep 1; done
  keys="Maximum request concurrency|Output token throughput|Median TPOT|Median TTFT|P99 TTFT|Failed requests"
  timeout 150 $bin/gptoss bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 --concurrency 1 --num-prompts 10 \
    --num-warmups 1 --label "gptoss 120b 1k/1k C=1 (H200)" --output-json "$out/served-c1.json" --no-progress 2>&1 |
    grep -E "$keys" | tee -a "$sum"
  kill -TERM $pid; wait $pid
}
# finish_call: a device script's end: the time into $sum, the variants' per-run logs dropped, and
# logs/ (and tests/, if there) packed into one archive (fewer files to bring back).
finish_call() {
  t | tee -a "$sum"
  rm -rf "$out"/v-*/vlogs
  tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests 2>/dev/null) &&
    rm -rf "$out"/logs "$out"/tests && mv /tmp/logs.tgz "$out/"
}
