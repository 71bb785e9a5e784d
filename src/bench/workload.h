/* The InferenceMAX workload ("random" dataset of vLLM's benchmark_serving.py as InferenceMAX runs
 * it): every request's input length and output length are drawn independently and uniformly from
 * [int(ratio·L), L] (ratio 0.8 by default), and its prompt is random token ids, so no two prompts
 * share a prefix and a prefix cache has nothing to hit. Output is forced to the drawn length with
 * ignore_eos.
 *
 * Everything is a function of (seed, index): the same seed gives the same prompts whatever the
 * concurrency or the order requests are sent in, and prompts are built only when sent (an 8k/1k
 * sweep at concurrency 1024 would otherwise hold 10,240 prompts of 8k ids in memory). */
#ifndef GPTOSS_BENCH_WORKLOAD_H
#define GPTOSS_BENCH_WORKLOAD_H

#include "tokenizer/bpe.h"

#include <stdint.h>

/* Prompt ids are drawn from [0, BENCH_TOKEN_LIMIT): o200k_harmony's ordinary BPE tokens. Ids from
 * 199998 up are special or reserved tokens (<|start|>, <|end|>, ...), which would let a random
 * prompt spell harmony structure. */
#define BENCH_TOKEN_LIMIT 199998

typedef struct {
    int isl, osl;
    uint64_t seed; /* of this prompt's ids */
} bench_item;

/* InferenceMAX's lower bound of a length: int(ratio · L), at least 1. */
int bench_len_lower(int len, double range_ratio);

/* n items: lengths uniform in [bench_len_lower(L), L] for input and output independently. */
void bench_workload(int n, int isl, int osl, double range_ratio, uint64_t seed, bench_item *out);

/* The item's prompt: isl ids uniform over [0, BENCH_TOKEN_LIMIT). */
void bench_prompt_ids(const bench_item *it, int32_t *ids);

/* A text prompt for the chat endpoint: the item's ids decoded by the tokenizer (valid UTF-8; a chat
 * template and retokenisation change the count, so the server's usage gives the real input length),
 * or, without a tokenizer (tok == NULL), isl random common English words. Heap string. */
char *bench_prompt_text(const bench_item *it, const tokenizer *tok);

#endif
