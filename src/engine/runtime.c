#include "engine/runtime.h"

#include "base/error.h"
#include "model/synthetic.h"
#include "model/tp_plan.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The backends this program knows, built or not. Both take --kv-cache-dtype fp8: the CUDA backend
 * stores e4m3 K and V (half the bytes, twice the tokens), the CPU backend keeps float32 but rounds
 * every cached value to e4m3 as the GPU stores it (the reference the GPU kernels are tested
 * against, and CI coverage of the engine with fp8). */
static const struct {
    const char *name;
} BACKENDS[] = {
    {"cpu"},
    {"cuda"},
};

static const char *backend_name(const runtime_args *a) {
    return a->backend ? a->backend : "cpu";
}

void runtime_args_default(runtime_args *a) {
    memset(a, 0, sizeof *a);
    a->backend = "cpu";
    engine_options_default(&a->eng);
    a->eng.max_model_len = 0; /* the model's, as far as the KV pool holds it */
    a->block_size = 32;
    a->gpu_memory_utilization = 0.9;
    a->kv_cache_dtype = "auto";
    a->max_cudagraph_capture_size = BACKEND_CUDAGRAPH_CAPTURE_DEFAULT;
}

int runtime_kv_dtype(const char *kv) {
    if (!kv || !strcmp(kv, "auto") || !strcmp(kv, "bf16")) return BACKEND_KV_AUTO;
    if (!strcmp(kv, "fp8") || !strcmp(kv, "fp8_e4m3")) return BACKEND_KV_FP8;
    return -1;
}

int runtime_check_kv_cache_dtype(const char *name, const char *kv) {
    (void)name; /* every backend takes every value (see BACKENDS) */
    if (runtime_kv_dtype(kv) < 0)
        return err_set("--kv-cache-dtype %s: expected auto, bf16, fp8 or fp8_e4m3", kv);
    return 0;
}

int runtime_check_data_parallel(const runtime_args *a) {
    const int dp = a->eng.data_parallel_size;
    if (dp == 0 || dp == 1) return 0;
    if (dp != 2)
        return err_set("--data-parallel-size %d: only 1 and 2 are supported (DEP2: data-parallel "
                       "attention, expert-parallel MoE)",
                       dp);
    if (!a->enable_expert_parallel)
        return err_set("--data-parallel-size %d needs --enable-expert-parallel (attention data "
                       "parallel, the experts split over the ranks)",
                       dp);
    if (a->tensor_parallel_size > 1)
        return err_set("--data-parallel-size %d cannot be combined with --tensor-parallel-size "
                       "%d (each data-parallel rank holds the whole attention)",
                       dp, a->tensor_parallel_size);
    return 0;
}

int runtime_check_nodes(const runtime_args *a) {
    const int nn = a->nnodes > 0 ? a->nnodes : 1, r = a->node_rank;
    const int tp = a->tensor_parallel_size > 0 ? a->tensor_parallel_size : 1;
    if (nn == 1) {
        if (r != 0)
            return err_set("--node-rank %d needs --nnodes (the number of nodes; with one node its "
                           "rank is 0)",
                           r);
        if (a->headless)
            return err_set("--headless needs --nnodes > 1 (it is for the nodes other than node 0)");
        if (a->master_addr) return err_set("--master-addr is only used with --nnodes > 1");
        if (a->master_port) return err_set("--master-port is only used with --nnodes > 1");
        if (tp > TP_MAX_NODE)
            return err_set("--tensor-parallel-size %d: at most %d ranks on one node (--nnodes N "
                           "spreads the ranks over N nodes)",
                           tp, TP_MAX_NODE);
        return 0;
    }
    if (r < 0 || r >= nn)
        return err_set("--node-rank %d: expected 0 to %d (--nnodes %d)", r, nn - 1, nn);
    if (a->eng.data_parallel_size > 1)
        return err_set("--nnodes %d cannot be combined with --data-parallel-size %d (DEP runs on "
                       "one node)",
                       nn, a->eng.data_parallel_size);
    if (tp < nn || tp % nn)
        return err_set("--tensor-parallel-size %d does not divide evenly over --nnodes %d (every "
                       "node holds the same number of ranks)",
                       tp, nn);
    if (tp / nn > TP_MAX_NODE)
        return err_set("--tensor-parallel-size %d over --nnodes %d: %d ranks a node, at most %d",
                       tp, nn, tp / nn, TP_MAX_NODE);
    if (tp > TP_MAX)
        return err_set("--tensor-parallel-size %d: at most %d ranks in all", tp, TP_MAX);
    if (!a->master_addr)
        return err_set("--nnodes %d needs --master-addr (node 0's address, where NCCL's bootstrap "
                       "listens; the same on every node)",
                       nn);
    char id[300];
    const int port = a->master_port ? a->master_port : RUNTIME_MASTER_PORT_DEFAULT;
    if (backend_nodes_comm_id(a->master_addr, port, id, sizeof id)) return -1;
    if (r == 0 && a->headless)
        return err_set("--headless is for the nodes other than node 0 (--node-rank 1 to %d); "
                       "node 0 runs the engine and the API server",
                       nn - 1);
    if (r > 0 && !a->headless)
        return err_set("--node-rank %d needs --headless (only node 0 runs the engine and the API "
                       "server)",
                       r);
    if (strcmp(backend_name(a), "cuda"))
        return err_set("--nnodes %d needs --backend cuda (the %s backend runs on one machine)", nn,
                       backend_name(a));
    return 0;
}

int runtime_check(const runtime_args *a) {
    const char *name = backend_name(a);
    bool known = false;
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        known = known || !strcmp(name, BACKENDS[i].name);
    if (!known) return err_set("--backend %s: unknown backend (cpu or cuda)", name);
    /* Before the build check: fp8 is refused for what the backend does, built here or not. */
    if (runtime_check_kv_cache_dtype(name, a->kv_cache_dtype) != 0) return -1;
    if (runtime_check_data_parallel(a) != 0) return -1;
    if (runtime_check_nodes(a) != 0) return -1;
    if (!backend_find(name))
        return err_set("--backend %s: this build has no %s backend (it is built when nvcc is found "
                       "and the backend is in the tree); use --backend cpu",
                       name, name);
    return 0;
}

char *runtime_resolve_model(const runtime_args *a) {
    if (runtime_check(a) != 0) return NULL;
    if (!a->model) return err_set("--model is required"), NULL;
    char *dir = synthetic_resolve(a->model, backend_name(a));
    if (!dir) err_prefix("--model %s", a->model);
    return dir;
}

void runtime_backend_options(const runtime_args *a, const char *model_dir, backend_options *out) {
    memset(out, 0, sizeof *out);
    out->model = model_dir;
    out->block_size = a->block_size > 0 ? a->block_size : 32;
    out->num_full_blocks = a->num_kv_blocks;
    out->num_swa_blocks = a->num_kv_blocks;
    out->max_slots = a->eng.max_num_seqs;
    out->max_model_len = a->eng.max_model_len;
    out->gpu_memory_utilization = a->gpu_memory_utilization;
    /* The flag's 0 means no graphs; the backend's 0 means its default. */
    out->max_cudagraph_capture_size =
        a->max_cudagraph_capture_size > 0 ? a->max_cudagraph_capture_size : -1;
    out->enforce_eager = a->enforce_eager;
    const int kv = runtime_kv_dtype(a->kv_cache_dtype);
    out->kv_dtype = kv < 0 ? BACKEND_KV_AUTO : kv; /* runtime_check refused the others */
    out->tensor_parallel_size = a->tensor_parallel_size > 0 ? a->tensor_parallel_size : 1;
    out->enable_expert_parallel = a->enable_expert_parallel;
    out->data_parallel_size = a->eng.data_parallel_size;
    out->nnodes = a->nnodes > 1 ? a->nnodes : 1;
    out->node_rank = out->nnodes > 1 ? a->node_rank : 0;
    out->master_addr = out->nnodes > 1 ? a->master_addr : NULL;
    out->master_port = out->nnodes < 2  ? 0
                       : a->master_port ? a->master_port
                                        : RUNTIME_MASTER_PORT_DEFAULT;
    out->headless = out->nnodes > 1 && a->headless;
}

/* The model length the engine gets: by default what the full-attention pool holds (at most the
 * model's); a longer --max-model-len could never be scheduled, so it is refused. */
static int settle_model_len(const backend_ops *ops, backend *b, engine_options *eo) {
    const int max_pos = ops->config(b)->max_position;
    int n_full = 0, n_swa = 0, block_size = 0;
    ops->kv_blocks(b, &n_full, &n_swa, &block_size);
    const long capacity = n_full > 0 ? (long)n_full * block_size : (long)max_pos;
    if (eo->max_model_len <= 0) {
        eo->max_model_len = (int)(capacity < max_pos ? capacity : max_pos);
        return 0;
    }
    if (eo->max_model_len > capacity)
        return err_set(
            "--max-model-len %d is more than the KV cache holds (%ld tokens); lower it or "
            "raise --num-kv-blocks",
            eo->max_model_len, capacity);
    return 0;
}

int runtime_build(const runtime_args *a, const char *model_dir, runtime *rt) {
    memset(rt, 0, sizeof *rt);
    if (runtime_check(a) != 0) return -1;
    if (a->headless)
        return err_set("--headless: this node runs no engine; start it with `gptoss serve`");
    const char *name = backend_name(a);
    const backend_ops *ops = backend_find(name);
    backend_options bo;
    runtime_backend_options(a, model_dir, &bo);
    backend *b = NULL;
    if (ops->create(&bo, &b) != 0) {
        if (b) ops->destroy(b);
        return err_prefix("loading %s on the %s backend", model_dir, name);
    }
    engine_options eo = a->eng;
    if (settle_model_len(ops, b, &eo) != 0 || engine_create(&eo, ops, b, &rt->eng) != 0) {
        ops->destroy(b); /* engine_create owns the backend only once it succeeded */
        return -1;
    }
    const int max_pos = ops->config(b)->max_position;
    rt->ops = ops;
    rt->opt = eo;
    rt->max_model_len = eo.max_model_len < max_pos ? eo.max_model_len : max_pos;
    return 0;
}

int runtime_run_headless(const runtime_args *a, const char *model_dir) {
    if (runtime_check(a) != 0) return -1;
    const char *name = backend_name(a);
    if (!a->headless) return err_set("a node without --headless runs the engine");
    const backend_ops *ops = backend_find(name);
    if (!ops->follow) return err_set("--headless: the %s backend cannot follow another node", name);
    backend_options bo;
    runtime_backend_options(a, model_dir, &bo);
    backend *b = NULL;
    if (ops->create(&bo, &b) != 0) {
        if (b) ops->destroy(b);
        return err_prefix("loading %s on the %s backend (node %d)", model_dir, name, a->node_rank);
    }
    const int rc = ops->follow(b);
    ops->destroy(b);
    return rc;
}
