#!/usr/bin/env bash
# The FP8 decode kernel's fragment index math, emulated on the CPU (tests/fp8_decode_fragments.py).
set -eu
SRC=${2:-$(dirname "$0")/..}
python3 "$SRC/tests/fp8_decode_fragments.py"
