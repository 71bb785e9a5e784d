#!/usr/bin/env bash
# One device call: (1) the tiny64 transformers fixture (real head geometry) into tests/fixtures here
# and $OUT/fx, (2) every GPU test carried in .devcarry (scripts/device/prepare.sh), with the logs packed
# into $OUT/gpu-logs.tgz (the device returns at most 8 files). Usage: session.sh [fixtures|tests|all]
set -uo pipefail
mode=${1:-all}
out=${OUT:-/tmp/session-out}
mkdir -p "$out/fx"
export PYTHONUNBUFFERED=1
if [ "$mode" != tests ]; then
  python3 scripts/make_fixtures.py "$(pwd)" "$out/fx" tiny64 2>&1 | grep -v "Loading weights" | tail -12
  if [ -f "$out/fx/tiny64_reference.safetensors" ]; then
    mkdir -p tests/fixtures/tiny64
    cp "$out/fx/tiny64/"* tests/fixtures/tiny64/ && cp "$out/fx/tiny64_reference.safetensors" tests/fixtures/
  fi
fi
if [ "$mode" != fixtures ]; then
  OUT=/tmp/gpu-logs bash scripts/device/gpu_tests.sh test
  tar czf "$out/gpu-logs.tgz" -C /tmp gpu-logs
fi
