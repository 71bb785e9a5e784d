#include "cli/engine_args.h"

#include <stddef.h>

typedef struct {
    const char *name;
    long lo, hi;
} int_opt;

/* One integer option into *dst: 1 matched, 0 not this option, -1 bad value. */
static int take_int(args_t *a, int_opt o, int *dst) {
    const char *v;
    if (!args_opt(a, o.name, &v)) return 0;
    long x;
    if (!v || args_int(o.name, v, o.lo, o.hi, &x) != 0) return -1;
    *dst = (int)x;
    return 1;
}

/* One string option into *dst: 1 matched, 0 not this option, -1 no value. */
static int take_str(args_t *a, const char *name, const char **dst) {
    const char *v;
    if (!args_opt(a, name, &v)) return 0;
    if (!v) return -1;
    *dst = v;
    return 1;
}

int engine_args_parse(args_t *a, runtime_args *r) {
    engine_options *e = &r->eng;
    const struct {
        int_opt o;
        int *dst;
    } ints[] = {
        {{"--max-num-seqs", 1, 65536}, &e->max_num_seqs},
        {{"--max-num-batched-tokens", 1, 1 << 24}, &e->max_num_batched_tokens},
        {{"--max-model-len", 2, 1 << 24}, &e->max_model_len},
        {{"--stream-interval", 1, 1 << 20}, &e->stream_interval},
        {{"--num-kv-blocks", 1, 1 << 24}, &r->num_kv_blocks},
        {{"--block-size", 1, 4096}, &r->block_size},
        {{"--max-cudagraph-capture-size", 0, 65536}, &r->max_cudagraph_capture_size},
        /* the ranks of every node: runtime_check_nodes holds them to TP_MAX_NODE a node */
        {{"--tensor-parallel-size", 1, 64}, &r->tensor_parallel_size},
        {{"-tp", 1, 64}, &r->tensor_parallel_size},
        {{"--nnodes", 1, 64}, &r->nnodes},
        {{"--node-rank", 0, 63}, &r->node_rank},
        {{"--master-port", 1, 65535}, &r->master_port},
        /* 1 or 2 (runtime_check_data_parallel says why other values are refused) */
        {{"--data-parallel-size", 1, 8}, &e->data_parallel_size},
        {{"-dp", 1, 8}, &e->data_parallel_size},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int rc = take_int(a, ints[i].o, ints[i].dst);
        if (rc != 0) return rc;
    }
    const struct {
        const char *name;
        const char **dst;
    } strs[] = {
        {"--model", &r->model},
        {"--backend", &r->backend},
        {"--kv-cache-dtype", &r->kv_cache_dtype},
        {"--master-addr", &r->master_addr},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        int rc = take_str(a, strs[i].name, strs[i].dst);
        if (rc != 0) return rc;
    }
    const char *v;
    if (args_opt(a, "--gpu-memory-utilization", &v)) {
        if (!v || args_double("--gpu-memory-utilization", v, 0.01, 1, &r->gpu_memory_utilization))
            return -1;
        return 1;
    }
    if (args_opt(a, "--target-tpot-ms", &v)) {
        if (!v || args_double("--target-tpot-ms", v, 0, 1e6, &e->target_tpot_ms)) return -1;
        return 1;
    }
    if (args_flag(a, "--enable-prefix-caching")) return e->enable_prefix_caching = true, 1;
    if (args_flag(a, "--no-enable-prefix-caching")) return e->enable_prefix_caching = false, 1;
    if (args_flag(a, "--async-scheduling")) return e->async_scheduling = true, 1;
    if (args_flag(a, "--no-async-scheduling")) return e->async_scheduling = false, 1;
    if (args_flag(a, "--enforce-eager")) return r->enforce_eager = true, 1;
    if (args_flag(a, "--enable-expert-parallel")) return r->enable_expert_parallel = true, 1;
    if (args_flag(a, "--headless")) return r->headless = true, 1;
    return 0;
}
