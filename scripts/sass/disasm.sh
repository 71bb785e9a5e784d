#!/usr/bin/env bash
# SASS of a CUDA source file without a GPU or CUDA 13's disassembler: nvcc 13 compiles FILE.cu to an
# sm_90a cubin, its ELF header is rewritten in the CUDA 11 form (OS ABI 0x33, ABI version 7, e_flags
# 0x5a055a: sm_90, 64-bit addresses), and Debian's nvdisasm 11.8 (package nvidia-cuda-toolkit, in
# non-free; only the binary is used, unpacked with dpkg -x) prints the machine code: Hopper's
# instruction encoding is the same for both toolkits. Then scripts/sass/loops.py counts each loop's
# instructions by kind (PATTERN: a substring of the mangled kernel names).
#   scripts/sass/disasm.sh src/backend/cuda/moe_experts.cu moe_small_kernel > /tmp/x.txt
# The listing goes to $SASS_OUT (default /tmp/sass-out/NAME.sass).
set -euo pipefail
src=$1 pattern=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
tools=${NVDISASM_DIR:-/tmp/nvtk}
if [ ! -x "$tools/x/usr/bin/nvdisasm" ]; then
  grep -q non-free /etc/apt/sources.list.d/debian.sources ||
    sed -i 's/^Components: main$/Components: main contrib non-free/' /etc/apt/sources.list.d/debian.sources
  apt-get update -qq
  mkdir -p "$tools" && (cd "$tools" && apt-get download nvidia-cuda-toolkit && dpkg -x nvidia-cuda-toolkit_*.deb x)
fi
out=${SASS_OUT:-/tmp/sass-out}
mkdir -p "$out"
name=$(basename "$src" .cu)
/usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$root/src" ${NVCC_EXTRA:-} \
  -cubin -o "$out/$name.cubin" "$src"
python3 - "$out/$name.cubin" "$out/$name.v7.cubin" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
d[7], d[8] = 0x33, 7                      # OS ABI and ABI version of CUDA 11's cubins
struct.pack_into("<I", d, 48, 0x5a055a)   # e_flags: sm_90, virtual sm_90, 64-bit addresses
open(sys.argv[2], "wb").write(d)
PY
"$tools/x/usr/bin/nvdisasm" -c "$out/$name.v7.cubin" >"$out/$name.sass"
python3 "$root/scripts/sass/loops.py" "$out/$name.sass" "$pattern"
