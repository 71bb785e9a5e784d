/* The GPU tests' RoPE tables: 120b's, on the host (model/rope.h: the CPU reference's rope_table)
 * and as the kernels take them (rope_kv.h's rope_kv_freq). */
#ifndef GPTOSS_TESTS_GPU_ROPE_TEST_UTIL_H
#define GPTOSS_TESTS_GPU_ROPE_TEST_UTIL_H

#include "check.h"

extern "C" {
#include "model/config.h"
#include "model/rope.h"
}
#include "backend/cuda/rope_kv.h"

/* rt and f for gpt-oss-120b's config (a failed copy is a test failure). */
static inline void rope_tables_120b(rope_table *rt, rope_kv_freq *f) {
    model_config c;
    config_preset_120b(&c);
    rope_init(rt, &c);
    CHECK(rope_kv_freq_init(f, rt->inv_freq, rt->half, rt->concentration) == 0,
          "rope_kv_freq_init");
}

#endif
