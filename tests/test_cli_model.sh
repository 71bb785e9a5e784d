#!/usr/bin/env bash
# make-model, inspect and generate from the command line: deterministic checkpoints, the JSON output of
# generate, and one-line errors naming the problem for each kind of broken checkpoint.
set -u
gptoss=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# Determinism: the same seed gives the same bytes; another seed does not.
"$gptoss" make-model --preset tiny --out "$tmp/a" --seed 5 2>/dev/null || fail "make-model a"
"$gptoss" make-model --preset tiny --out "$tmp/b" --seed 5 2>/dev/null || fail "make-model b"
"$gptoss" make-model --preset tiny --out "$tmp/c" --seed 6 2>/dev/null || fail "make-model c"
for f in config.json model.safetensors.index.json model-00000-of-00001.safetensors model-00001-of-00001.safetensors; do
  cmp -s "$tmp/a/$f" "$tmp/b/$f" || fail "same seed, different $f"
done
cmp -s "$tmp/a/model-00000-of-00001.safetensors" "$tmp/c/model-00000-of-00001.safetensors" && fail "different seeds, same weights"

# generate --json prints one object with tokens, logprobs and prompt_logprobs (first entry null).
out=$("$gptoss" generate --model "$tmp/a" --prompt-ids 1,2,3 --max-tokens 8 --json --logprobs 3 --prompt-logprobs 2) \
  || fail "generate"
node -e '
const o = JSON.parse(process.argv[1]);
const ok = o.tokens.length === 8 && o.logprobs.length === 8 && o.logprobs.every(l => l.length === 3)
  && o.prompt_logprobs.length === 3 && o.prompt_logprobs[0] === null
  && o.prompt_logprobs.slice(1).every(l => l.length === 2 && l.every(([id, lp]) => Number.isInteger(id) && lp <= 0 && isFinite(lp)))
  && o.tokens.every((t, i) => o.logprobs[i][0][0] === t)   /* greedy: the token is the top-1 */
  && o.finish_reason === "length";
if (!ok) { console.error("bad generate output: " + process.argv[1]); process.exit(1); }
' "$out" || fail "generate JSON shape"
# Greedy is deterministic; seeded sampling repeats with the same seed.
out2=$("$gptoss" generate --model "$tmp/a" --prompt-ids 1,2,3 --max-tokens 8 --json --logprobs 3 --prompt-logprobs 2)
[ "$out" = "$out2" ] || fail "greedy generate not repeatable"
s1=$("$gptoss" generate --model "$tmp/a" --prompt-ids 1,2,3 --max-tokens 8 --temperature 1 --seed 9)
s2=$("$gptoss" generate --model "$tmp/a" --prompt-ids 1,2,3 --max-tokens 8 --temperature 1 --seed 9)
[ "$s1" = "$s2" ] || fail "seeded sampling not repeatable"

# Text prompts (the tokenizer beside the checkpoint): --prompt "Hello world" is ids 13225,2375.
if [ -f "$tmp/a/tokenizer.json" ]; then
  t1=$("$gptoss" generate --model "$tmp/a" --prompt "Hello world" --max-tokens 4 --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).tokens.join(",")))')
  t2=$("$gptoss" generate --model "$tmp/a" --prompt-ids 13225,2375 --max-tokens 4)
  [ "$t1" = "$t2" ] || fail "--prompt 'Hello world' ($t1) differs from --prompt-ids 13225,2375 ($t2)"
  "$gptoss" generate --model "$tmp/a" --chat "What is 2 + 2?" --max-tokens 2 --prompt-logprobs 1 --json >"$tmp/chat.json" || fail "--chat"
  # the harmony prompt of one user message with today's date: 73 tokens (spec §5.2's 64 + the date line)
  n=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).prompt_logprobs.length)' "$tmp/chat.json")
  [ "$n" -ge 64 ] || fail "--chat prompt has only $n tokens"
else
  echo "test_cli_model: no tokenizer beside the model; text prompt checks skipped" >&2
fi

# Bad input on the command line.
"$gptoss" generate --model "$tmp/a" --prompt-ids 1,x --max-tokens 2 2>"$tmp/err" && fail "bad ids accepted"
grep -q -- "--prompt-ids" "$tmp/err" || fail "bad ids: message does not name the option: $(cat "$tmp/err")"
"$gptoss" generate --model "$tmp/a" --prompt-ids 999999999 --max-tokens 2 2>"$tmp/err" && fail "out-of-vocab id accepted"
grep -q "outside the vocabulary" "$tmp/err" || fail "out-of-vocab: $(cat "$tmp/err")"

# Broken checkpoints: each must fail with exactly one line that names the problem.
expect_broken() { # name, dir, words...
  local name=$1 dir=$2; shift 2
  if "$gptoss" inspect "$dir" >/dev/null 2>"$tmp/err"; then fail "$name: accepted"; return; fi
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$name: not one line: $(cat "$tmp/err")"
  [ -n "${VERBOSE:-}" ] && cat "$tmp/err"
  for w in "$@"; do grep -qF -- "$w" "$tmp/err" || fail "$name: message lacks '$w': $(cat "$tmp/err")"; done
}
fresh() { rm -rf "$tmp/x"; cp -r "$tmp/a" "$tmp/x"; }
shard0="$tmp/x/model-00000-of-00001.safetensors"
shard1="$tmp/x/model-00001-of-00001.safetensors"

fresh; truncate -s 100000 "$shard1"
expect_broken truncated "$tmp/x" model-00001-of-00001.safetensors
fresh; perl -0777 -pi -e 's/layers\.1\.self_attn\.q_proj\.weight/layers.1.self_attn.q_prxj.weight/' "$shard0"
expect_broken "renamed tensor" "$tmp/x" q_pr
fresh; perl -0777 -pi -e 's/("model\.layers\.0\.self_attn\.sinks":\{"data_offsets":\[\d+,\d+\],"dtype":)"BF16"/${1} "F16"/' "$shard0"
expect_broken "wrong dtype" "$tmp/x" model.layers.0.self_attn.sinks F16 BF16
fresh; perl -0777 -pi -e 's/"intermediate_size": 64/"intermediate_size": 96/' "$tmp/x/config.json"
expect_broken "wrong shape" "$tmp/x" gate_up_proj expected found
fresh; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$shard0" bs=1 count=8 conv=notrunc 2>/dev/null
expect_broken "absurd header size" "$tmp/x" model-00000-of-00001.safetensors header
fresh; perl -0777 -pi -e 's/("lm_head\.weight":\{"data_offsets":\[\d+,)(\d)/${1}9/' "$shard1"
expect_broken "offsets beyond the data" "$tmp/x" lm_head.weight
fresh; rm "$shard1"
expect_broken "missing shard" "$tmp/x" model-00001-of-00001.safetensors
fresh; echo '{"weight_map": ' >"$tmp/x/model.safetensors.index.json"
expect_broken "broken index" "$tmp/x" model.safetensors.index.json
fresh; perl -0777 -pi -e 's/"rope_type": "yarn"/"rope_type": "ntk"/' "$tmp/x/config.json"
expect_broken "rope type" "$tmp/x" rope_type

# --model synthetic:tiny (as serve takes it): written once into the cache as seed 0, then the same
# tokens as the checkpoint make-model writes with seed 0.
"$gptoss" make-model --preset tiny --out "$tmp/s0" --seed 0 2>/dev/null || fail "make-model seed 0"
want=$("$gptoss" generate --model "$tmp/s0" --prompt-ids 1,2,3 --max-tokens 6 --json) || fail "generate seed 0"
got=$(GPTOSS_CACHE="$tmp/cache" "$gptoss" generate --model synthetic:tiny --prompt-ids 1,2,3 --max-tokens 6 --json 2>/dev/null) ||
  fail "generate --model synthetic:tiny"
[ -n "$want" ] && [ "$got" = "$want" ] || fail "synthetic:tiny: '$got', want '$want'"
[ -f "$tmp/cache/models/synthetic-tiny-seed0/config.json" ] || fail "synthetic:tiny was not written into the cache"

[ $fails -eq 0 ] && echo "test_cli_model: all passed" || echo "test_cli_model: $fails failed"
exit $((fails > 0))
