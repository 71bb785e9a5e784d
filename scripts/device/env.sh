# Sourced by every scripts/device/*.sh that runs on the GPU machine: the shared libraries and the
# tokenizer that scripts/device/prepare.sh carries in .devcarry (run from the repository root).
export LD_LIBRARY_PATH="$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}"
[ -d "$PWD/.devcarry/cache" ] && export GPTOSS_CACHE="${GPTOSS_CACHE:-$PWD/.devcarry/cache}"
