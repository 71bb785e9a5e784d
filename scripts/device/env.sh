# Sourced by every scripts/device/*.sh that runs on the GPU machine: the shared libraries and the
# tokenizer that scripts/device/prepare.sh carries in .devcarry (run from the repository root).
export LD_LIBRARY_PATH="$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}"
[ -d "$PWD/.devcarry/cache" ] && export GPTOSS_CACHE="${GPTOSS_CACHE:-$PWD/.devcarry/cache}"
# A test's exit status as a word for the summaries.
res() { case $1 in 0) echo PASS ;; 77) echo SKIP ;; *) echo "FAIL($1)" ;; esac; }
# summary_header FILE TITLE: the summary's first lines (title, GPU, commit carried), also printed.
summary_header() {
  {
    echo "# $2"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "commit $(cat .devcarry/commit.txt 2>/dev/null), $(nvidia-smi --list-gpus | wc -l) GPU(s)"
  } | tee "$1"
}
