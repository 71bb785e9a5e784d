# Sourced by every scripts/device/*.sh that runs on the GPU machine: the shared libraries and the
# tokenizer that scripts/device/prepare.sh carries in .devcarry (run from the repository root).
export LD_LIBRARY_PATH="$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}"
[ -d "$PWD/.devcarry/cache" ] && export GPTOSS_CACHE="${GPTOSS_CACHE:-$PWD/.devcarry/cache}"
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

