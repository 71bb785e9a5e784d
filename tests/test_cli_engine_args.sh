#!/usr/bin/env bash
# The engine and backend options are one set for serve, generate and bench sweep (src/cli/engine_args.c
# parses them, src/engine/runtime.c builds from them): each command refuses a bad value with the same
# message and exit 2, refuses an unknown --kv-cache-dtype (with --backend cuda too, which a CPU-only
# build answers the same way because the dtype check comes first) and runs fp8 on the CPU backend
# (e4m3 emulation), accepts --enforce-eager, --max-cudagraph-capture-size, --tensor-parallel-size
# and --enable-expert-parallel (emulated on the CPU backend), --data-parallel-size (DEP2, emulated),
# refuses the node flags' bad combinations (--nnodes and friends), and refuses a --max-model-len
# beyond the KV cache with serve's message.
set -u
BIN=${1:?usage: $0 path/to/gptoss [source dir]}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# Each command with what it needs besides the engine options (timeout: a serve that wrongly accepted
# everything would run until killed).
cmd() { # name → the command line as words
  case $1 in
  serve) echo serve --port 0 ;;
  generate) echo generate --prompt-ids 1,2 --max-tokens 2 ;;
  sweep) echo bench sweep --concurrency 1 --isl 4 --osl 2 --no-progress ;;
  esac
}
# Runs one command; sets rc and msg (stderr without the "gptoss CMD: " prefix).
run() { # name, args...
  local name=$1
  shift
  timeout 60 "$BIN" $(cmd "$name") "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  # The command's name and the --help hint differ by command; the message itself must not.
  msg=$(sed -E -e 's/^gptoss (serve|generate|bench sweep): //' \
    -e "s/ \(see 'gptoss (serve|generate|bench sweep) --help'\)\$//" "$TMP/err")
}

# The same bad value, the same message and exit 2 from every command.
same_refusal() { # description, args...
  local what=$1 want=""
  shift
  for c in serve generate sweep; do
    run "$c" --model synthetic:tiny "$@"
    [ "$rc" = 2 ] || fail "$c $what: exit $rc, want 2 ($msg)"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$c $what: not one line: $(cat "$TMP/err")"
    if [ -z "$want" ]; then want=$msg; elif [ "$msg" != "$want" ]; then
      fail "$c $what: '$msg' differs from serve's '$want'"
    fi
  done
  [ -n "${VERBOSE:-}" ] && echo "$what: $want"
  grep -qF -- "${what%% *}" <<<"$want" || fail "$what: the message does not name the option: $want"
}
same_refusal "--max-num-seqs 0" --max-num-seqs 0
same_refusal "--max-model-len 1" --max-model-len 1
same_refusal "--block-size x" --block-size x
same_refusal "--gpu-memory-utilization 2" --gpu-memory-utilization 2
same_refusal "--max-cudagraph-capture-size -1" --max-cudagraph-capture-size -1
same_refusal "--max-cudagraph-capture-size 65537" --max-cudagraph-capture-size 65537
same_refusal "--kv-cache-dtype fp16" --kv-cache-dtype fp16
same_refusal "--backend nosuch" --backend nosuch
same_refusal "--stream-interval" --stream-interval

# Unknown KV dtypes are refused by every command, with the accepted values named; fp8 and fp8_e4m3
# run (on the CPU backend: e4m3 emulation).
same_refusal "--kv-cache-dtype fp8_e5m2 (cuda)" --kv-cache-dtype fp8_e5m2 --backend cuda
grep -qF -- "expected auto, bf16, fp8 or fp8_e4m3" <<<"$msg" || fail "e5m2: $msg"
same_refusal "--kv-cache-dtype int8" --kv-cache-dtype int8
for kv in fp8 fp8_e4m3; do
  printf '{"prompt_ids":[1,2,3],"max_tokens":3}\n' >"$TMP/p8.jsonl"
  "$BIN" generate --model synthetic:tiny --prompts-file "$TMP/p8.jsonl" --kv-cache-dtype $kv \
    >"$TMP/out" 2>"$TMP/err" || fail "generate --kv-cache-dtype $kv: $(cat "$TMP/err")"
  grep -q '"finish_reason":"length"' "$TMP/out" || fail "generate --kv-cache-dtype $kv: $(cat "$TMP/out")"
done

# The graph flags are parsed by every command: with them (and no --model) each gets as far as asking
# for the model, never "unknown option".
for c in serve generate sweep; do
  run "$c" --enforce-eager --max-cudagraph-capture-size 0 --max-cudagraph-capture-size 64
  [ "$rc" = 2 ] && grep -q -- "--model.*required" <<<"$msg" || fail "$c: graph flags: exit $rc: $msg"
done
"$BIN" bench latency --enforce-eager --max-cudagraph-capture-size 8 2>"$TMP/err" >/dev/null
grep -q -- "--model is required" "$TMP/err" || fail "bench latency: graph flags: $(cat "$TMP/err")"
for c in serve generate "bench sweep" "bench latency"; do
  help=$("$BIN" $c --help)
  for f in --enforce-eager --max-cudagraph-capture-size; do
    grep -qF -- "$f" <<<"$help" || fail "$c --help does not mention $f"
  done
done
for c in serve generate "bench sweep"; do
  help=$("$BIN" $c --help)
  for f in --kv-cache-dtype --num-kv-blocks --gpu-memory-utilization --max-model-len --backend; do
    grep -qF -- "$f" <<<"$help" || fail "$c --help does not mention $f"
  done
done

# And they run: generate --prompts-file and bench sweep on the CPU backend with them given.
printf '{"prompt_ids":[1,2,3],"max_tokens":3}\n' >"$TMP/p.jsonl"
"$BIN" generate --model synthetic:tiny --prompts-file "$TMP/p.jsonl" --enforce-eager \
  --max-cudagraph-capture-size 16 >"$TMP/out" 2>"$TMP/err" || fail "generate with graph flags: $(cat "$TMP/err")"
grep -q '"finish_reason":"length"' "$TMP/out" || fail "generate with graph flags: $(cat "$TMP/out")"
"$BIN" bench sweep --model synthetic:tiny --concurrency 1 --isl 4 --osl 2 --prompts-per-concurrency 1 \
  --warmups-per-concurrency 0 --no-progress --enforce-eager --max-cudagraph-capture-size 16 \
  >"$TMP/out" 2>&1 || fail "sweep with graph flags: $(cat "$TMP/out")"

# --tensor-parallel-size / -tp and --enable-expert-parallel: range-checked like every option; a size
# the model cannot be split by is refused by the backend naming the flag; on the CPU backend (ranks
# emulated one after the other, partials summed) greedy tokens equal one rank's.
same_refusal "--tensor-parallel-size 9" --tensor-parallel-size 9
same_refusal "-tp 0" -tp 0
printf '{"prompt_ids":[5,6,7,8,9,10],"max_tokens":8}\n{"prompt_ids":[11,12],"max_tokens":8}\n' >"$TMP/tp.jsonl"
"$BIN" generate --model synthetic:tiny --prompts-file "$TMP/tp.jsonl" >"$TMP/tp1" 2>"$TMP/err" ||
  fail "generate tp1: $(cat "$TMP/err")"
for tp in "--tensor-parallel-size 2" "-tp 4" "--tensor-parallel-size 2 --enable-expert-parallel" \
  "-tp 8 --enable-expert-parallel"; do
  # shellcheck disable=SC2086
  "$BIN" generate --model synthetic:tiny --prompts-file "$TMP/tp.jsonl" $tp >"$TMP/tpn" 2>"$TMP/err" ||
    fail "generate $tp: $(cat "$TMP/err")"
  grep -q "ranks emulated" "$TMP/err" || fail "generate $tp: no emulation logged: $(cat "$TMP/err")"
  [ "$(grep -o '"tokens":\[[^]]*\]' "$TMP/tpn")" = "$(grep -o '"tokens":\[[^]]*\]' "$TMP/tp1")" ] &&
    [ -n "$(grep -o '"tokens":\[[^]]*\]' "$TMP/tp1")" ] ||
    fail "generate $tp: tokens differ from one rank's: $(cat "$TMP/tpn") vs $(cat "$TMP/tp1")"
done
"$BIN" generate --model synthetic:tiny --prompts-file "$TMP/tp.jsonl" -tp 3 >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF -- "--tensor-parallel-size 3 does not divide the model's 8 attention heads" "$TMP/out" ||
  fail "generate -tp 3: exit $rc: $(cat "$TMP/out")"
# --data-parallel-size (DEP2, issue 17): 1 or 2, 2 only with --enable-expert-parallel and one
# tensor-parallel rank, each refusal naming the flag alike in all three; on the CPU backend (DEP
# emulated: per-rank KV pools, each rank's attention on its own sequences) greedy tokens equal one
# rank's.
same_refusal "--data-parallel-size 3" --data-parallel-size 3 --enable-expert-parallel
same_refusal "--data-parallel-size 0" --data-parallel-size 0
same_refusal "--data-parallel-size 2 (no EP)" --data-parallel-size 2
same_refusal "--data-parallel-size 2 -tp 2" --data-parallel-size 2 --enable-expert-parallel -tp 2
for dp in "--data-parallel-size 2 --enable-expert-parallel" "-dp 2 --enable-expert-parallel"; do
  # shellcheck disable=SC2086
  "$BIN" generate --model synthetic:tiny --prompts-file "$TMP/tp.jsonl" $dp >"$TMP/tpn" 2>"$TMP/err" ||
    fail "generate $dp: $(cat "$TMP/err")"
  grep -q "data-parallel ranks emulated" "$TMP/err" || fail "generate $dp: no DEP logged: $(cat "$TMP/err")"
  [ "$(grep -o '"tokens":\[[^]]*\]' "$TMP/tpn")" = "$(grep -o '"tokens":\[[^]]*\]' "$TMP/tp1")" ] ||
    fail "generate $dp: tokens differ from one rank's: $(cat "$TMP/tpn") vs $(cat "$TMP/tp1")"
done
for c in serve generate "bench sweep"; do
  help=$("$BIN" $c --help)
  for f in --tensor-parallel-size --enable-expert-parallel --data-parallel-size; do
    grep -qF -- "$f" <<<"$help" || fail "$c --help does not mention $f"
  done
done

# Tensor parallelism across nodes (issue 17 item 5): --nnodes, --node-rank, --master-addr,
# --master-port and --headless are engine options like the others; each bad combination is refused
# alike by every command, naming its flag (the combinations that run: tests/test_runtime.c; a run
# needs two GPU machines and has not happened).
nodes=(--backend cuda --master-addr 10.0.0.1)
same_refusal "--node-rank 1 (no --nnodes)" --node-rank 1
same_refusal "--nnodes 2 -dp 2" --nnodes 2 -dp 2 --enable-expert-parallel "${nodes[@]}"
same_refusal "--tensor-parallel-size 3 over 2 nodes" --nnodes 2 -tp 3 "${nodes[@]}"
same_refusal "--tensor-parallel-size 32 over 2 nodes" --nnodes 2 -tp 32 "${nodes[@]}"
same_refusal "--nnodes 2 (no --master-addr)" --nnodes 2 -tp 2 --backend cuda
same_refusal "--nnodes 2 (cpu)" --nnodes 2 -tp 2 --master-addr 10.0.0.1
same_refusal "--headless on node 0" --nnodes 2 -tp 2 --headless "${nodes[@]}"
same_refusal "--headless (one node)" --headless
same_refusal "--node-rank 1 without --headless" --nnodes 2 -tp 2 --node-rank 1 "${nodes[@]}"
same_refusal "--node-rank 2 of 2" --nnodes 2 -tp 2 --node-rank 2 --headless "${nodes[@]}"
same_refusal "--master-port 70000" --master-port 70000
same_refusal "--master-port 0" --master-port 0
same_refusal "--master-addr with a port" --nnodes 2 -tp 2 --backend cuda --master-addr 10.0.0.1:29500
same_refusal "--master-addr (one node)" --master-addr 10.0.0.1
same_refusal "--tensor-parallel-size 65" --tensor-parallel-size 65
for c in serve generate "bench sweep"; do
  help=$("$BIN" $c --help)
  for f in --nnodes --node-rank --master-addr --master-port --headless; do
    grep -qF -- "$f" <<<"$help" || fail "$c --help does not mention $f"
  done
done
# A headless node runs no engine: only serve starts one (generate refuses, after the checks; a
# build without the cuda backend refuses --backend cuda first).
"$BIN" generate --model synthetic:tiny --prompt-ids 1 --nnodes 2 -tp 2 --node-rank 1 --headless \
  "${nodes[@]}" >"$TMP/out" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -qE -- "--headless: this node runs no engine|has no cuda backend" "$TMP/out" ||
  fail "generate --headless: exit $rc: $(cat "$TMP/out")"

# serve --preset: defaults that explicit options override, before or after it; an unknown name is
# refused naming the option and the known ones.
preset_line() { # args... -> the engine line serve logs at start
  timeout 10 "$BIN" serve --model synthetic:tiny --port 0 "$@" 2>&1 | grep -m1 "engine: --max-num-seqs"
}
l=$(preset_line --preset balanced)
grep -qF -- "--max-num-seqs 64 --max-num-batched-tokens 8192 --stream-interval 1 --target-tpot-ms 0, from --preset balanced" <<<"$l" ||
  fail "--preset balanced: $l"
l=$(preset_line --max-num-seqs 32 --preset max-throughput --target-tpot-ms 30)
grep -qF -- "--max-num-seqs 32 --max-num-batched-tokens 8192 --stream-interval 4 --target-tpot-ms 30" <<<"$l" ||
  fail "--preset max-throughput with overrides: $l"
l=$(preset_line --preset min-latency)
grep -qF -- "--max-num-seqs 8 " <<<"$l" || fail "--preset min-latency: $l"
timeout 10 "$BIN" serve --model synthetic:tiny --port 0 --preset fastest >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -qF -- "--preset fastest: expected min-latency, balanced or max-throughput" "$TMP/out" ||
  fail "--preset fastest: exit $rc: $(cat "$TMP/out")"

# A --max-model-len the KV cache cannot hold (4 blocks of 32 tokens): the same refusal from the builder
# for all three (serve logs it and exits 1; generate needs --prompts-file to reach the engine).
long=(--max-model-len 100000 --num-kv-blocks 4)
want="--max-model-len 100000 is more than the KV cache holds (128 tokens)"
timeout 60 "$BIN" serve --model synthetic:tiny --port 0 "${long[@]}" >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF -- "$want" "$TMP/out" || fail "serve long model: exit $rc: $(cat "$TMP/out")"
"$BIN" generate --model synthetic:tiny --prompts-file "$TMP/p.jsonl" "${long[@]}" >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF -- "$want" "$TMP/out" || fail "generate long model: exit $rc: $(cat "$TMP/out")"
"$BIN" $(cmd sweep) --model synthetic:tiny "${long[@]}" >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF -- "$want" "$TMP/out" || fail "sweep long model: exit $rc: $(cat "$TMP/out")"

# bench latency takes --tensor-parallel-size (-tp) and --enable-expert-parallel and records them (issue
# 17); out of range: refused.
"$BIN" make-model --preset tiny --layers 2 --out "$TMP/tiny2" >/dev/null 2>&1 || fail "make-model tiny"
"$BIN" bench latency --model "$TMP/tiny2" --backend cpu -tp 2 --batches 1 --prefill 4 --context 4 \
  --decode-steps 1 --warmup 0 --output-json "$TMP/bl.json" >"$TMP/out" 2>&1 ||
  fail "bench latency -tp 2: $(cat "$TMP/out")"
grep -q '"tensor_parallel_size": 2' "$TMP/bl.json" || fail "bench latency JSON lacks tensor_parallel_size 2"
grep -q '| cpu tp2 |' "$TMP/out" || fail "bench latency table does not say tp2: $(cat "$TMP/out")"
grep -q '"enable_expert_parallel": false' "$TMP/bl.json" || fail "bench latency JSON lacks enable_expert_parallel false"
"$BIN" bench latency --model "$TMP/tiny2" --backend cpu -tp 2 --enable-expert-parallel --batches 1 \
  --prefill 4 --context 4 --decode-steps 1 --warmup 0 --output-json "$TMP/bl.json" >"$TMP/out" 2>&1 ||
  fail "bench latency -tp 2 --enable-expert-parallel: $(cat "$TMP/out")"
grep -q '"enable_expert_parallel": true' "$TMP/bl.json" || fail "bench latency JSON lacks enable_expert_parallel true"
grep -q '| cpu tp2 ep |' "$TMP/out" || fail "bench latency table does not say tp2 ep: $(cat "$TMP/out")"
"$BIN" bench latency --model "$TMP/tiny2" --tensor-parallel-size 9 >"$TMP/out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q -- "--tensor-parallel-size" "$TMP/out" || fail "bench latency -tp 9: exit $rc: $(cat "$TMP/out")"
grep -q '"data_parallel_size": 1' "$TMP/bl.json" || fail "bench latency JSON lacks data_parallel_size 1"
"$BIN" bench latency --model "$TMP/tiny2" --backend cpu --data-parallel-size 2 --enable-expert-parallel \
  --batches 1,3 --prefill 4 --context 4 --decode-steps 1 --warmup 0 --output-json "$TMP/bl.json" \
  >"$TMP/out" 2>&1 || fail "bench latency --data-parallel-size 2: $(cat "$TMP/out")"
grep -q '"data_parallel_size": 2' "$TMP/bl.json" || fail "bench latency JSON lacks data_parallel_size 2"
grep -q '| cpu dep2 |' "$TMP/out" || fail "bench latency table does not say dep2: $(cat "$TMP/out")"
for bad in "--data-parallel-size 3 --enable-expert-parallel" "-dp 2"; do
  # shellcheck disable=SC2086
  "$BIN" bench latency --model "$TMP/tiny2" --backend cpu $bad >"$TMP/out" 2>&1
  rc=$?
  [ "$rc" = 2 ] && grep -q -- "--data-parallel-size" "$TMP/out" || fail "bench latency $bad: exit $rc: $(cat "$TMP/out")"
done

[ $fails -eq 0 ] && echo "test_cli_engine_args: all passed" || echo "test_cli_engine_args: $fails failed"
exit $((fails > 0))
