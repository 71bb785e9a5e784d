/* The attention block's stream kernel (attn_stream.h) against the launches it replaces, as
 * runner_attention makes them: cuBLASLt QKV on the split-bf16 input (2T rows), rope_kv_launch_f32,
 * attn_decode (its split count from attn_decode_num_splits), cuBLASLt O. Those kernels are held to
 * the CPU reference by test_gemm, test_rope_kv and test_attention; here the stream form is held to
 * them. Its sums run in another order (x + x_lo summed before the products; P kept in fp32), so:
 *   - q, and the new token's k and v in the cache: relative L2 ≤ 2e-3 (rounded to bf16 once on
 *     both sides; a last-bit flip here and there);
 *   - the attention output and O's: relative L2 ≤ 1e-2 a token, every value finite (outputs are
 *     poisoned with NaN first);
 *   - every cache element other than the new tokens' rows: bit for bit unchanged, and the blocks no
 *     table names are NaN, so a stray read shows as a NaN in the outputs;
 *   - 20 more launches and a CUDA graph replay give the bits of the first launch
 *     (the grid barriers and the merge counters order every phase: a race would show), which also
 *     checks that each launch leaves its counters and barrier ready for the next;
 *   - the attention norm inside (attn_stream_args.nh) against norm_add_rmsnorm_split + the kernel
 *     on its output: h's new rows, q, the caches, the attention and O's outputs bit for bit,
 *     eager and under a graph replay;
 *   - the router by columns (attn_stream_layer_routed + route_from_sums, one token): against the
 *     plain kernel and the host (check_router_case says what);
 *   - refusals: more tokens than ATTN_STREAM_MAX_T, an FP8 cache, sequences ≠ tokens, a workspace
 *     too small.
 * Cases: 120b's shapes (64 q heads, 8 KV heads, H = 2880), block sizes 16 and 32, full layers at
 * contexts 1 (one key: no split), 37, 1000 and 5000 (several chunks a split), sliding layers
 * (window 128, the table starting past block 0), T = 1 to 4 (sequences of different lengths).
 *
 * --quick: three of the cases (for compute-sanitizer). --bench: 120b shapes at 1k context, T = 1 to
 * 4, full and sliding layers: the launches (with O on the GEMV's early form at one token, as the
 * runner's default) against the stream kernel, each a CUDA graph of 4 layers with their own
 * weights (212 MB: more than L2), µs a layer and the weights' TB/s; and the stream kernel ended
 * after its QKV phase and after its attention phase (attn_stream_set_probe), which time the
 * phases; the fixed costs: the kernel ended at
 * once (its cooperative launch alone) and after one grid barrier; and the ring alone (the rows
 * streamed, nothing computed). */
#include "gpu_check.h"
#include "rope_test_util.h"

#include "backend/cuda/attention.h"
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope_kv.h"
#include "backend/cuda/route_sums.h"

#include <math.h>

#include <algorithm>
#include <vector>

enum { NH = 64, NKV = 8, HD = 64, HID = 2880, QD = NH * HD, QKVD = (NH + 2 * NKV) * HD };
enum { WINDOW = 128, UNUSED_BLOCKS = 3 };
static const float SCALE = 0.125f;

struct layer_w {
    uint16_t *qkv_w, *qkv_b, *o_w, *o_b;
    float *sinks;
};

static layer_w make_layer(rng_t *rng) {
    layer_w w;
    w.qkv_w = (uint16_t *)gpu_alloc((size_t)QKVD * HID * 2);
    w.qkv_b = (uint16_t *)gpu_alloc((size_t)QKVD * 2);
    w.o_w = (uint16_t *)gpu_alloc((size_t)HID * QD * 2);
    w.o_b = (uint16_t *)gpu_alloc((size_t)HID * 2);
    w.sinks = (float *)gpu_alloc(NH * 4);
    gpu_fill_bf16(w.qkv_w, (size_t)QKVD * HID, rng_next(rng), 0.03f);
    gpu_fill_bf16(w.qkv_b, QKVD, rng_next(rng), 0.2f);
    gpu_fill_bf16(w.o_w, (size_t)HID * QD, rng_next(rng), 0.02f);
    gpu_fill_bf16(w.o_b, HID, rng_next(rng), 0.2f);
    gpu_fill_f32(w.sinks, NH, rng_next(rng), 2.0f);
    return w;
}

static void free_layer(layer_w *w) {
    cudaFree(w->qkv_w), cudaFree(w->qkv_b), cudaFree(w->o_w), cudaFree(w->o_b), cudaFree(w->sinks);
}

/* One step: T sequences of one new token each, their tables and slots in one pool, both caches
 * (the launches' and the stream kernel's) filled alike, the inputs, and both sets of outputs. */
struct step_case {
    int T, bs, window, stride, n_blocks, max_ctx;
    attn_dims d;
    int32_t *d_qs, *d_sp, *d_first, *d_tables, *d_pos, *d_slots;
    int32_t slots[ATTN_STREAM_MAX_T];
    size_t cache_elems;
    uint16_t *k_ref, *v_ref, *k_s, *v_s;
    uint16_t *a; /* [2T][H]: x, then x_lo */
    float *qkv;  /* [2T][QKV] fp32 products */
    float *ws;   /* attn_decode's partials */
    uint16_t *q_ref, *attn_ref, *o_ref, *q_s, *attn_s, *o_s;
    float *part;
    size_t part_bytes;
    unsigned *bar; /* [2] barrier, then [T · NKV] counters */
};

static void build_case(step_case *c, int bs, bool sliding, const int *ctx, int T, rng_t *rng) {
    memset(c, 0, sizeof *c);
    c->T = T, c->bs = bs, c->window = sliding ? WINDOW : 0;
    c->d.n_heads = NH, c->d.n_kv_heads = NKV, c->d.head_dim = HD, c->d.block_size = bs;
    c->d.kv_fp8 = 0;
    int32_t qs[ATTN_STREAM_MAX_T + 1], sp[ATTN_STREAM_MAX_T], first[ATTN_STREAM_MAX_T],
        pos[ATTN_STREAM_MAX_T];
    int n_lb[ATTN_STREAM_MAX_T], used = 0;
    c->stride = 1;
    for (int i = 0; i < T; i++) {
        qs[i] = i, sp[i] = ctx[i] - 1, pos[i] = ctx[i] - 1;
        if (ctx[i] > c->max_ctx) c->max_ctx = ctx[i];
        const int lo = sliding ? (pos[i] - WINDOW + 1 > 0 ? pos[i] - WINDOW + 1 : 0) : 0;
        first[i] = lo / bs;
        n_lb[i] = (ctx[i] + bs - 1) / bs - first[i];
        used += n_lb[i];
        if (n_lb[i] > c->stride) c->stride = n_lb[i];
    }
    qs[T] = T;
    c->n_blocks = used + UNUSED_BLOCKS;
    std::vector<int32_t> perm(c->n_blocks), tables((size_t)T * c->stride, -1);
    for (int i = 0; i < c->n_blocks; i++) perm[i] = i;
    rng_shuffle(rng, perm.data(), c->n_blocks);
    int next = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < n_lb[i]; j++) tables[(size_t)i * c->stride + j] = perm[next++];
    CHECK(rope_kv_slots(T, qs, sp, tables.data(), c->stride, sliding ? first : NULL, bs,
                        c->slots) == 0,
          "rope_kv_slots found a missing block");
    c->d_qs = (int32_t *)gpu_upload(qs, sizeof(int32_t) * (T + 1));
    c->d_sp = (int32_t *)gpu_upload(sp, sizeof(int32_t) * T);
    c->d_first = (int32_t *)gpu_upload(first, sizeof(int32_t) * T);
    c->d_pos = (int32_t *)gpu_upload(pos, sizeof(int32_t) * T);
    c->d_slots = (int32_t *)gpu_upload(c->slots, sizeof(int32_t) * T);
    c->d_tables = (int32_t *)gpu_upload(tables.data(), tables.size() * sizeof(int32_t));

    /* The caches: random everywhere, NaN in the blocks no table names. */
    c->cache_elems = (size_t)c->n_blocks * NKV * bs * HD;
    const size_t cb = c->cache_elems * 2, blk = (size_t)NKV * bs * HD * 2;
    c->k_ref = (uint16_t *)gpu_alloc(cb), c->v_ref = (uint16_t *)gpu_alloc(cb);
    c->k_s = (uint16_t *)gpu_alloc(cb), c->v_s = (uint16_t *)gpu_alloc(cb);
    gpu_fill_bf16(c->k_ref, c->cache_elems, rng_next(rng), 1.0f);
    gpu_fill_bf16(c->v_ref, c->cache_elems, rng_next(rng), 1.0f);
    for (int i = used; i < c->n_blocks; i++) {
        CUDA_CHECK(cudaMemset((char *)c->k_ref + (size_t)perm[i] * blk, 0xFF, blk));
        CUDA_CHECK(cudaMemset((char *)c->v_ref + (size_t)perm[i] * blk, 0xFF, blk));
    }
    CUDA_CHECK(cudaMemcpy(c->k_s, c->k_ref, cb, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(c->v_s, c->v_ref, cb, cudaMemcpyDeviceToDevice));

    c->a = (uint16_t *)gpu_alloc((size_t)2 * T * HID * 2);
    gpu_fill_bf16(c->a, (size_t)T * HID, rng_next(rng), 1.0f);
    gpu_fill_bf16(c->a + (size_t)T * HID, (size_t)T * HID, rng_next(rng), 1.0f / 512);
    c->qkv = (float *)gpu_alloc((size_t)2 * T * QKVD * 4);
    c->ws = (float *)gpu_alloc(attn_decode_workspace_bytes(&c->d, T, ATTN_DECODE_MAX_SPLITS));
    c->q_ref = (uint16_t *)gpu_alloc((size_t)T * QD * 2);
    c->attn_ref = (uint16_t *)gpu_alloc((size_t)T * QD * 2);
    c->o_ref = (uint16_t *)gpu_alloc((size_t)T * HID * 2);
    c->q_s = (uint16_t *)gpu_alloc((size_t)T * QD * 2);
    c->attn_s = (uint16_t *)gpu_alloc((size_t)T * QD * 2);
    c->o_s = (uint16_t *)gpu_alloc((size_t)T * HID * 2);
    c->part_bytes = attn_stream_workspace_bytes(&c->d, T);
    c->part = (float *)gpu_alloc(c->part_bytes);
    c->bar = (unsigned *)gpu_alloc((2 + ATTN_STREAM_MAX_T * NKV) * sizeof(unsigned));
    CUDA_CHECK(cudaMemset(c->bar, 0, (2 + ATTN_STREAM_MAX_T * NKV) * sizeof(unsigned)));
}

static void free_case(step_case *c) {
    void *ps[] = {c->d_qs,     c->d_sp,  c->d_first, c->d_tables, c->d_pos, c->d_slots, c->k_ref,
                  c->v_ref,    c->k_s,   c->v_s,     c->a,        c->qkv,   c->ws,      c->q_ref,
                  c->attn_ref, c->o_ref, c->q_s,     c->attn_s,   c->o_s,   c->part,    c->bar};
    for (void *p : ps) cudaFree(p);
}

static attn_seqs seqs_of(const step_case *c) {
    attn_seqs s;
    s.n_seqs = c->T, s.query_start = c->d_qs, s.start_pos = c->d_sp, s.tables = c->d_tables;
    s.stride = c->stride, s.table_first = c->window ? c->d_first : NULL, s.window = c->window;
    return s;
}

static attn_stream_args stream_args(const step_case *c, const layer_w *w) {
    attn_stream_args a;
    memset(&a, 0, sizeof a);
    a.T = c->T, a.H = HID, a.positions = c->d_pos, a.slots = c->d_slots, a.seqs = seqs_of(c);
    a.x = c->a, a.x_lo = c->a + (size_t)c->T * HID;
    a.qkv_w = w->qkv_w, a.qkv_b = w->qkv_b, a.o_w = w->o_w, a.o_b = w->o_b, a.sinks = w->sinks;
    a.scale = SCALE, a.k_cache = c->k_s, a.v_cache = c->v_s;
    a.q = c->q_s, a.attn = c->attn_s, a.o = c->o_s;
    a.part = c->part, a.part_bytes = c->part_bytes, a.bar = c->bar, a.counters = c->bar + 2;
    return a;
}

/* The launches, as runner_attention makes them (O on cuBLASLt here: the check's reference). */
static cudaError_t launches(gemm_ctx *g, const rope_kv_freq *f, step_case *c, const layer_w *w,
                            bool early_o, cudaStream_t st) {
    const int T = c->T;
    cudaError_t e = gemm_bf16(g, c->a, 2 * T, HID, w->qkv_w, QKVD, NULL, c->qkv, GEMM_OUT_F32, st);
    if (e == cudaSuccess)
        e = rope_kv_launch_f32(&c->d, f, c->qkv, c->qkv + (size_t)T * QKVD, w->qkv_b, QKVD, T,
                               c->d_pos, c->d_slots, c->q_ref, c->k_ref, c->v_ref, NULL, st);
    const attn_seqs s = seqs_of(c);
    const int keys = c->window && c->max_ctx > WINDOW ? WINDOW : c->max_ctx;
    const int splits = attn_decode_num_splits(&c->d, T, keys);
    if (e == cudaSuccess)
        e = attn_decode(&c->d, &s, c->q_ref, c->k_ref, c->v_ref, NULL, w->sinks, SCALE, c->attn_ref,
                        splits, c->ws, st);
    if (e != cudaSuccess) return e;
    if (early_o && T == 1 && gemv_early_supported(T, QD, HID)) /* the runner's default */
        return gemv_bf16_early(c->attn_ref, NULL, T, QD, w->o_w, HID, w->o_b, c->o_ref, 0, st);
    return gemm_bf16(g, c->attn_ref, T, QD, w->o_w, HID, w->o_b, c->o_ref, GEMM_OUT_BF16, st);
}

static std::vector<uint16_t> download16(const uint16_t *p, size_t n) {
    std::vector<uint16_t> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
    return v;
}

static double rel_bf16(const uint16_t *out, const uint16_t *ref, size_t n) {
    relerr_acc acc = {0, 0, 0};
    for (size_t i = 0; i < n; i++) relerr_add(&acc, bf16_to_f32(out[i]), bf16_to_f32(ref[i]));
    return relerr_get(&acc);
}

/* Whether cache element i belongs to a new token's row (slot s, any KV head). */
static bool in_new_row(const step_case *c, size_t i) {
    const size_t row = i / HD; /* (block, head, row in block) */
    const size_t r = row % c->bs, block = row / c->bs / NKV;
    for (int t = 0; t < c->T; t++)
        if (c->slots[t] >= 0 && (size_t)c->slots[t] == block * c->bs + r) return true;
    return false;
}

struct outs {
    std::vector<uint16_t> q, attn, o, k, v;
};

static outs read_stream(const step_case *c) {
    outs r;
    r.q = download16(c->q_s, (size_t)c->T * QD);
    r.attn = download16(c->attn_s, (size_t)c->T * QD);
    r.o = download16(c->o_s, (size_t)c->T * HID);
    r.k = download16(c->k_s, c->cache_elems);
    r.v = download16(c->v_s, c->cache_elems);
    return r;
}

static bool same_bits(const outs &x, const outs &y) {
    return x.q == y.q && x.attn == y.attn && x.o == y.o && x.k == y.k && x.v == y.v;
}

static void poison_stream_outputs(const step_case *c) {
    gpu_poison(c->q_s, (size_t)c->T * QD * 2);
    gpu_poison(c->attn_s, (size_t)c->T * QD * 2);
    gpu_poison(c->o_s, (size_t)c->T * HID * 2);
}

static void run_case(gemm_ctx *g, const rope_kv_freq *f, const layer_w *w, int bs, bool sliding,
                     const int *ctx, int T, rng_t *rng) {
    step_case c;
    build_case(&c, bs, sliding, ctx, T, rng);
    char what[96];
    int at = snprintf(what, sizeof what, "T=%d bs=%d %s ctx", T, bs, sliding ? "sliding" : "full");
    for (int i = 0; i < T && at < (int)sizeof what; i++)
        at += snprintf(what + at, sizeof what - at, "%c%d", i ? ',' : '=', ctx[i]);
    CHECK(attn_stream_supported(&c.d, f, T, T, HID), "%s: supported", what);
    gpu_poison(c.q_ref, (size_t)T * QD * 2), gpu_poison(c.attn_ref, (size_t)T * QD * 2);
    gpu_poison(c.o_ref, (size_t)T * HID * 2);
    poison_stream_outputs(&c);
    CHECK(launches(g, f, &c, w, false, 0) == cudaSuccess, "%s: the launches", what);
    const attn_stream_args a = stream_args(&c, w);
    CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaSuccess, "%s: the stream launch", what);
    CUDA_CHECK(cudaDeviceSynchronize());

    const outs s = read_stream(&c);
    const std::vector<uint16_t> q_ref = download16(c.q_ref, (size_t)T * QD),
                                attn_ref = download16(c.attn_ref, (size_t)T * QD),
                                o_ref = download16(c.o_ref, (size_t)T * HID),
                                k_ref = download16(c.k_ref, c.cache_elems),
                                v_ref = download16(c.v_ref, c.cache_elems);
    const double eq = rel_bf16(s.q.data(), q_ref.data(), s.q.size());
    CHECK(eq <= 2e-3, "%s: q rel err %.3g", what, eq);
    /* the caches: the new rows within rounding, every other element unchanged (bit for bit) */
    relerr_acc ek = {0, 0, 0}, ev = {0, 0, 0};
    long moved = 0;
    for (size_t i = 0; i < c.cache_elems; i++) {
        if (in_new_row(&c, i)) {
            relerr_add(&ek, bf16_to_f32(s.k[i]), bf16_to_f32(k_ref[i]));
            relerr_add(&ev, bf16_to_f32(s.v[i]), bf16_to_f32(v_ref[i]));
        } else
            moved += (s.k[i] != k_ref[i]) + (s.v[i] != v_ref[i]);
    }
    CHECK(relerr_get(&ek) <= 2e-3 && relerr_get(&ev) <= 2e-3, "%s: new k rel err %.3g, v %.3g",
          what, relerr_get(&ek), relerr_get(&ev));
    CHECK(moved == 0, "%s: %ld cache elements outside the new rows differ", what, moved);
    for (int t = 0; t < T; t++) {
        const double ea =
            rel_bf16(s.attn.data() + (size_t)t * QD, attn_ref.data() + (size_t)t * QD, QD);
        const double eo =
            rel_bf16(s.o.data() + (size_t)t * HID, o_ref.data() + (size_t)t * HID, HID);
        CHECK(ea <= 1e-2, "%s token %d: attention rel err %.3g", what, t, ea);
        CHECK(eo <= 1e-2, "%s token %d: O rel err %.3g", what, t, eo);
    }

    /* 20 more launches, then a graph replay: the first launch's bits every time */
    bool same = true;
    for (int r = 0; r < 20 && same; r++) {
        poison_stream_outputs(&c);
        CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaSuccess, "%s: repeat %d", what, r);
        CUDA_CHECK(cudaDeviceSynchronize());
        same = same_bits(read_stream(&c), s);
    }
    CHECK(same, "%s: 20 repeated launches give the first launch's bits", what);
    /* under a CUDA graph (as the runner's decode steps) */
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const cudaError_t ce = attn_stream_layer(&c.d, f, &a, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CHECK(ce == cudaSuccess, "%s: the launch under capture", what);
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    poison_stream_outputs(&c);
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    CHECK(same_bits(read_stream(&c), s), "%s: the graph replay gives the first launch's bits",
          what);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(st));
    free_case(&c);
}

/* One launch of the kernel: eager (graph false, on the default stream) or captured on a stream of
 * its own and replayed as a one-node graph. */
static cudaError_t launch_maybe_graph(const attn_dims *d, const rope_kv_freq *f,
                                      const attn_stream_args *a, bool graph) {
    if (!graph) return attn_stream_layer(d, f, a, 0);
    cudaStream_t st;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const cudaError_t e = attn_stream_layer(d, f, a, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &g));
    if (e == cudaSuccess) {
        CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_CHECK(cudaGraphLaunch(exec, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaStreamDestroy(st));
    return e;
}

/* The attention norm inside (attn_stream_args.nh): against norm_add_rmsnorm_split on the same h
 * and MoE rows, then the kernel on its output. Both make the same fp32 input rows, so everything
 * must match bit for bit: h's new rows, q, the caches, the attention and O's outputs; and again
 * under a graph replay (h restored first). */
static void check_norm_case(const rope_kv_freq *f, const layer_w *w, int bs, bool sliding,
                            const int *ctx, int T, rng_t *rng) {
    enum { N_SLOTS = 8 };
    const float EPS = 1e-5f;
    step_case c;
    build_case(&c, bs, sliding, ctx, T, rng);
    char what[96];
    snprintf(what, sizeof what, "norm inside: T=%d bs=%d %s ctx=%d", T, bs,
             sliding ? "sliding" : "full", ctx[0]);
    const size_t hb = (size_t)T * HID * 4;
    float *h0 = (float *)gpu_alloc(hb), *h_ref = (float *)gpu_alloc(hb),
          *h_s = (float *)gpu_alloc(hb), *scratch = (float *)gpu_alloc(hb);
    float *slots = (float *)gpu_alloc((size_t)T * N_SLOTS * HID * 4);
    uint16_t *gain = (uint16_t *)gpu_alloc(HID * 2);
    gpu_fill_f32(h0, (size_t)T * HID, rng_next(rng), 4.0f);
    gpu_fill_f32(slots, (size_t)T * N_SLOTS * HID, rng_next(rng), 0.5f);
    gpu_fill_bf16(gain, HID, rng_next(rng), 1.0f);
    CUDA_CHECK(cudaMemcpy(h_ref, h0, hb, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(h_s, h0, hb, cudaMemcpyDeviceToDevice));
    /* the reference: the norm launch into c.a (hi, lo), then the kernel on it */
    CHECK(norm_add_rmsnorm_split(h_ref, NULL, slots, N_SLOTS, T, HID, gain, EPS, c.a,
                                 c.a + (size_t)T * HID, 0) == cudaSuccess,
          "%s: norm_add", what);
    attn_stream_args a = stream_args(&c, w);
    poison_stream_outputs(&c);
    CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaSuccess, "%s: the kernel on norm_add's rows",
          what);
    CUDA_CHECK(cudaDeviceSynchronize());
    const outs ref = read_stream(&c);
    std::vector<float> hr((size_t)T * HID), hs((size_t)T * HID);
    CUDA_CHECK(cudaMemcpy(hr.data(), h_ref, hb, cudaMemcpyDeviceToHost));
    /* the norm inside */
    a.x = a.x_lo = NULL;
    a.nh = h_s, a.nscratch = scratch, a.nslots = slots, a.n_slots = N_SLOTS, a.ngain = gain;
    a.neps = EPS;
    for (int run = 0; run < 2; run++) { /* eager, then a graph replay */
        CUDA_CHECK(cudaMemcpy(h_s, h0, hb, cudaMemcpyDeviceToDevice));
        poison_stream_outputs(&c);
        CHECK(launch_maybe_graph(&c.d, f, &a, run == 1) == cudaSuccess, "%s (%s): launch", what,
              run ? "graph" : "eager");
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(hs.data(), h_s, hb, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(hs.data(), hr.data(), hb), "%s (%s): h's new rows equal norm_add's", what,
              run ? "graph" : "eager");
        CHECK(same_bits(read_stream(&c), ref), "%s (%s): q, caches, attention, O bit for bit", what,
              run ? "graph" : "eager");
    }
    void *ps[] = {h0, h_ref, h_s, scratch, slots, gain};
    for (void *p : ps) cudaFree(p);
    free_case(&c);
}

/* The router by columns (attn_stream_layer_routed, then route_from_sums) at one token, the norm
 * inside, against the plain kernel on the same step and the host:
 *   - q, the caches, the attention and O's output: bit for bit the plain kernel's;
 *   - h: the plain kernel's h (the norm's add) + O's bf16 output, bit for bit (fp32, that order);
 *   - the router's sums: within 1e-4 of the host's W_r (g ⊙ (h + o)) (double) relative to the sum
 *     of the terms' magnitudes, plus the fixed point's 2^-24 a block;
 *   - route_from_sums: the logits within 1e-4 (relative to the largest), the sums back to zero,
 *     the top-k's experts the host's wherever the host's k-th and (k+1)-th logits (with the bias)
 *     are more than 1e-3 apart, the weights summing to 1, and the MoE's input row within one
 *     bf16 rounding of the host's h · inv · g. A second step gives the same bits (the sums were
 *     set back to zero), every byte of the routing buffer (poisoned before each step) too. */
static void check_router_case(const rope_kv_freq *f, const layer_w *w, int bs, bool sliding,
                              int ctx1, rng_t *rng) {
    enum { N_SLOTS = 4, E = 128, K = 4 };
    const float EPS = 1e-5f;
    step_case c;
    const int ctx[] = {ctx1};
    build_case(&c, bs, sliding, ctx, 1, rng);
    CHECK(attn_stream_router_supported(&c.d, HID, E), "the router by columns fits 120b's shapes");
    char what[96];
    snprintf(what, sizeof what, "router by columns: bs=%d %s ctx=%d", bs,
             sliding ? "sliding" : "full", ctx1);
    const size_t hb = (size_t)HID * 4;
    float *h0 = (float *)gpu_alloc(hb), *h_p = (float *)gpu_alloc(hb),
          *h_r = (float *)gpu_alloc(hb), *scratch = (float *)gpu_alloc(hb),
          *slots = (float *)gpu_alloc(N_SLOTS * hb);
    uint16_t *gain = (uint16_t *)gpu_alloc(HID * 2), *mgain = (uint16_t *)gpu_alloc(HID * 2),
             *wt = (uint16_t *)gpu_alloc((size_t)HID * E * 2), *bias = (uint16_t *)gpu_alloc(E * 2),
             *y = (uint16_t *)gpu_alloc(HID * 2);
    unsigned long long *acc = (unsigned long long *)gpu_alloc(ATTN_ROUTER_GROUPS * E * 8);
    float *ss = (float *)gpu_alloc(ATTN_ROUTER_MAX_G * 4), *logits = (float *)gpu_alloc(E * 4);
    void *rbuf = gpu_alloc(moe_routing_bytes(1, E, K));
    gpu_fill_f32(h0, HID, rng_next(rng), 4.0f);
    gpu_fill_f32(slots, (size_t)N_SLOTS * HID, rng_next(rng), 0.5f);
    gpu_fill_bf16(gain, HID, rng_next(rng), 1.0f);
    gpu_fill_bf16(mgain, HID, rng_next(rng), 1.0f);
    gpu_fill_bf16(wt, (size_t)HID * E, rng_next(rng), 0.05f);
    gpu_fill_bf16(bias, E, rng_next(rng), 0.5f);
    CUDA_CHECK(cudaMemset(acc, 0, ATTN_ROUTER_GROUPS * E * 8));
    CUDA_CHECK(cudaMemset(ss, 0, ATTN_ROUTER_MAX_G * 4));
    moe_routing rt;
    moe_routing_carve(&rt, rbuf, 1, E, K);
    attn_stream_args a = stream_args(&c, w);
    a.x = a.x_lo = NULL;
    a.nscratch = scratch, a.nslots = slots, a.n_slots = N_SLOTS, a.ngain = gain, a.neps = EPS;
    /* the plain kernel */
    CUDA_CHECK(cudaMemcpy(h_p, h0, hb, cudaMemcpyDeviceToDevice));
    a.nh = h_p;
    poison_stream_outputs(&c);
    CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaSuccess, "%s: the plain kernel", what);
    CUDA_CHECK(cudaDeviceSynchronize());
    const outs ref = read_stream(&c);
    std::vector<float> hp(HID);
    CUDA_CHECK(cudaMemcpy(hp.data(), h_p, hb, cudaMemcpyDeviceToHost));
    /* the host's h + o, router sums, sum of squares, logits, top-k, the MoE's row */
    std::vector<uint16_t> wth((size_t)HID * E), gh(HID), bh(E);
    CUDA_CHECK(cudaMemcpy(wth.data(), wt, wth.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gh.data(), mgain, HID * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bh.data(), bias, E * 2, cudaMemcpyDeviceToHost));
    std::vector<float> v(HID);
    double sq = 0;
    for (int j = 0; j < HID; j++) {
        v[j] = hp[j] + bf16_to_f32(ref.o[j]);
        sq += (double)v[j] * v[j];
    }
    const double inv = 1.0 / sqrt(sq / HID + EPS);
    std::vector<double> sum_ref(E, 0.0), mag(E, 0.0), lg(E);
    for (int j = 0; j < HID; j++) {
        const double oc = (double)v[j] * bf16_to_f32(gh[j]);
        for (int e = 0; e < E; e++) {
            const double t = bf16_to_f32(wth[(size_t)j * E + e]) * oc;
            sum_ref[e] += t, mag[e] += fabs(t);
        }
    }
    for (int e = 0; e < E; e++) lg[e] = inv * sum_ref[e] + bf16_to_f32(bh[e]);
    std::vector<int> order(E);
    for (int e = 0; e < E; e++) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int x, int z) { return lg[x] > lg[z]; });
    const bool clear = lg[order[K - 1]] - lg[order[K]] > 1e-3;
    attn_stream_router r;
    memset(&r, 0, sizeof r);
    r.wt = wt, r.gain = mgain, r.h = h_r, r.acc = acc, r.ss_part = ss, r.E = E;
    std::vector<uint16_t> y_first;
    std::vector<float> lg_first;
    const size_t rbytes = moe_routing_bytes(1, E, K);
    std::vector<unsigned char> route_first(rbytes), route_now(rbytes);
    int idx_first[K];
    float wts_first[K];
    /* step 1: a second step (the sums were set back to zero by the first) */
    for (int step = 0; step < 2; step++) {
        CUDA_CHECK(cudaMemcpy(h_r, h0, hb, cudaMemcpyDeviceToDevice));
        a.nh = h_r;
        poison_stream_outputs(&c);
        CHECK(attn_stream_layer_routed(&c.d, f, &a, &r, 0) == cudaSuccess, "%s: launch", what);
        CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(same_bits(read_stream(&c), ref), "%s: q, caches, attention, O bit for bit", what);
        std::vector<float> hr(HID);
        CUDA_CHECK(cudaMemcpy(hr.data(), h_r, hb, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(hr.data(), v.data(), hb), "%s: h + o bit for bit", what);
        std::vector<unsigned long long> ah((size_t)ATTN_ROUTER_GROUPS * E);
        CUDA_CHECK(cudaMemcpy(ah.data(), acc, ah.size() * 8, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int e = 0; e < E; e++) {
            long long s64 = 0;
            for (int g = 0; g < ATTN_ROUTER_GROUPS; g++) s64 += (long long)ah[(size_t)g * E + e];
            const double got = (double)s64 / 16777216.0;
            bad += fabs(got - sum_ref[e]) > 1e-4 * mag[e] + 256.0 / 16777216.0;
        }
        CHECK(bad == 0, "%s: %d of %d router sums off the host's", what, bad, (int)E);
        if (step == 1) { /* the second step's outputs are its own */
            CUDA_CHECK(cudaMemset(logits, 0xff, E * 4));
            CUDA_CHECK(cudaMemset(y, 0xff, HID * 2));
        }
        CUDA_CHECK(cudaMemset(rbuf, 0xff, rbytes));
        CHECK(route_from_sums(acc, ss, h_r, mgain, EPS, HID, bias, logits, y, &rt, 0) ==
                  cudaSuccess,
              "%s: route_from_sums", what);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(route_now.data(), rbuf, rbytes, cudaMemcpyDeviceToHost));
        std::vector<float> lgd(E);
        CUDA_CHECK(cudaMemcpy(lgd.data(), logits, E * 4, cudaMemcpyDeviceToHost));
        double lmax = 0, err = 0;
        for (int e = 0; e < E; e++) {
            lmax = fmax(lmax, fabs(inv * sum_ref[e]));
            err = fmax(err, fabs(lgd[e] - inv * sum_ref[e]));
        }
        CHECK(err <= 1e-4 * lmax, "%s: logits off by %.3e (largest %.3e)", what, err, lmax);
        CUDA_CHECK(cudaMemcpy(ah.data(), acc, ah.size() * 8, cudaMemcpyDeviceToHost));
        bool zero = true;
        for (unsigned long long x : ah) zero &= x == 0;
        CHECK(zero, "%s: the sums set back to zero", what);
        int idx[K];
        float wts[K];
        CUDA_CHECK(cudaMemcpy(idx, rt.topk_idx, sizeof idx, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(wts, rt.topk_w, sizeof wts, cudaMemcpyDeviceToHost));
        float wsum = 0;
        for (int j = 0; j < K; j++) {
            wsum += wts[j];
            if (clear)
                CHECK(idx[j] == order[j], "%s: expert %d is %d, the host's %d", what, j, idx[j],
                      order[j]);
        }
        CHECK(fabsf(wsum - 1.0f) < 1e-5f, "%s: the weights sum to %.6f", what, wsum);
        std::vector<uint16_t> yh = download16(y, HID);
        int far = 0;
        for (int j = 0; j < HID; j++) {
            const double want = (double)v[j] * inv * bf16_to_f32(gh[j]);
            far += fabs(bf16_to_f32(yh[j]) - want) > fabs(want) * (1.0 / 128) + 1e-6;
        }
        CHECK(far == 0, "%s: %d of %d MoE inputs off the host's by more than a bf16 step", what,
              far, HID);
        if (step == 0) {
            y_first = yh, lg_first = lgd, route_first = route_now;
            memcpy(idx_first, idx, sizeof idx), memcpy(wts_first, wts, sizeof wts);
        } else {
            const char *which = "a second step";
            CHECK(yh == y_first, "%s: %s gives the same row", what, which);
            CHECK(!memcmp(lgd.data(), lg_first.data(), E * 4), "%s: %s gives the same logits", what,
                  which);
            CHECK(!memcmp(idx, idx_first, sizeof idx) && !memcmp(wts, wts_first, sizeof wts),
                  "%s: %s gives the same experts and weights", what, which);
            CHECK(route_now == route_first, "%s: %s gives the same routing buffer", what, which);
        }
    }
    printf("%s: checked (top-k %s)\n", what, clear ? "compared" : "near a tie: not compared");
    void *ps[] = {h0, h_p, h_r, scratch, slots, gain, mgain, wt, bias, y, acc, ss, logits, rbuf};
    for (void *p : ps) cudaFree(p);
    free_case(&c);
}

static void check_refusals(const rope_kv_freq *f, const layer_w *w, rng_t *rng) {
    const int ctx[2] = {100, 200};
    step_case c;
    build_case(&c, 32, false, ctx, 2, rng);
    const int over = ATTN_STREAM_MAX_T + 1;
    CHECK(!attn_stream_supported(&c.d, f, over, over, HID), "%d tokens are refused", over);
    CHECK(!attn_stream_supported(&c.d, f, 2, 1, HID), "sequences != tokens are refused");
    attn_dims d8 = c.d;
    d8.kv_fp8 = 1;
    CHECK(!attn_stream_supported(&d8, f, 2, 2, HID), "an FP8 cache is refused");
    attn_stream_args a = stream_args(&c, w);
    a.T = over;
    CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaErrorInvalidValue, "T = %d: invalid value",
          over);
    a = stream_args(&c, w);
    a.part_bytes = 16;
    CHECK(attn_stream_layer(&c.d, f, &a, 0) == cudaErrorInvalidValue,
          "a workspace too small: invalid value");
    CUDA_CHECK(cudaDeviceSynchronize());
    free_case(&c);
}

/* ---- --bench ---- */

enum { BENCH_LAYERS = 4 };

/* µs a layer of BENCH_LAYERS layers captured as one graph and replayed: launch(l, stream) makes
 * layer l's launches. -1 when a launch fails (a failed check). */
template <typename F> static float time_layers(cudaStream_t st, const char *what, F launch) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cudaError_t e = cudaSuccess;
    for (int l = 0; l < BENCH_LAYERS && e == cudaSuccess; l++) e = launch(l, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CHECK(e == cudaSuccess, "%s: capture", what);
    float us = -1.f;
    if (e == cudaSuccess) {
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        us = gpu_time_graph_us(exec, st, BENCH_LAYERS, 50);
        CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
    CUDA_CHECK(cudaGraphDestroy(graph));
    return us;
}

static void bench(gemm_ctx *g, const rope_kv_freq *f, rng_t *rng) {
    layer_w ws[BENCH_LAYERS];
    for (int l = 0; l < BENCH_LAYERS; l++) ws[l] = make_layer(rng);
    const double bytes = ((double)QKVD * HID + (double)HID * QD) * 2;
    printf(
        "\n| T | layer | launches µs | stream µs | stream / launches | stream weights TB/s | "
        "to QKV's barrier µs | to attention's barrier µs | launch alone µs | "
        "launch + a grid barrier µs | the ring alone µs | the ring alone past the launch TB/s |\n");
    printf(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int T = 1; T <= ATTN_STREAM_MAX_T; T++)
        for (int sl = 0; sl < 2; sl++) {
            const int ctx[ATTN_STREAM_MAX_T] = {1024, 1024, 1024, 1024};
            step_case c;
            build_case(&c, 32, sl == 1, ctx, T, rng);
            /* launches, stream, stream to QKV's barrier, to attention's, the kernel's launch
             * alone, launch + a barrier, the ring alone (QKV's and O's rows streamed, nothing
             * computed; its TB/s counts the time past the launch alone) */
            float us[7];
            for (int form = 0; form < 7; form++) {
                attn_stream_set_probe(form == 2 ? 1 : form == 3 ? 2 : form >= 4 ? form - 1 : 0);
                us[form] = time_layers(st, "bench", [&](int l, cudaStream_t s) {
                    if (form == 0) return launches(g, f, &c, &ws[l], true, s);
                    const attn_stream_args a = stream_args(&c, &ws[l]);
                    return attn_stream_layer(&c.d, f, &a, s);
                });
            }
            attn_stream_set_probe(0);
            printf("| %d | %s | %.1f | %.1f | %.3f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | "
                   "%.2f |\n",
                   T, sl ? "sliding" : "full", us[0], us[1], us[1] / us[0],
                   bytes / (us[1] * 1e-6) / 1e12, us[2], us[3], us[4], us[5], us[6],
                   bytes / ((us[6] - us[4]) * 1e-6) / 1e12);
            free_case(&c);
        }
    CUDA_CHECK(cudaStreamDestroy(st));
    for (int l = 0; l < BENCH_LAYERS; l++) free_layer(&ws[l]);
}

int main(int argc, char **argv) {
    const uint64_t seed = gpu_test_seed(argc, argv);
    printf("test_attn_stream: seed %llu\n", (unsigned long long)seed);
    rng_t rng;
    rng_seed(&rng, seed);
    rope_table rt;
    rope_kv_freq freq;
    rope_tables_120b(&rt, &freq);
    gemm_ctx *g = NULL;
    CUDA_CHECK(gemm_ctx_create(&g));
    if (gpu_test_flag(argc, argv, "--bench")) {
        bench(g, &freq, &rng);
        gemm_ctx_destroy(g);
        return check_report("test_attn_stream --bench");
    }
    layer_w w = make_layer(&rng);
    if (gpu_test_flag(argc, argv, "--quick")) { /* for compute-sanitizer (scripts/device) */
        const int c100[] = {100}, q2[] = {300, 40};
        run_case(g, &freq, &w, 32, false, c100, 1, &rng);
        run_case(g, &freq, &w, 16, true, q2, 2, &rng);
        check_norm_case(&freq, &w, 32, false, c100, 1, &rng);
        free_layer(&w);
        gemm_ctx_destroy(g);
        return check_report("test_attn_stream --quick");
    }
    const int one[] = {1}, c37[] = {37}, c1k[] = {1000}, c5k[] = {5000};
    const int two_a[] = {1000, 17}, two_b[] = {5000, 300}, three[] = {1000, 17, 4000},
              four[] = {1, 64, 129, 2000};
    const int bss[] = {16, 32};
    for (int b = 0; b < 2; b++)
        for (int sl = 0; sl < 2; sl++) {
            run_case(g, &freq, &w, bss[b], sl == 1, one, 1, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, c37, 1, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, c1k, 1, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, c5k, 1, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, two_a, 2, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, two_b, 2, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, three, 3, &rng);
            run_case(g, &freq, &w, bss[b], sl == 1, four, 4, &rng);
        }
    const int n1k[] = {1000}, n2[] = {300, 5000};
    check_norm_case(&freq, &w, 32, false, n1k, 1, &rng);
    check_norm_case(&freq, &w, 16, true, n1k, 1, &rng);
    check_norm_case(&freq, &w, 32, true, n2, 2, &rng);
    check_norm_case(&freq, &w, 16, false, four, 4, &rng);
    check_router_case(&freq, &w, 32, false, 1000, &rng);
    check_router_case(&freq, &w, 16, true, 300, &rng);
    check_refusals(&freq, &w, &rng);
    free_layer(&w);
    gemm_ctx_destroy(g);
    return check_report("test_attn_stream");
}
