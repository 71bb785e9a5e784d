#!/usr/bin/env bash
# Fuzzes a reader: scripts/fuzz.sh [target] [seconds] (default: safetensors, 60 s). Targets:
# safetensors (the safetensors reader), grammar (the grammar compilers and matcher, src/grammar/).
#
# Configures a clang build in build-fuzz/ with -DGPTOSS_FUZZ=ON, runs one libFuzzer process seeded with
# the committed corpus (tests/fuzz/corpus_<target>), then merges what it found back into that corpus
# with -merge=1, so the committed corpus stays minimal (only inputs that add coverage). A crash leaves
# its input in build-fuzz/ (crash-*, leak-*, timeout-*) and makes the script fail.
set -euo pipefail

target=safetensors
if [[ ${1:-} =~ ^[a-z_]+$ ]]; then
    target=$1
    shift
fi
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
corpus=$root/tests/fuzz/corpus_$target
found=$build/found_$target # this run's new inputs, merged into $corpus at the end

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DGPTOSS_FUZZ=ON -DGPTOSS_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_$target -j 1
bin=$build/tests/fuzz/fuzz_$target

mkdir -p "$corpus" "$found"
# One process (-jobs unset): the build machines are shared. Inputs stay small (headers of a few
# tensors); the rss limit catches a parser that allocates from an untrusted count.
"$bin" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -dict="$root/tests/fuzz/$target.dict" -artifact_prefix="$build/" "$found" "$corpus"

merged=$(mktemp -d)
trap 'rm -rf "$merged"' EXIT
"$bin" -merge=1 "$merged" "$corpus" "$found" 2>&1 | grep -E "MERGE-OUTER: [0-9]+ new files" || true
rm -f "$corpus"/*
cp "$merged"/* "$corpus"/
echo "corpus: $(ls "$corpus" | wc -l) files, $(du -sh "$corpus" | cut -f1)"
