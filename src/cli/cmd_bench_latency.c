/* gptoss bench latency: in-process decode and prefill speed of a backend (no HTTP, no engine), each
 * line held against the roofline of bench/roofline.h.
 *
 * Decode at batch B and context C: B sequences are filled with a C-token prompt first (prefill
 * steps of up to 8192 tokens, several sequences each), then every batch size runs its own decode
 * steps from position C on: a few warm-up steps (the first step of a batch size captures its CUDA
 * graph), then
 * --decode-steps timed steps, each timed from launch to wait on the host clock (what the engine
 * sees); the line reports the median. The same filled sequences serve every batch size (a smaller
 * batch takes the first B), so the fill is paid once. Tokens come from the device
 * (STEP_TOKEN_FROM_DEVICE) and are sampled greedily, as in a real decode loop.
 * Prefill: one sequence of P tokens in one step, median of 3 after a warm-up.
 *
 * The steps are built here the way the engine builds them, with a fixed block layout: each sequence
 * owns a contiguous run of full-pool blocks; its sliding-pool blocks that outlive the prompt are a
 * ring of window / block + 3 blocks (logical block j lives in ring slot j mod R, never needed by
 * then), and the prompt's earlier sliding blocks come from a scratch area shared by the sequences
 * of one fill step.
 *
 * Roofline: decode lines use roofline_decode (batch, context = C + half the decode steps); prefill
 * lines sum roofline_decode's FLOPs over the prompt's positions (lm_head on the last token only),
 * with the weights and the touched experts read once. Defaults: 4.2 TB/s, 790 TFLOP/s (DESIGN.md).
 */
#include "step/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "bench/roofline.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/runtime.h"
#include "model/synthetic.h"

#ifdef GPTOSS_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss bench latency --model synthetic:120b|synthetic:20b|DIR [--backend cuda|cpu]\n"
    "                            [--batches 1,8,64,256,1024] [--context 1024] [--decode-steps 32]\n"
    "                            [--warmup 3] [--prefill 1024,8192] [--output-json FILE]\n"
    "                            [--gpu-memory-utilization F] [--max-cudagraph-capture-size N]\n"
    "                            [--enforce-eager] [--kv-cache-dtype auto|bf16|fp8|fp8_e4m3]\n"
    "                            [--bandwidth GB/s] [--flops TFLOP/s] [--constrained]\n"
    "                            [--tensor-parallel-size N | -tp N] [--enable-expert-parallel]\n"
    "                            [--data-parallel-size 1|2 | -dp 1|2]\n"
    "In-process decode tokens/s at each batch size (context C, KV filled by a prefill first; "
    "median\n"
    "step time from launch to wait) and prefill tokens/s for each prompt length, with the fraction "
    "of\n"
    "the roofline (gptoss roofline). Prints a markdown table; --output-json writes the numbers.\n"
    "synthetic:MODEL[:layers=N][:seed=S] makes random weights of the real shapes on the GPU.\n"
    "CUDA graphs: decode batches up to --max-cudagraph-capture-size (default 512; 0 = none) "
    "replay\n"
    "them; --enforce-eager runs without any.\n"
    "--constrained gives every decode row a structured-output token mask (one allowing every 8th\n"
    "token, published before the step as the engine publishes masks while it runs): the cost of\n"
    "constrained sampling, on the device (default) or on the host (GPTOSS_GPU_MASKS=0).\n"
    "--kv-cache-dtype fp8 stores K and V as e4m3 (the roofline then counts 1 byte an element);\n"
    "the JSON records it as \"kv_cache_dtype\".\n"
    "--tensor-parallel-size N shards the model over N GPUs (CUDA: synthetic models; the roofline\n"
    "then gives each GPU 1/N of the bytes and FLOPs); the JSON records \"tensor_parallel_size\".\n"
    "--enable-expert-parallel splits the MoE over the N ranks by experts instead of by their\n"
    "intermediate dimension; the JSON records \"enable_expert_parallel\".\n"
    "--data-parallel-size 2 (with --enable-expert-parallel) runs DEP2: every GPU the whole\n"
    "attention and half the experts, sequence k on rank k mod 2 (its KV there; each rank's pools\n"
    "sized for every sequence), each step's MoE over both ranks' rows; eager only. The roofline\n"
    "stays one GPU's model of the whole step; the JSON records \"data_parallel_size\".\n";

enum { BS = 32, FILL_TOKENS = 8192 };

typedef struct {
    const char *phase;
    int batch, context, tokens;
    double seconds, tokens_per_s, roofline_tps;
} bench_line;

/* ---- the block layout ---- */

typedef struct {
    int C, W, R, jr,
        F; /* context, window, ring blocks, first ring-held logical block, fill group */
    int n_dec, nfs,
        nfp; /* decode sequences; full blocks per decode sequence; blocks of the prefill seq */
    int full_pre, swa_ring, swa_scratch, swa_pre; /* region starts */
    int num_full, num_swa;
    bool has_full, has_swa;
} layout;

static void layout_make(layout *L, const model_config *c, int n_dec, int C, int decode_total,
                        int max_prefill) {
    memset(L, 0, sizeof *L);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_sliding[l])
            L->has_swa = true;
        else
            L->has_full = true;
    }
    L->C = C, L->W = c->sliding_window, L->n_dec = n_dec;
    L->R = (L->W + BS - 1) / BS + 3;
    L->jr = (C - L->W + 1 > 0 ? C - L->W + 1 : 0) / BS;
    L->F = FILL_TOKENS / (C > 0 ? C : 1);
    if (L->F < 1) L->F = 1;
    if (L->F > n_dec) L->F = n_dec;
    L->nfs = (C + decode_total + BS - 1) / BS;
    L->nfp = (max_prefill + BS - 1) / BS;
    if (L->nfp < 1) L->nfp = 1;
    L->full_pre = n_dec * L->nfs;
    L->num_full = L->full_pre + L->nfp;
    L->swa_ring = 0;
    L->swa_scratch = n_dec * L->R;
    L->swa_pre = L->swa_scratch + L->F * (L->jr > 0 ? L->jr : 1);
    L->num_swa = L->swa_pre + L->nfp;
}

/* Physical block of logical block j of sequence s (s == n_dec: the prefill sequence). */
static int32_t full_block(const layout *L, int s, int j) {
    return s == L->n_dec ? L->full_pre + j : s * L->nfs + j;
}
static int32_t swa_block(const layout *L, int s, int j) {
    if (s == L->n_dec) return L->swa_pre + j;
    if (j >= L->jr) return L->swa_ring + s * L->R + j % L->R;
    return L->swa_scratch + (s % L->F) * L->jr + j;
}

/* ---- building steps ---- */

typedef struct {
    step_batch b;
    int cap_seqs, cap_tokens, cap_full, cap_swa;
} stepbuf;

static void sb_reserve(stepbuf *s, int n, int T, int fstride, int sstride) {
    step_batch *b = &s->b;
    if (n > s->cap_seqs) {
        s->cap_seqs = n;
        b->slot = xrealloc(b->slot, (size_t)n * sizeof(int32_t));
        b->query_start = xrealloc(b->query_start, (size_t)(n + 1) * sizeof(int32_t));
        b->start_pos = xrealloc(b->start_pos, (size_t)n * sizeof(int32_t));
        b->swa_first = xrealloc(b->swa_first, (size_t)n * sizeof(int32_t));
        b->sample = xrealloc(b->sample, (size_t)n * sizeof(bool));
        b->reset_slot = xrealloc(b->reset_slot, (size_t)n * sizeof(bool));
        b->params = xrealloc(b->params, (size_t)n * sizeof(sampling_params));
        b->output_len = xrealloc(b->output_len, (size_t)n * sizeof(int32_t));
        b->history = xrealloc((void *)b->history, (size_t)n * sizeof(int32_t *));
        b->history_len = xrealloc(b->history_len, (size_t)n * sizeof(int32_t));
        b->prompt_len = xrealloc(b->prompt_len, (size_t)n * sizeof(int32_t));
    }
    if (T > s->cap_tokens) {
        s->cap_tokens = T;
        b->token_ids = xrealloc(b->token_ids, (size_t)T * sizeof(int32_t));
        b->positions = xrealloc(b->positions, (size_t)T * sizeof(int32_t));
    }
    if (n * fstride > s->cap_full) {
        s->cap_full = n * fstride;
        b->full_tables = xrealloc(b->full_tables, (size_t)s->cap_full * sizeof(int32_t));
    }
    if (n * sstride > s->cap_swa) {
        s->cap_swa = n * sstride;
        b->swa_tables = xrealloc(b->swa_tables, (size_t)s->cap_swa * sizeof(int32_t));
    }
}

static void sb_free(stepbuf *s) {
    step_batch *b = &s->b;
    free(b->slot), free(b->query_start), free(b->start_pos), free(b->swa_first), free(b->sample),
        free(b->reset_slot);
    free(b->params), free(b->output_len), free((void *)b->history), free(b->history_len),
        free(b->prompt_len);
    free(b->token_ids), free(b->positions), free(b->full_tables), free(b->swa_tables);
}

/* DEP (dp ranks > 1): sequence s lives on rank s % dp; a step's sequences are grouped by rank
 * (step/batch.h), so seq[0..n) is reordered that way, the order kept within a rank. */
static void order_by_rank(int *seq, int n, int dp) {
    if (dp < 2) return;
    int *tmp = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *tmp), k = 0;
    for (int r = 0; r < dp; r++)
        for (int i = 0; i < n; i++)
            if (seq[i] % dp == r) tmp[k++] = seq[i];
    memcpy(seq, tmp, (size_t)n * sizeof *seq);
    free(tmp);
}

/* A step where sequences seq[0..n) each run nn tokens from position p0 (the same for all). Token
 * ids come from `prompt` (fill and prefill) or from the device (prompt NULL: decode). dp > 1: the
 * DEP layout (seq ordered by order_by_rank; every rank's pools use the one block layout). */
static void sb_build(stepbuf *s, const layout *L, const int *seq, int n, int p0, int nn,
                     const int32_t *prompt, int vocab, int dp) {
    const int last = p0 + nn - 1, lo = (p0 - L->W + 1 > 0 ? p0 - L->W + 1 : 0) / BS;
    const int fstride = last / BS + 1, sstride = last / BS - lo + 1;
    sb_reserve(s, n, n * nn, fstride, sstride);
    step_batch *b = &s->b;
    b->n_seqs = n, b->n_tokens = n * nn, b->block_size = BS;
    b->full_stride = fstride, b->swa_stride = sstride;
    for (int k = 0; k < n; k++) {
        b->slot[k] = seq[k];
        b->query_start[k] = k * nn;
        b->start_pos[k] = p0;
        b->swa_first[k] = lo;
        b->sample[k] = true;
        b->reset_slot[k] = p0 == 0;
        b->params[k] = sampling_params_default();
        b->params[k].temperature = 0;
        b->output_len[k] = prompt ? 0 : p0 - L->C;
        b->history[k] = NULL, b->history_len[k] = 0;
        b->prompt_len[k] = prompt ? p0 + nn : L->C;
        for (int j = 0; j < nn; j++) {
            b->token_ids[k * nn + j] =
                prompt ? prompt[(p0 + j + 7919 * seq[k]) % vocab] % vocab : STEP_TOKEN_FROM_DEVICE;
            b->positions[k * nn + j] = p0 + j;
        }
        for (int j = 0; j < fstride; j++)
            b->full_tables[k * fstride + j] = L->has_full ? full_block(L, seq[k], j) : -1;
        for (int j = 0; j < sstride; j++)
            b->swa_tables[k * sstride + j] = L->has_swa ? swa_block(L, seq[k], lo + j) : -1;
    }
    b->query_start[n] = n * nn;
    b->dp_size = dp > 1 ? dp : 0;
    for (int r = 0, k = 0; dp > 1 && r < dp; r++) {
        b->dp_seq0[r] = k;
        while (k < n && seq[k] % dp == r) k++;
        b->dp_seq0[r + 1] = k;
    }
}

static int run_step(const backend_ops *ops, backend *be, stepbuf *s, double *seconds) {
    step_result r = {0};
    double t0 = now_seconds();
    int rc = ops->launch(be, &s->b);
    if (rc == 0) rc = ops->wait(be, &r);
    if (seconds) *seconds = now_seconds() - t0;
    step_result_free(&r, s->b.n_seqs);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the roofline of a prefill ---- */

static double prefill_roofline_tps(const model_config *c, int P, double bw, double fl, int kv_bytes,
                                   int tp) {
    roofline_in in = {
        .batch = 1, .context = 1, .kv_bytes = kv_bytes, .tp = tp, .bandwidth = bw, .flops = fl};
    roofline_out o;
    double flops = 0;
    for (int p = 1; p <= P; p++) {
        in.context = p;
        roofline_decode(c, &in, &o);
        flops += o.flops_per_step;
    }
    flops -= (double)(P - 1) * 2.0 * c->vocab * c->hidden; /* logits for the last token only */
    in.batch = P, in.context = 0;
    roofline_decode(c, &in, &o);
    const double kv_write =
        (double)P * 2.0 * c->n_kv_heads * c->head_dim * (double)kv_bytes * c->n_layers;
    const double t = fmax((o.weight_bytes + o.expert_bytes + kv_write) / tp / bw, flops / fl);
    return P / t;
}

/* ---- the command ---- */

typedef struct {
    const char *model, *backend, *json_path;
    int32_t *batches, *prefills;
    int n_batches, n_prefills;
    long context, steps, warmup, graphs;
    bool eager; /* --enforce-eager */
    double util, bw, fl;
    const char *kv_name; /* --kv-cache-dtype as given */
    int kv_dtype;        /* BACKEND_KV_AUTO or BACKEND_KV_FP8 */
    long kv_tokens;      /* CUDA: tokens the KV cache holds (from the backend) */
    long tp;             /* --tensor-parallel-size */
    long dp;             /* --data-parallel-size (DEP2: 2) */
    bool ep;             /* --enable-expert-parallel */
    bool constrained;    /* --constrained: decode rows carry a token mask */
} bench_opts;

/* --constrained: every decode row gets the same mask, allowing every 8th token (a grammar's mask is
 * usually far sparser; the sampling cost does not depend on how many tokens it allows). The gate is
 * open before the step: the engine publishes masks while the forward pass runs, long before the
 * logits exist, so the sampler never waits for them. */
typedef struct {
    step_masks m;
    uint32_t *words;
    const uint32_t **rows;
} bench_masks;

static void bench_masks_init(bench_masks *bm, int vocab, int rows) {
    step_masks_init(&bm->m);
    bm->m.words = (size_t)(vocab + 31) / 32;
    bm->words = xcalloc(bm->m.words, sizeof *bm->words);
    for (int t = 0; t < vocab; t += 8) bm->words[t / 32] |= 1u << (t % 32);
    bm->rows = xmalloc((size_t)(rows > 0 ? rows : 1) * sizeof *bm->rows);
    for (int i = 0; i < rows; i++) bm->rows[i] = bm->words;
    bm->m.rows = bm->rows;
    bm->m.n_rows = rows;
    step_masks_publish(&bm->m);
}

static void bench_masks_free(bench_masks *bm) {
    step_masks_destroy(&bm->m);
    free(bm->words), free((void *)bm->rows);
}

/* What "kv_cache_dtype" records: the element type the backend really keeps. */
static const char *kv_label(const bench_opts *o) {
    if (o->kv_dtype == BACKEND_KV_FP8) return "fp8_e4m3";
    return !strcmp(o->backend, "cpu") ? "float32" : "bf16";
}

static int bench_run(bench_opts *o, bench_line **lines_out, int *n_lines_out,
                     model_config *cfg_out) {
    const backend_ops *ops = backend_find(o->backend);
    if (!ops) return err_set("backend '%s' is not built into this program", o->backend);
    int bmax = 1, pmax = 1;
    for (int i = 0; i < o->n_batches; i++) bmax = o->batches[i] > bmax ? o->batches[i] : bmax;
    for (int i = 0; i < o->n_prefills; i++) pmax = o->prefills[i] > pmax ? o->prefills[i] : pmax;
    const int C = (int)o->context, decode_total = (int)(o->warmup + o->steps);
    if (o->n_batches == 0) bmax = 0;

    /* The config first (for the block layout): synthetic presets or DIR/config.json. */
    model_config cfg;
    if (!strncmp(o->model, "synthetic:", 10)) {
        char preset[32];
        const char *p = o->model + 10, *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(preset, sizeof preset, "%.*s",
                 (int)(len < sizeof preset ? len : sizeof preset - 1), p);
        if (config_preset(preset, &cfg) != 0) return -1;
        const char *lay = strstr(o->model, ":layers=");
        if (lay) {
            cfg.n_layers = atoi(lay + 8);
            for (int i = 0; i < cfg.n_layers && i < CONFIG_MAX_LAYERS; i++)
                cfg.layer_sliding[i] = (i % 2 == 0);
        }
    } else if (config_load(o->model, &cfg) != 0) {
        return -1;
    }
    layout L;
    layout_make(&L, &cfg, bmax > 0 ? bmax : 1, C, decode_total, pmax);

    backend_options bo = {.model = o->model,
                          .block_size = BS,
                          .num_full_blocks = L.has_full ? L.num_full : 0,
                          .num_swa_blocks = L.has_swa ? L.num_swa : 0,
                          .max_slots = (bmax > 0 ? bmax : 1) + 1,
                          .max_model_len = (C + decode_total > pmax ? C + decode_total : pmax) + BS,
                          .gpu_memory_utilization = o->util,
                          .max_cudagraph_capture_size = (int)o->graphs,
                          .enforce_eager = o->eager,
                          .kv_dtype = o->kv_dtype,
                          .tensor_parallel_size = (int)o->tp,
                          .enable_expert_parallel = o->ep,
                          .data_parallel_size = (int)o->dp};
    double t0 = now_seconds();
    backend *be = NULL;
    if (ops->create(&bo, &be) != 0) {
        if (be) ops->destroy(be);
        return -1;
    }
    const model_config *c = ops->config(be);
    *cfg_out = *c;
    fprintf(stderr, "bench: %s on %s ready in %.1f s\n", o->model, ops->name, now_seconds() - t0);
    int nf = 0, ns = 0, kbs = 0;
    ops->kv_blocks(be, &nf, &ns, &kbs);
    if ((L.has_full && nf < L.num_full) || (L.has_swa && ns < L.num_swa) || kbs != BS) {
        ops->destroy(be);
        return err_set(
            "the backend gave %d/%d KV blocks of %d tokens, the benchmark needs %d/%d of %d", nf,
            ns, kbs, L.num_full, L.num_swa, BS);
    }

    const int V = c->vocab;
    int32_t *prompt = xmalloc((size_t)V * sizeof *prompt);
    rng_t rng;
    rng_seed(&rng, 12345);
    for (int i = 0; i < V; i++) prompt[i] = (int32_t)(rng_next(&rng) % (uint64_t)V);
    stepbuf sb = {0};
    int *seq = xmalloc((size_t)(bmax > 0 ? bmax : 1) * sizeof *seq);
    bench_line *lines = xcalloc((size_t)(o->n_batches + o->n_prefills + 1), sizeof *lines);
    int n_lines = 0, rc = 0;
    double *times = xmalloc((size_t)(o->steps > 3 ? o->steps : 3) * sizeof *times);

    /* Fill: C tokens into each of the bmax sequences, F sequences a step. */
    if (bmax > 0 && C > 0) {
        t0 = now_seconds();
        double last = t0;
        int fill_steps = 0;
        for (int s0 = 0; s0 < bmax && rc == 0; s0 += L.F) {
            int n = bmax - s0 < L.F ? bmax - s0 : L.F;
            for (int k = 0; k < n; k++) seq[k] = s0 + k;
            order_by_rank(seq, n, (int)o->dp);
            for (int p0 = 0; p0 < C && rc == 0;
                 p0 += FILL_TOKENS) { /* contexts longer than a step: chunks */
                int nn = C - p0 < FILL_TOKENS ? C - p0 : FILL_TOKENS;
                sb_build(&sb, &L, seq, n, p0, nn, prompt, V, (int)o->dp);
                rc = run_step(ops, be, &sb, NULL);
                fill_steps++;
            }
            if (now_seconds() - last > 5) {
                last = now_seconds();
                fprintf(stderr, "bench: filled %d / %d sequences (%.0f tokens/s)\n", s0 + n, bmax,
                        (double)(s0 + n) * C / (last - t0));
            }
        }
        if (rc == 0) {
            double dt = now_seconds() - t0;
            bench_line *ln = &lines[n_lines++];
            ln->phase = "fill", ln->batch = L.F, ln->context = C, ln->tokens = bmax * C;
            ln->seconds = dt / (fill_steps > 0 ? fill_steps : 1),
            ln->tokens_per_s = (double)bmax * C / dt;
            ln->roofline_tps = prefill_roofline_tps(
                c, C, o->bw, o->fl, o->kv_dtype == BACKEND_KV_FP8 ? 1 : 2, (int)o->tp);
            fprintf(stderr, "bench: filled %d sequences x %d tokens in %.1f s\n", bmax, C, dt);
        }
    }

    /* Decode, each batch size from position C on. */
    bench_masks bm;
    if (o->constrained) bench_masks_init(&bm, V, bmax);
    for (int bi = 0; bi < o->n_batches && rc == 0; bi++) {
        const int B = o->batches[bi];
        for (int k = 0; k < B; k++) seq[k] = k;
        order_by_rank(seq, B, (int)o->dp);
        int nt = 0;
        for (int j = 0; j < decode_total && rc == 0; j++) {
            double dt;
            sb_build(&sb, &L, seq, B, C + j, 1, NULL, V, (int)o->dp);
            if (o->constrained) {
                for (int k = 0; k < B; k++) sb.b.params[k].constrained = true;
                sb.b.masks = &bm.m;
            }
            rc = run_step(ops, be, &sb, &dt);
            sb.b.masks = NULL;
            if (j >= o->warmup) times[nt++] = dt;
        }
        if (rc) break;
        const double med = median(times, nt);
        roofline_in in = {.batch = B,
                          .context = C + (int)o->steps / 2,
                          .kv_bytes = o->kv_dtype == BACKEND_KV_FP8 ? 1 : 2,
                          .tp = (int)o->tp,
                          .bandwidth = o->bw,
                          .flops = o->fl};
        roofline_out ro;
        roofline_decode(c, &in, &ro);
        bench_line *ln = &lines[n_lines++];
        ln->phase = o->constrained ? "decode constrained" : "decode", ln->batch = B,
        ln->context = C, ln->tokens = B;
        ln->seconds = med, ln->tokens_per_s = B / med, ln->roofline_tps = ro.tokens_per_second;
        fprintf(stderr,
                "bench: decode B=%d: %.2f ms/step, %.0f tokens/s (%.0f%% of the roofline)\n", B,
                med * 1e3, B / med, 100 * (B / med) / ro.tokens_per_second);
    }

    /* Prefill: one sequence, one step, median of 3 after a warm-up. */
    for (int pi = 0; pi < o->n_prefills && rc == 0; pi++) {
        const int P = o->prefills[pi];
        int s = L.n_dec;
        for (int r = 0; r < 4 && rc == 0; r++) {
            double dt;
            sb_build(&sb, &L, &s, 1, 0, P, prompt, V, (int)o->dp);
            rc = run_step(ops, be, &sb, &dt);
            if (r > 0) times[r - 1] = dt;
        }
        if (rc) break;
        const double med = median(times, 3);
        bench_line *ln = &lines[n_lines++];
        ln->phase = "prefill", ln->batch = 1, ln->context = P, ln->tokens = P;
        ln->seconds = med, ln->tokens_per_s = P / med,
        ln->roofline_tps = prefill_roofline_tps(c, P, o->bw, o->fl,
                                                o->kv_dtype == BACKEND_KV_FP8 ? 1 : 2, (int)o->tp);
        fprintf(stderr, "bench: prefill %d tokens: %.1f ms, %.0f tokens/s\n", P, med * 1e3,
                P / med);
    }
    if (rc) err_prefix("bench step failed");

#ifdef GPTOSS_HAVE_CUDA
    if (!strcmp(ops->name, "cuda")) {
        cuda_backend_stats st;
        cuda_backend_get_stats(be, &st);
        o->kv_tokens = st.kv_tokens;
        fprintf(stderr,
                "bench: weights %.2f GB, activations %.2f GB, KV %.2f GB (%s, %ld tokens); CUDA "
                "graphs up to batch "
                "%d: %ld captured, "
                "%ld replays, %ld eager decode steps\n",
                st.weights_gb, st.workspace_gb, st.kv_gb, st.kv_fp8 ? "fp8 e4m3" : "bf16",
                st.kv_tokens, st.graph_max_batch, st.graph_captures, st.graph_replays,
                st.eager_decode_steps);
    }
#endif
    ops->destroy(be);
    sb_free(&sb);
    if (o->constrained) bench_masks_free(&bm);
    free(prompt), free(seq), free(times);
    *lines_out = lines, *n_lines_out = n_lines;
    return rc;
}

static void print_table(const bench_opts *o, const bench_line *lines, int n) {
    printf("\n| model | backend | kv | phase | batch | context | tokens/s | ms/step | roofline "
           "tokens/s | of roofline |\n");
    printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        const bench_line *l = &lines[i];
        char be_name[32];
        if (o->dp > 1)
            snprintf(be_name, sizeof be_name, "%s dep%ld", o->backend, o->dp);
        else
            snprintf(be_name, sizeof be_name, o->tp > 1 ? "%s tp%ld%s" : "%s", o->backend, o->tp,
                     o->ep ? " ep" : "");
        printf("| %s | %s | %s | %s | %d | %d | %.0f | %.2f | %.0f | %.1f%% |\n", o->model, be_name,
               kv_label(o), l->phase, l->batch, l->context, l->tokens_per_s, l->seconds * 1e3,
               l->roofline_tps, 100 * l->tokens_per_s / l->roofline_tps);
    }
}

static int write_json(const bench_opts *o, const model_config *c, const bench_line *lines, int n) {
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "model", json_string(o->model));
    json_object_set_new(root, "backend", json_string(o->backend));
    json_object_set_new(root, "kv_cache_dtype", json_string(kv_label(o)));
    json_object_set_new(root, "tensor_parallel_size", json_integer(o->tp));
    json_object_set_new(root, "enable_expert_parallel", json_boolean(o->ep));
    json_object_set_new(root, "data_parallel_size", json_integer(o->dp));
    if (o->kv_tokens > 0)
        json_object_set_new(root, "kv_capacity_tokens", json_integer(o->kv_tokens));
    json_object_set_new(root, "layers", json_integer(c->n_layers));
    json_object_set_new(root, "bandwidth_gbps", json_real(o->bw / 1e9));
    json_object_set_new(root, "flops_tflops", json_real(o->fl / 1e12));
    for (int i = 0; i < n; i++) {
        const bench_line *l = &lines[i];
        json_array_append_new(
            arr, json_pack("{sssisisisfsfsfsf}", "phase", l->phase, "batch", l->batch, "context",
                           l->context, "tokens", l->tokens, "seconds", l->seconds, "tokens_per_s",
                           l->tokens_per_s, "roofline_tokens_per_s", l->roofline_tps,
                           "roofline_fraction", l->tokens_per_s / l->roofline_tps));
    }
    json_object_set_new(root, "results", arr);
    int rc = json_dump_file(root, o->json_path, JSON_INDENT(2)) == 0
                 ? 0
                 : err_set("cannot write %s", o->json_path);
    json_decref(root);
    return rc;
}

static int bench_latency(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    bench_opts o = {.backend = "cuda",
                    .context = 1024,
                    .steps = 32,
                    .warmup = 3,
                    .graphs = 0,
                    .util = 0,
                    .bw = ROOFLINE_H200_BANDWIDTH,
                    .fl = ROOFLINE_H200_FLOPS,
                    .tp = 1,
                    .dp = 1};
    const char *v;
    const char *batches = "1,8,64,256,1024", *prefills = "1024,8192";
    double d;
    while (a.i < argc) {
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (args_opt(&a, "--model", &o.model)) {
            if (!o.model) return args_fail(&a);
        } else if (args_opt(&a, "--backend", &o.backend)) {
            if (!o.backend) return args_fail(&a);
        } else if (args_opt(&a, "--output-json", &o.json_path)) {
            if (!o.json_path) return args_fail(&a);
        } else if (args_opt(&a, "--batches", &batches)) {
            if (!batches) return args_fail(&a);
        } else if (args_opt(&a, "--prefill", &prefills)) {
            if (!prefills) return args_fail(&a);
        } else if (args_opt(&a, "--context", &v)) {
            if (args_int("--context", v, 1, 1 << 20, &o.context)) return args_fail(&a);
        } else if (args_opt(&a, "--decode-steps", &v)) {
            if (args_int("--decode-steps", v, 1, 100000, &o.steps)) return args_fail(&a);
        } else if (args_opt(&a, "--warmup", &v)) {
            if (args_int("--warmup", v, 0, 1000, &o.warmup)) return args_fail(&a);
        } else if (args_opt(&a, "--max-cudagraph-capture-size", &v)) {
            if (args_int("--max-cudagraph-capture-size", v, 0, 1 << 16, &o.graphs))
                return args_fail(&a);
            if (o.graphs == 0)
                o.graphs = -1; /* 0 here means off; the backend's 0 means its default */
        } else if (args_opt(&a, "--tensor-parallel-size", &v) || args_opt(&a, "-tp", &v)) {
            if (args_int("--tensor-parallel-size", v, 1, 8, &o.tp)) return args_fail(&a);
        } else if (args_opt(&a, "--data-parallel-size", &v) || args_opt(&a, "-dp", &v)) {
            if (args_int("--data-parallel-size", v, 1, 8, &o.dp)) return args_fail(&a);
        } else if (args_flag(&a, "--enable-expert-parallel")) {
            o.ep = true;
        } else if (args_flag(&a, "--constrained")) {
            o.constrained = true;
        } else if (args_flag(&a, "--enforce-eager")) {
            o.eager = true;
        } else if (args_opt(&a, "--kv-cache-dtype", &o.kv_name)) {
            if (!o.kv_name) return args_fail(&a);
            o.kv_dtype = runtime_kv_dtype(o.kv_name);
            if (o.kv_dtype < 0) {
                fprintf(stderr,
                        "gptoss bench latency: --kv-cache-dtype %s: expected auto, bf16, fp8 or "
                        "fp8_e4m3\n",
                        o.kv_name);
                return 2;
            }
        } else if (args_opt(&a, "--gpu-memory-utilization", &v)) {
            if (args_double("--gpu-memory-utilization", v, 0.01, 1.0, &o.util))
                return args_fail(&a);
        } else if (args_opt(&a, "--bandwidth", &v)) {
            if (args_double("--bandwidth", v, 1, 1e6, &d)) return args_fail(&a);
            o.bw = d * 1e9;
        } else if (args_opt(&a, "--flops", &v)) {
            if (args_double("--flops", v, 1, 1e6, &d)) return args_fail(&a);
            o.fl = d * 1e12;
        } else {
            fprintf(stderr, "gptoss bench latency: unknown option '%s'\n%s", argv[a.i], USAGE);
            return 2;
        }
    }
    if (!o.model) {
        fprintf(stderr, "gptoss bench latency: --model is required\n%s", USAGE);
        return 2;
    }
    /* --data-parallel-size: serve's checks (1 or 2; 2 with --enable-expert-parallel, one TP rank) */
    runtime_args ra;
    runtime_args_default(&ra);
    ra.eng.data_parallel_size = (int)o.dp, ra.enable_expert_parallel = o.ep;
    ra.tensor_parallel_size = (int)o.tp;
    if (runtime_check_data_parallel(&ra)) {
        fprintf(stderr, "gptoss bench latency: %s\n", err_msg());
        return 2;
    }
    if (o.dp > 1 && o.constrained) {
        fprintf(stderr,
                "gptoss bench latency: --constrained is not supported with "
                "--data-parallel-size %ld yet\n",
                o.dp);
        return 2;
    }
    if ((*batches && args_int_list("--batches", batches, &o.batches, &o.n_batches)) ||
        (*prefills && args_int_list("--prefill", prefills, &o.prefills, &o.n_prefills)))
        return args_fail(&a);
    for (int i = 0; i < o.n_batches; i++)
        if (o.batches[i] < 1)
            return fprintf(stderr, "gptoss bench latency: batch sizes must be >= 1\n"), 2;
    for (int i = 0; i < o.n_prefills; i++)
        if (o.prefills[i] < 1)
            return fprintf(stderr, "gptoss bench latency: prompt lengths must be >= 1\n"), 2;
    bench_line *lines = NULL;
    int n = 0;
    model_config cfg;
    int rc = bench_run(&o, &lines, &n, &cfg);
    if (n > 0) print_table(&o, lines, n);
    if (n > 0 && o.json_path && write_json(&o, &cfg, lines, n) != 0) rc = -1;
    if (rc) fprintf(stderr, "gptoss bench latency: %s\n", err_msg());
    free(lines), free(o.batches), free(o.prefills);
    return rc ? 1 : 0;
}

/* `gptoss bench latency …`: argv starts at "latency"; the `bench` command (cli/cmd_bench.c)
 * dispatches. */
int cmd_bench_latency(int argc, char **argv) {
    return bench_latency(argc, argv);
}
