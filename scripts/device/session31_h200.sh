#!/usr/bin/env bash
# Session 31, an H200 (needs_h200: the 120b decode at 1024 sequences needs ~148 GB; ~5 min): the
# head's figures beside the roofline on the card the issues' acceptance figures are for.
#  (1) roofline and bench latency: 120b decode 1, 8, 64; 20b decode 1;
#  (2) 120b decode 256 and 1024 with a 1k prefill, and an 8k prefill (issue 14);
#  (3) the step kernel (off by default) against the loop at 120b batch 1, one round;
#  (4) served 1k/1k at concurrency 1, 10 prompts: tokens/s per user (issue 13: >= 580) and the
#      median TTFT of a lone 1k prompt (issue 14: <= 25 ms).
# The head's default path differs from session 30's in attn_stream's counted grid barrier (H100:
# 120b decode 1 +2.8 %, 20b +2.1 %). No H200 figure since session 5 (120b decode 1 351, 8 1,241, 64
# 3,255, 256 8,570, 1024 14,128; prefill 1k 16,841, 8k 24,458; C = 1 351 tok/s per user, TTFT 64.8
# ms); the H100's at this head (call 4): 120b decode 1 342-345, 8 1,065, 64 2,908; 20b 1 486.
# Expected on the H200 (more bandwidth, the same SMs): decode 1 ~370-400, 8 ~1,200-1,400, 64
# ~3,300-3,800, prefill 1k ~30-36k, 8k ~40-46k, decode 1024 ~16-19k; the step kernel ~0.95 of the
# loop.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31h "session 31: the head on an H200"
head_figures
finish_call
