/* The options every engine-running command takes (serve, generate, bench sweep), with vLLM's names,
 * parsed in one place into the runtime_args that src/engine/runtime.h turns into a backend and an
 * engine, so that they mean and accept the same everywhere. */
#ifndef GPTOSS_CLI_ENGINE_ARGS_H
#define GPTOSS_CLI_ENGINE_ARGS_H

#include "cli/args.h"
#include "engine/runtime.h"

/* 1 when argv[a->i] is one of them (consumed, its value stored); 0 when it is not one (nothing
 * consumed); -1 on a bad value (err_set names the option; report it with args_fail). --model is
 * one of them; the cross-option checks (backend, KV dtype) are runtime_check's, after parsing. */
int engine_args_parse(args_t *a, runtime_args *r);

/* Their --help lines (serve's defaults), appended to each command's usage text. */
#define ENGINE_ARGS_HELP                                                                           \
    "engine and backend (the same for serve, generate and bench sweep):\n"                         \
    "  --backend cpu|cuda             the backend (default cpu; cuda when built)\n"                \
    "  --max-num-seqs N               sequences running at once (default 256)\n"                   \
    "  --max-num-batched-tokens N     tokens per step, the chunked-prefill budget (default "       \
    "8192)\n"                                                                                      \
    "  --max-model-len N              longest sequence (default: the model's, as far as the KV\n"  \
    "                                 cache holds it; more than the cache holds is refused)\n"     \
    "  --stream-interval N            stream every N tokens (the first at once; default 1)\n"      \
    "  --[no-]enable-prefix-caching   (default on)\n"                                              \
    "  --[no-]async-scheduling        (default on)\n"                                              \
    "  --num-kv-blocks N              blocks of each KV pool, full and sliding (default: the\n"    \
    "                                 backend sizes them)\n"                                       \
    "  --block-size N                 tokens per KV block (default 32)\n"                          \
    "  --gpu-memory-utilization F     fraction of GPU memory to use (CUDA backend; default 0.9)\n" \
    "  --kv-cache-dtype auto|bf16|fp8|fp8_e4m3  KV cache element type (default auto = bf16 on\n"   \
    "                                 CUDA; fp8 = e4m3 with per-layer, per-KV-head scales: "       \
    "twice\n"                                                                                      \
    "                                 the tokens; the CPU backend emulates its rounding)\n"        \
    "  --enforce-eager                no CUDA graphs: every step launched kernel by kernel\n"      \
    "  --max-cudagraph-capture-size N decode batches up to N replay CUDA graphs (default 512;\n"   \
    "                                 0 = none)\n"                                                 \
    "  --tensor-parallel-size N, -tp N  ranks over every node (default 1; at most 8 a node):\n"    \
    "                                 heads, expert intermediate and vocabulary split over\n"      \
    "                                 them; the cpu backend emulates them one after the\n"         \
    "                                 other; the cuda backend one GPU per rank (synthetic\n"       \
    "                                 models; GPTOSS_TP_ONE_GPU=1: all on one GPU)\n"              \
    "  --enable-expert-parallel       split the MoE by experts over the ranks instead\n"           \
    "  --data-parallel-size N, -dp N  1 or 2 (DEP2, with --enable-expert-parallel): each rank\n"   \
    "                                 the whole attention, its own sequences and KV, half the\n"   \
    "                                 experts; every MoE layer over both ranks' rows\n"            \
    "  --nnodes N                     machines the -tp ranks span (default 1; cuda, NCCL)\n"       \
    "  --node-rank R                  this machine's rank, 0 to N-1 (default 0)\n"                 \
    "  --master-addr HOST             node 0's address, where NCCL's bootstrap listens\n"          \
    "  --master-port P                its port (default 29500)\n"                                  \
    "  --headless                     nodes 1 to N-1: run the GPU ranks only (no engine, no\n"     \
    "                                 API server), on the steps node 0 sends\n"                    \
    "  --target-tpot-ms T             while sequences decode, put only as many prompt tokens\n"    \
    "                                 in a step as keep it within T ms, by the steps'\n"           \
    "                                 measured cost (default 0: off)\n"

#endif
