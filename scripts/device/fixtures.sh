#!/usr/bin/env bash
# On the GPU machine: regenerate the transformers reference fixtures into $OUT (see make_fixtures.py).
# Copy them back with scripts/device/install_fixtures.sh.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/fixtures-out}
mkdir -p "$out/pyckpt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 scripts/make_fixtures.py "$(pwd)" "$out" 2>&1 | tee "$out/fixtures.log"
ls -la "$out" "$out/pyckpt"
