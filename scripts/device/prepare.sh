#!/usr/bin/env bash
# Here (no GPU): build with nvcc for sm_90a and gather what a device call needs into .devcarry/
# (ignored by git): the GPU test binaries, the gptoss program, and the shared libraries the device
# image may lack (jansson, PCRE2, libevent, xxHash, libgomp). Then call the device tool with
# carry [".devcarry"] and command `bash scripts/device/gpu_tests.sh`. BASE=REV also builds the program at
# REV into .devcarry/base/ for scripts/device/ab.sh (a change held against its base in one call).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
rm -rf .devcarry && mkdir -p .devcarry/bin .devcarry/lib
cp build/gptoss .devcarry/bin/
cp build/tests/gpu/gpu_test_* .devcarry/bin/ 2>/dev/null || true
# host debug info off: the carry is limited to 64 MiB with the tree (the device code is untouched)
strip --strip-debug .devcarry/bin/*
# The CUPTI kernel-timeline injection library and its CUPTI (scripts/device/bubble.sh).
if [ -f build/libgptoss_trace.so ]; then
  cp build/libgptoss_trace.so .devcarry/lib/
  ldd build/libgptoss_trace.so | awk '/libcupti/ {print $3}' | while read -r lib; do cp -L "$lib" .devcarry/lib/; done
fi
for bin in .devcarry/bin/*; do
  ldd "$bin" | awk '/=> \// {print $3}' | grep -E 'jansson|pcre2|libevent|xxhash|gomp' || true
done | sort -u | while read -r lib; do cp -L "$lib" .devcarry/lib/; done
# The tokenizer, for the server (GPTOSS_CACHE=.devcarry/cache there).
cache=${GPTOSS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gptoss}
if [ -f "$cache/tokenizer/tokenizer.json" ]; then
  mkdir -p .devcarry/cache/tokenizer && cp "$cache/tokenizer/tokenizer.json" .devcarry/cache/tokenizer/
fi
git describe --always --dirty --abbrev=7 > .devcarry/commit.txt # "-dirty": built from uncommitted changes
# BASE=REV: also the program built at REV (in a worktree under build-base/), for scripts/device/ab.sh;
# BASE_TESTS names base test binaries to carry beside it. BASE2=REV: a second base the same way, in
# .devcarry/base2/ (build-base2/): three builds held against each other in one call.
build_base() { # REV DIR (base or base2)
  local wt=build-$2/src rev
  rev=$(git rev-parse --verify "$1^{commit}") # here: in the worktree "HEAD" would be its own
  [ -d "$wt" ] || git worktree add --detach "$wt" "$rev" >/dev/null
  git -C "$wt" checkout -q --detach "$rev"
  cmake -S "$wt" -B "build-$2/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "build-$2/build" -j "$(nproc)" --target gptoss ${BASE_TESTS:-}
  mkdir -p ".devcarry/$2" && cp "build-$2/build/gptoss" ".devcarry/$2/" && strip --strip-debug ".devcarry/$2/gptoss"
  # BASE_TESTS="gpu_test_x ...": those GPU test binaries of the base too (a probe held against its base)
  for t in ${BASE_TESTS:-}; do cp "build-$2/build/tests/gpu/$t" ".devcarry/$2/" && strip --strip-debug ".devcarry/$2/$t"; done
  git -C "$wt" rev-parse --short HEAD >".devcarry/$2/commit.txt"
}
if [ -n "${BASE:-}" ]; then build_base "$BASE" base; fi
if [ -n "${BASE2:-}" ]; then build_base "$BASE2" base2; fi
# PROBE=1: also gpu_test_cuda_forward at the head with the step kernel's wait probe compiled in
# (-DGPTOSS_STEP_WAIT_PROBE=1; its off path costs 1.3-1.8 %, so the default build leaves it out),
# in build-probe/, to .devcarry/probe/ (run it with --step-kernel --waits).
if [ -n "${PROBE:-}" ]; then
  cmake -S . -B build-probe -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_FLAGS=-DGPTOSS_STEP_WAIT_PROBE=1 >/dev/null
  cmake --build build-probe -j "$(nproc)" --target gpu_test_cuda_forward
  mkdir -p .devcarry/probe && cp build-probe/tests/gpu/gpu_test_cuda_forward .devcarry/probe/
  strip --strip-debug .devcarry/probe/gpu_test_cuda_forward
  git describe --always --dirty --abbrev=7 >.devcarry/probe/commit.txt
fi
# SLIM="gptoss gpu_test_cuda_forward ..." (or SLIM=all): only those of the head's binaries (the
# bases keep what BASE_TESTS named), no CUPTI trace library (TRACE=1 keeps it, ~4 MB), and every binary, library and the
# tokenizer gzipped (three builds, or every test binary, then fit in 64 MiB). The device command
# then starts with
#   gunzip -f .devcarry/*/*.gz .devcarry/cache/tokenizer/*.gz 2>/dev/null; chmod +x .devcarry/bin/* .devcarry/base*/*
if [ -n "${SLIM:-}" ]; then
  for f in .devcarry/bin/*; do
    case " $SLIM " in *" $(basename "$f") "* | " all ") ;; *) rm -f "$f" ;; esac
  done
  [ -n "${TRACE:-}" ] || rm -f .devcarry/lib/libcupti* .devcarry/lib/libgptoss_trace.so
  find .devcarry -type f ! -name commit.txt ! -name '*.gz' -exec gzip -9 -f {} +
fi
du -sh .devcarry
