#!/usr/bin/env bash
# The tokenizer against the reference, tiktoken (npm, the official Rust core compiled to WASM), on a
# ~13 MB corpus assembled from text on this machine and generated text (tests/node/make_corpus.js):
# ids must be identical, and detokenize(tokenize(x)) must give x back byte for byte. Also special tokens
# (encode with specials) and ill-formed UTF-8 (compared after decoding with replacement).
# $1: the gptoss program, $2: the source folder. Exit 77 (skipped) only when the tokenizer data is missing.
set -euo pipefail
bin=$1
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
node_dir="$src/tests/node"

if ! "$bin" tokenize x >/dev/null 2>&1; then
  echo "SKIP: no tokenizer.json (scripts/setup.sh puts it in the cache folder): $("$bin" tokenize x 2>&1 || true)"
  exit 77
fi
if ! command -v node >/dev/null || [ ! -d "$node_dir/node_modules/tiktoken" ]; then
  echo "FAIL: Node.js and tests/node/node_modules (tiktoken) are needed: run scripts/setup.sh" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node "$node_dir/make_corpus.js" "$work" | tail -1
fail=0

"$bin" tokenize - <"$work/corpus.txt" >"$work/corpus.ids"
node "$node_dir/compare_tokenizer.js" ordinary "$work/corpus.txt" "$work/corpus.ids" "$work/corpus.sections.json" || fail=1

"$bin" detokenize - <"$work/corpus.ids" >"$work/roundtrip.txt"
if cmp -s "$work/corpus.txt" "$work/roundtrip.txt"; then
  echo "round trip: detokenize(tokenize(corpus)) is the corpus, byte for byte"
else
  echo "FAIL: round trip differs: $(cmp "$work/corpus.txt" "$work/roundtrip.txt" 2>&1 | head -1)"
  fail=1
fi

"$bin" tokenize --specials - <"$work/specials.txt" >"$work/specials.ids"
node "$node_dir/compare_tokenizer.js" specials "$work/specials.txt" "$work/specials.ids" || fail=1

"$bin" tokenize - <"$work/invalid.bin" >"$work/invalid.ids"
node "$node_dir/compare_tokenizer.js" ordinary "$work/invalid.bin" "$work/invalid.ids" || fail=1

if [ $fail -ne 0 ]; then
  exit 1
fi
echo "tokenizer reference: all identical"
