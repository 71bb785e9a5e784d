/* The CUDA backend behind backend.h: gpt-oss on one Hopper GPU.
 *
 * create: the model's config (a checkpoint's config.json, or a preset for "synthetic:20b|120b
 *   [:layers=N][:seed=S]"), the weights on the device (weights_gpu.c; under tensor parallelism,
 *   with or without expert parallelism, each rank's share, weights_shard.c), the activation workspace for
 *   steps of up to 8192 tokens (runner_workspace.c; it grows if a longer step comes), the CUDA-graph buffers
 *   (graphs.c), and then the KV pools from what is left: the sliding pool sized for max_slots
 * sequences of window / block_size + 2 blocks plus a prefill chunk's worth, the full pool
 * everything else under gpu_memory_utilization x total memory (unless the options give the block
 * counts). launch/wait: runner.c, one stream, at most one step in flight; launch returns once the
 * step is queued, wait synchronises on the step's event. */
#include "backend/cuda/cuda_backend.h"

#include "model/rope.h"
#include "backend/cuda/runner.h"
#include "backend/cuda/tp_nodes.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "model/kv_scale.h"
#include "model/synthetic.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_RESERVE = 8192, R_CAP_MIN = 512, KV_SAFETY_MB = 512 };

/* "synthetic:PRESET[:layers=N][:seed=S]" */
static int parse_synthetic(const char *spec, model_config *cfg, uint64_t *seed) {
    char *s = xstrdup(spec + strlen("synthetic:")), *save = NULL;
    int rc = 0;
    long layers = -1;
    *seed = 0;
    char *tok = strtok_r(s, ":", &save);
    if (!tok)
        rc = err_set(
            "synthetic model: expected synthetic:20b or synthetic:120b[:layers=N][:seed=S]");
    else if (config_preset(tok, cfg) != 0)
        rc = err_prefix("synthetic model");
    for (tok = rc ? NULL : strtok_r(NULL, ":", &save); tok && rc == 0;
         tok = strtok_r(NULL, ":", &save)) {
        char *end = NULL;
        if (!strncmp(tok, "layers=", 7)) {
            layers = strtol(tok + 7, &end, 10);
            if (!*(tok + 7) || *end || layers < 1 || layers > CONFIG_MAX_LAYERS)
                rc = err_set("synthetic model: layers must be in [1, %d]", CONFIG_MAX_LAYERS);
        } else if (!strncmp(tok, "seed=", 5)) {
            *seed = strtoull(tok + 5, &end, 10);
            if (!*(tok + 5) || *end)
                rc = err_set("synthetic model: seed must be a non-negative integer");
        } else {
            rc = err_set("synthetic model: unknown option '%s' (layers=N, seed=S)", tok);
        }
    }
    if (rc == 0 && layers > 0) { /* as `gptoss make-model --layers N` does */
        cfg->n_layers = (int)layers;
        for (int i = 0; i < cfg->n_layers; i++) cfg->layer_sliding[i] = (i % 2 == 0);
    }
    free(s);
    return rc;
}

/* What the kernels are built for. */
static int check_shapes(const model_config *c, int bs) {
    if (c->head_dim != 64 || c->n_kv_heads < 1 || c->n_heads != 8 * c->n_kv_heads)
        return err_set(
            "cuda backend: the attention kernels need head_dim 64 and 8 query heads per KV head "
            "(the model has head_dim %d, %d heads, %d KV heads)",
            c->head_dim, c->n_heads, c->n_kv_heads);
    if (c->hidden % 64 || c->hidden > 8192 || c->intermediate % 64 || c->intermediate < 64)
        return err_set("cuda backend: hidden (%d) and intermediate (%d) sizes must be multiples of "
                       "64, hidden <= 8192",
                       c->hidden, c->intermediate);
    if (c->n_experts < 1 || c->n_experts > 256 || c->experts_per_tok < 1 ||
        c->experts_per_tok > 8 || c->experts_per_tok > c->n_experts)
        return err_set("cuda backend: %d experts with top-%d is outside the routing kernel's range "
                       "(<= 256, top <= 8)",
                       c->n_experts, c->experts_per_tok);
    if (!c->mxfp4) return err_set("cuda backend: the experts must be MXFP4");
    if (bs < 8 || bs > 256 || (bs & (bs - 1)))
        return err_set("cuda backend: block size %d is not a power of two in [8, 256]", bs);
    if (c->vocab < 1 || c->n_layers < 1) return err_set("cuda backend: empty model");
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_sliding[l] && c->sliding_window < 1)
            return err_set("cuda backend: sliding window < 1");
    return 0;
}

/* The KV pools. Under TP every rank takes rank 0's (`lead`'s) block counts, since one block
 * manager hands out blocks for all of them. With `others` more ranks still to come on this GPU
 * (GPTOSS_TP_ONE_GPU=1), rank 0 leaves room for their weights and workspaces (taken to be its own,
 * plus 1 GB each for the all-reduce buffers) and for their KV pools, equal to its own. */
static int kv_alloc(struct backend *b, const backend_options *opt, const struct backend *lead,
                    int others) {
    const model_config *c = &b->cfg;
    const int bs = b->block_size, n_kv = b->dims.n_kv_heads;
    /* K and V of one block in one layer: 2 bytes an element in bf16, 1 in e4m3 (so the same memory
     * holds twice the blocks, and the block manager gets them all through kv_blocks) */
    const size_t per_block =
        2 * (size_t)n_kv * (size_t)bs * (size_t)c->head_dim * attn_kv_elem_bytes(&b->dims);
    const long swa_default =
        (long)b->max_slots * ((b->W + bs - 1) / bs + 2) + (b->T_reserve + bs - 1) / bs;
    long nswa = !b->n_swa_layers          ? 0
                : lead                    ? lead->num_swa
                : opt->num_swa_blocks > 0 ? opt->num_swa_blocks
                                          : swa_default;
    const double swa_bytes = (double)nswa * (double)per_block * b->n_swa_layers;
    long nfull = 0;
    size_t free_b = 0, total_b = 0;
    CU(cudaMemGetInfo(&free_b, &total_b));
    const double util = opt->gpu_memory_utilization > 0 ? opt->gpu_memory_utilization : 0.9;
    if (util > 1.0)
        return err_set("cuda backend: gpu_memory_utilization %.3f is not in (0, 1]", util);
    if (b->n_full_layers) {
        if (lead) {
            nfull = lead->num_full;
        } else if (opt->num_full_blocks > 0) {
            nfull = opt->num_full_blocks;
        } else {
            const double rest = (double)others * ((double)b->gw.bytes + (double)b->ws.bytes + 1e9);
            const double budget = ((double)free_b - (1.0 - util) * (double)total_b -
                                   (double)KV_SAFETY_MB * (1 << 20) - rest) /
                                      (others + 1) -
                                  swa_bytes;
            nfull = budget > 0 ? (long)(budget / ((double)per_block * b->n_full_layers)) : 0;
            if (nfull < 1)
                return err_set("cuda backend: no memory left for the KV cache (%.2f GB free of "
                               "%.2f GB, %.0f%% to be "
                               "used, %.2f GB for the sliding pool)",
                               (double)free_b / 1e9, (double)total_b / 1e9, util * 100,
                               swa_bytes / 1e9);
        }
    }
    const long max_blocks = INT32_MAX / bs;
    if (nfull > max_blocks) nfull = max_blocks;
    if (nswa > max_blocks) nswa = max_blocks;
    b->num_full = (int)nfull, b->num_swa = (int)nswa;
    b->kv_bytes = 0;
    for (int l = 0; l < b->L; l++) {
        gpu_layer *ly = &b->gw.layers[l];
        const size_t half =
            (size_t)(c->layer_sliding[l] ? b->num_swa : b->num_full) * per_block / 2;
        if (cudaMalloc((void **)&ly->k_cache, half ? half : 256) != cudaSuccess ||
            cudaMalloc((void **)&ly->v_cache, half ? half : 256) != cudaSuccess) {
            (void)cudaGetLastError();
            return err_set("cuda backend: cannot allocate the KV cache (layer %d, %.2f GB): lower "
                           "gpu_memory_utilization or the block counts",
                           l, 2.0 * (double)half / 1e9);
        }
        /* Zeros: blocks nobody wrote yet (read by the padded rows of a CUDA graph) hold finite
         * data. */
        CU(cudaMemsetAsync(ly->k_cache, 0, half ? half : 256, b->stream));
        CU(cudaMemsetAsync(ly->v_cache, 0, half ? half : 256, b->stream));
        b->kv_bytes += 2 * half;
        if (b->dims.kv_fp8) { /* the layer's scale table (model/kv_scale.h), this rank's heads */
            float table[4 * 64], mine[4 * 64];
            if (c->n_kv_heads > 64) return err_set("cuda backend: more than 64 KV heads");
            kv_fp8_scales(c, l, table);
            const int n = c->n_kv_heads, h0 = b->tp_share.kv_head0;
            for (int part = 0; part < 4; part++)
                for (int j = 0; j < n_kv; j++) mine[part * n_kv + j] = table[part * n + h0 + j];
            const size_t tb = 4 * (size_t)n_kv * sizeof(float);
            CU(cudaMalloc((void **)&ly->kv_scales, tb));
            CU(cudaMemcpy(ly->kv_scales, mine, tb, cudaMemcpyHostToDevice));
        }
    }
    if (b->n_full_layers && (long)b->num_full * bs < b->max_model_len)
        log_warn("cuda backend: the full-attention pool holds %ld tokens, less than one sequence "
                 "of max_model_len %d",
                 (long)b->num_full * bs, b->max_model_len);
    return 0;
}

static void cuda_destroy(backend *b);

static int create_inner(struct backend *b, const backend_options *opt) {
    if (!opt || !opt->model) return err_set("cuda backend: no model given");
    /* Ranks wait for each other inside the all-reduce kernels, and CUDA's lazy module loading may
     * wait for a device's running kernels to finish before a kernel's first launch: one rank
     * launching a kernel for the first time while another spins in an all-reduce would never
     * return (this deadlocked TP4 on one H200). Every kernel is loaded at start-up instead. */
    if (opt->tensor_parallel_size > 1 || opt->data_parallel_size > 1)
        setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    if (opt->nnodes > 1 && opt->tensor_parallel_size < 2)
        return err_set("--nnodes %d needs --tensor-parallel-size of at least %d", opt->nnodes,
                       opt->nnodes);
    if (opt->data_parallel_size < 0 || opt->data_parallel_size > DP_MAX)
        return err_set("--data-parallel-size %d: expected 1 or %d", opt->data_parallel_size,
                       DP_MAX);
    int ndev = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 1) {
        (void)cudaGetLastError();
        return err_set("cuda backend: no CUDA device (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    CU(cudaGetDevice(&dev));

    const bool synthetic = !strncmp(opt->model, "synthetic:", 10);
    uint64_t seed = 0;
    if (synthetic ? parse_synthetic(opt->model, &b->cfg, &seed) : config_load(opt->model, &b->cfg))
        return -1;
    const model_config *c = &b->cfg;
    b->block_size = opt->block_size > 0 ? opt->block_size : 32;
    if (check_shapes(c, b->block_size)) return -1;
    b->V = c->vocab, b->H = c->hidden, b->Q = c->n_heads * c->head_dim,
    b->KVD = c->n_kv_heads * c->head_dim;
    b->QKV = b->Q + 2 * b->KVD, b->E = c->n_experts, b->K = c->experts_per_tok,
    b->I = c->intermediate;
    b->L = c->n_layers, b->W = c->sliding_window;
    for (int l = 0; l < b->L; l++) {
        if (c->layer_sliding[l])
            b->n_swa_layers++;
        else
            b->n_full_layers++;
    }
    b->eps = (float)c->rms_norm_eps;
    b->scale = 1.0f / sqrtf((float)c->head_dim);
    b->dims.n_heads = c->n_heads, b->dims.n_kv_heads = c->n_kv_heads,
    b->dims.head_dim = c->head_dim;
    b->dims.block_size = b->block_size;
    if (opt->kv_dtype != BACKEND_KV_AUTO && opt->kv_dtype != BACKEND_KV_FP8)
        return err_set("cuda backend: unknown KV cache dtype %d", opt->kv_dtype);
    b->dims.kv_fp8 = opt->kv_dtype == BACKEND_KV_FP8;
    b->max_slots = opt->max_slots > 0 ? opt->max_slots : 256;
    b->max_model_len = opt->max_model_len > 0 ? opt->max_model_len : 8192;
    if (b->max_model_len > c->max_position) b->max_model_len = c->max_position;
    rope_table rt;
    rope_init(&rt, c);
    if (rope_kv_freq_init(&b->freq, rt.inv_freq, rt.half, rt.concentration) != 0)
        return err_set("cuda backend: RoPE table of half %d unsupported", rt.half);
    b->tp_size = 1, b->tp_world = 1, b->device = dev;
    b->V_lm = b->V, b->V0 = 0, b->I_model = b->I;
    b->tp_share.n_q_heads = c->n_heads, b->tp_share.n_kv_heads = c->n_kv_heads;
    b->tp_share.n_units = c->intermediate / TP_UNIT, b->tp_share.n_experts = c->n_experts;
    b->tp_share.n_vocab = c->vocab, b->tp_share.adds_biases = true;
    /* --enable-expert-parallel alone: one rank holds every expert, which is the one-GPU model (the
     * CPU backend takes it alike). */
    if (opt->tensor_parallel_size > 1 || opt->data_parallel_size > 1)
        return tp_create(b, opt, synthetic, seed);
    return cuda_rank_setup(b, opt, synthetic, seed, NULL, 0);
}

int cuda_rank_setup(struct backend *b, const backend_options *opt, bool synthetic, uint64_t seed,
                    const struct backend *lead, int others_on_device) {
    const model_config *c = &b->cfg;
    struct cudaDeviceProp prop;
    CU(cudaSetDevice(b->device));
    CU(cudaDeviceGetAttribute(&b->sm_count, cudaDevAttrMultiProcessorCount, b->device));
    CU(cudaGetDeviceProperties(&prop, b->device));
    CU(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
    CU(cudaEventCreate(&b->t_start));
    CU(cudaEventCreate(&b->t_end));
    CU(gemm_ctx_create(&b->gemm));

    if (weights_gpu_alloc(b)) return -1;
    int wrc;
    if (b->tp_world > 1) /* a share, even as the only rank of its node (--nnodes) */
        wrc =
            synthetic ? weights_shard_synthetic(b, seed) : weights_shard_checkpoint(b, opt->model);
    else
        wrc = synthetic ? weights_gpu_synthetic(b, seed) : weights_gpu_upload(b, opt->model);
    if (wrc) return -1;

    const int gmax = opt->enforce_eager                     ? -1
                     : opt->max_cudagraph_capture_size == 0 ? BACKEND_CUDAGRAPH_CAPTURE_DEFAULT
                                                            : opt->max_cudagraph_capture_size;
    const int geff = gmax > 0 ? (gmax < b->max_slots ? gmax : b->max_slots) : 0;
    b->ws.R_cap = geff > R_CAP_MIN ? geff : R_CAP_MIN;
    b->T_reserve = geff > T_RESERVE ? geff : T_RESERVE;
    if (workspace_ensure(b, b->T_reserve)) return -1;
    if (graphs_init(b, gmax)) return -1;
    CU(cudaMalloc((void **)&b->slot_last, (size_t)b->max_slots * sizeof(int32_t)));
    CU(cudaMemsetAsync(b->slot_last, 0, (size_t)b->max_slots * sizeof(int32_t), b->stream));
    b->slot_last_host = xcalloc((size_t)b->max_slots, sizeof *b->slot_last_host);
    /* The router by columns' buffers (on by default: 26.5 MB at 120b) before the KV cache, whose
     * size is what memory is left. */
    if (runner_router_cols_build(b)) return -1;
    if (kv_alloc(b, opt, lead, others_on_device)) return -1;
    if (runner_step_table_build(b)) return -1;
    CU(cudaStreamSynchronize(b->stream));

    /* Off by default until measured on the H200 (attention.h). */
    const char *fm = getenv("GPTOSS_ATTN_FUSED_MERGE");
    if (fm && !strcmp(fm, "1") && b->tp_world > 1)
        return err_set("GPTOSS_ATTN_FUSED_MERGE=1 is not supported with --tensor-parallel-size");
    if (fm && !strcmp(fm, "1")) {
        CU(attn_decode_fused_init(b->max_slots, c->n_kv_heads));
        log_info("cuda backend: decode attention merges its splits in one kernel");
    }
    /* On by default (runner_masked.c; 64 constrained rows at 99.7 % of the unconstrained decode
     * speed on the H200, the host path at 21.6 %); GPTOSS_GPU_MASKS=0 takes the host path. */
    const char *gm = getenv("GPTOSS_GPU_MASKS");
    b->gpu_masks = !(gm && !strcmp(gm, "0"));
    if (b->gpu_masks) log_info("cuda backend: constrained rows are sampled on the device");
    /* runner.h, gemv.h's early form. O at one token by default: measured on the H200 (bench/NOTES.md,
     * session 8) +1.2 to +2.5 % at batch 1 over four rounds; QKV, the router and lm_head early were
     * no gain, and the form at 2 and 4 tokens slower. */
    const char *ew = getenv("GPTOSS_EARLY_WEIGHTS"), *et = getenv("GPTOSS_EARLY_MAX_T");
    b->early = ew ? atoi(ew) & 15 : RUNNER_EARLY_O;
    b->early_max_t = et ? atoi(et) : 1;
    const char *nr = getenv("GPTOSS_NORM_ROUTE");
    b->norm_route_max_t = nr ? atoi(nr) : 1;
    if (b->norm_route_max_t < 0 || b->norm_route_max_t > 4) b->norm_route_max_t = 0;
    if (b->early_max_t < 0) b->early_max_t = 0;
    if (b->early)
        log_info("cuda backend: early weight streams (mask %d) up to %d token(s) a step", b->early,
                 b->early_max_t);

    char graphs[48] = "off";
    if (b->graphs.max_size) snprintf(graphs, sizeof graphs, "up to batch %d", b->graphs.max_size);
    char rank[48] = "";
    if (b->tp_world > 1)
        snprintf(rank, sizeof rank, " rank %d of %d on GPU %d,", b->tp_grank, b->tp_world,
                 b->device);
    log_info("cuda backend:%s %s (%d SMs): weights %.2f GB, activations %.2f GB (steps of %d "
             "tokens), KV %.2f GB in %s "
             "(%d full blocks = %ld tokens, %d sliding blocks), CUDA graphs %s",
             rank, prop.name, b->sm_count, (double)b->gw.bytes / 1e9, (double)b->ws.bytes / 1e9,
             b->ws.T_cap, (double)b->kv_bytes / 1e9, b->dims.kv_fp8 ? "fp8 e4m3" : "bf16",
             b->num_full, (long)b->num_full * b->block_size, b->num_swa, graphs);
    log_info("cuda backend: KV cache capacity %ld tokens (%s)", (long)b->num_full * b->block_size,
             b->dims.kv_fp8 ? "fp8 e4m3, 1 byte an element" : "bf16, 2 bytes an element");
    return 0;
}

static int cuda_create(const backend_options *opt, backend **out) {
    *out = NULL;
    struct backend *b = xcalloc(1, sizeof *b);
    if (create_inner(b, opt) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err_msg());
        cuda_destroy(b);
        err_set("%s", msg);
        return -1;
    }
    *out = b;
    return 0;
}

static const model_config *cuda_config(backend *b) {
    return &b->cfg;
}

static void cuda_kv_blocks(backend *b, int *num_full, int *num_swa, int *block_size) {
    *num_full = b->num_full;
    *num_swa = b->num_swa;
    *block_size = b->block_size;
}

static int cuda_launch(backend *b, const step_batch *step) {
    if (b->running) return err_set("cuda backend: a step is already in flight");
    if (step->dp_size > 1 && b->dp_size < 2)
        return err_set("cuda backend: a step split over %d data-parallel ranks, but the backend "
                       "was made without --data-parallel-size",
                       step->dp_size);
    if (b->nodes && !tp_nodes_leads(b))
        return err_set("cuda backend: a headless node (--headless) runs node 0's steps only");
    const int rc = b->dp_size > 1    ? dp_launch(b, step)
                   : b->tp_world > 1 ? tp_launch(b, step)
                                     : runner_launch(b, step);
    if (rc != 0) return -1;
    b->running = true;
    return 0;
}

static int cuda_wait(backend *b, step_result *result) {
    if (!b->running) return err_set("cuda backend: no step in flight");
    b->running = false;
    return b->dp_size > 1    ? dp_wait(b, result)
           : b->tp_world > 1 ? tp_wait(b, result)
                             : runner_collect(b, result);
}

static void cuda_destroy(backend *b) {
    if (!b) return;
    if (b->tp_world > 1 && b->tp_rank == 0) tp_destroy_peers(b);
    cuda_rank_destroy(b);
    free(b);
}

void cuda_rank_destroy(struct backend *b) {
    if (b->stream) cudaSetDevice(b->device);
    if (b->stream) cudaStreamSynchronize(b->stream);
    graphs_free(b);
    runner_free(b);
    workspace_free(b);
    for (int l = 0; b->gw.layers && l < b->L; l++) {
        cudaFree(b->gw.layers[l].k_cache);
        cudaFree(b->gw.layers[l].v_cache);
        cudaFree(b->gw.layers[l].kv_scales);
    }
    runner_router_cols_free(b);
    runner_step_table_free(b);
    weights_gpu_free(b);
    cudaFree(b->slot_last);
    free(b->slot_last_host);
    if (b->gemm) gemm_ctx_destroy(b->gemm);
    if (b->done) cudaEventDestroy(b->done);
    attn_decode_fused_free();
    if (b->t_start) cudaEventDestroy(b->t_start);
    if (b->t_end) cudaEventDestroy(b->t_end);
    if (b->stream && !b->stream_borrowed) cudaStreamDestroy(b->stream);
    (void)cudaGetLastError();
}

void cuda_backend_debug_logits(backend *b, float *out, int cap_rows) {
    b->dbg_logits = out;
    b->dbg_cap = out ? cap_rows : 0;
    b->dbg_rows = 0;
}

int cuda_backend_debug_rows(const backend *b) {
    return b->dbg_rows;
}

void cuda_backend_get_stats(const backend *b, cuda_backend_stats *out) {
    memset(out, 0, sizeof *out);
    out->graph_captures = b->graphs.captures;
    out->graph_replays = b->graphs.replays;
    out->eager_decode_steps = b->graphs.eager_decodes;
    out->weights_gb = (double)b->gw.bytes / 1e9;
    out->workspace_gb = (double)b->ws.bytes / 1e9;
    out->kv_gb = (double)b->kv_bytes / 1e9;
    out->kv_fp8 = b->dims.kv_fp8;
    out->kv_tokens = (long)b->num_full * b->block_size;
    out->graph_max_batch = b->graphs.max_size;
    out->host_sampled_rows = b->host_rows_total;
    out->device_masked_rows = b->masked.rows_total;
    out->step_kernel_launches = b->step_kernel_launches;
}

/* A headless node's loop (--headless; tp_nodes.h). */
static int cuda_follow(backend *b) {
    if (!b->nodes) return err_set("cuda backend: --headless needs --nnodes > 1");
    return tp_nodes_follow(b);
}

const backend_ops cuda_backend_ops = {
    .name = "cuda",
    .create = cuda_create,
    .config = cuda_config,
    .kv_blocks = cuda_kv_blocks,
    .launch = cuda_launch,
    .wait = cuda_wait,
    .destroy = cuda_destroy,
    .follow = cuda_follow,
};
