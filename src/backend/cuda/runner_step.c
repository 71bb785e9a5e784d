/* The step kernel (step_kernel.h) from the runner's side: the device table of every layer's
 * weights and cache it walks, built once the KV cache exists, and the choice and launch of the
 * kernel for a one-token decode step in place of runner_forward's layer loop. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/runner_internal.h"
#include "backend/cuda/step_kernel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What the kernel asks of a layer's experts: 16-byte aligned bases for its bulk copies and bulk
 * L2 prefetches of the codes and scale words (cudaMalloc's are), and folded scales (every scale
 * <= 2^1: one multiply a weight pair, moe_dequant.cuh): its expert loops exist in that form only,
 * to keep the kernel's code small (session 31: ~200 KB walked once a layer). Without them there
 * is no table, and the layer loop runs every step. */
static bool experts_fit(const gpu_layer *ly) {
    return (((uintptr_t)ly->w1_q | (uintptr_t)ly->w1_s | (uintptr_t)ly->w2_q |
             (uintptr_t)ly->w2_s) &
            15) == 0 &&
           ly->moe.w1_folded && ly->moe.w2_folded;
}

/* Every layer's router [E][H] transposed to [H][E] in one device buffer, so that the step
 * kernel's block (and attn_stream's with the router by columns) takes the columns of its rows of
 * h + o in one bulk copy (step_kernel.cu, attn_stream.cu). Built once: a second call keeps it. */
cudaError_t runner_router_transposed(struct backend *b) {
    if (b->step_router_wt) return cudaSuccess;
    const size_t E = (size_t)b->E, H = (size_t)b->H, n = E * H;
    uint16_t *host = malloc(2 * n * sizeof *host);
    if (!host) return cudaErrorMemoryAllocation;
    b->step_router_wt = NULL;
    cudaError_t e = cudaMalloc((void **)&b->step_router_wt, (size_t)b->L * n * sizeof *host);
    if (e != cudaSuccess) b->step_router_wt = NULL;
    for (int l = 0; l < b->L && e == cudaSuccess; l++) {
        e = cudaMemcpy(host, b->gw.layers[l].router_w, n * sizeof *host, cudaMemcpyDeviceToHost);
        for (size_t r = 0; r < E && e == cudaSuccess; r++)
            for (size_t j = 0; j < H; j++) host[n + j * E + r] = host[r * H + j];
        if (e == cudaSuccess)
            e = cudaMemcpy(b->step_router_wt + (size_t)l * n, host + n, n * sizeof *host,
                           cudaMemcpyHostToDevice);
    }
    free(host);
    return e;
}

/* The table's device allocation: the table, the tile tickets (2 L words), the router's
 * accumulators ([2][ATTN_ROUTER_GROUPS][E] 64-bit) and the blocks' shares of the sum of squares
 * ([2][ATTN_ROUTER_MAX_G] floats), all zero. */
static size_t tickets_off(int L) {
    return (size_t)L * sizeof(step_layer);
}
static size_t racc_off(int L) {
    return (tickets_off(L) + 2 * (size_t)L * sizeof(unsigned) + 15) / 16 * 16;
}
static size_t ss_off(int L, int E) {
    return racc_off(L) + 2 * (size_t)ATTN_ROUTER_GROUPS * E * sizeof(unsigned long long);
}

int runner_step_table_build(struct backend *b) {
    /* only with the kernel switched on when the backend is made (its transposed router takes
     * 26.5 MB at 120b, which the layer loop does not need) */
    if (b->step_layers || b->L < 1 || !step_kernel_enabled()) return 0;
    for (int l = 0; l < b->L; l++)
        if (!experts_fit(&b->gw.layers[l])) return 0;
    if (runner_router_transposed(b) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(b->step_router_wt);
        b->step_router_wt = NULL;
        return err_set("cuda backend: the step kernel's transposed router weights (%d layers)",
                       b->L);
    }
    step_layer *t = calloc((unsigned)b->L, sizeof *t);
    if (!t) return err_set("cuda backend: out of host memory for the step kernel's layer table");
    for (int l = 0; l < b->L; l++) {
        const gpu_layer *ly = &b->gw.layers[l];
        step_layer *e = &t[l];
        e->qkv_w = ly->qkv_w, e->qkv_b = ly->qkv_b, e->o_w = ly->o_w, e->o_b = ly->o_b;
        e->sinks = ly->sinks, e->k_cache = ly->k_cache, e->v_cache = ly->v_cache;
        e->attn_norm = ly->attn_norm, e->mlp_norm = ly->mlp_norm;
        e->router_w = ly->router_w, e->router_b = ly->router_b;
        e->w1_q = ly->w1_q, e->w1_s = ly->w1_s, e->w2_q = ly->w2_q, e->w2_s = ly->w2_s;
        e->b1 = ly->b1, e->b2 = ly->b2;
        e->sliding = b->cfg.layer_sliding[l] != 0;
        e->router_wt = b->step_router_wt + (size_t)l * b->H * b->E;
    }
    const size_t bytes = tickets_off(b->L),
                 all = ss_off(b->L, b->E) + 2 * (size_t)ATTN_ROUTER_MAX_G * sizeof(float);
    cudaError_t e = cudaMalloc((void **)&b->step_layers, all);
    if (e == cudaSuccess) e = cudaMemcpy(b->step_layers, t, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemset((char *)b->step_layers + bytes, 0, all - bytes);
    free(t);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return err_set("cuda backend: the step kernel's layer table: %s", cudaGetErrorString(e));
    }
    return 0;
}

void runner_step_table_free(struct backend *b) {
    cudaFree(b->step_layers);
    b->step_layers = NULL;
    cudaFree(b->step_router_wt);
    b->step_router_wt = NULL;
}

/* Whether this step runs as the step kernel: switched on, one GPU, a pure decode step of one
 * sequence that the attention kernel takes (attn_stream, mode 2: the kernel's phases are its),
 * the MoE on the small path with the router's norm inside (the layer loop's form at one token),
 * and shapes the kernel supports (step_kernel_supported includes attn_stream_supported's). */
bool runner_step_kernel_takes(const struct backend *b, const fwd_plan *p) {
    return step_kernel_enabled() && b->step_layers && !b->ar && b->dp_size <= 1 && p->T == 1 &&
           p->n_seqs == 1 && p->n_work_full == 0 && p->n_work_swa == 0 &&
           attn_stream_mode(1) == 2 && p->T <= b->norm_route_max_t && !p->moe.large &&
           b->tp_share.expert0 == 0 && b->tp_share.n_experts == b->E &&
           step_kernel_supported(&b->dims, &b->freq, b->H, b->E, b->K, b->I);
}

int runner_step_kernel(struct backend *b, const fwd_plan *p, cudaStream_t s) {
    gpu_workspace *w = &b->ws;
    const moe_weights *m = &b->gw.layers[0].moe;
    step_kernel_args a;
    memset(&a, 0, sizeof a);
    a.L = b->L, a.H = b->H, a.E = b->E, a.k = b->K, a.I = b->I;
    a.alpha = m->swiglu_alpha, a.limit = m->swiglu_limit, a.eps = b->eps, a.scale = b->scale;
    a.layers = b->step_layers;
    a.positions = p->positions, a.slots_full = p->slots_full, a.slots_swa = p->slots_swa;
    a.seqs_full.n_seqs = a.seqs_swa.n_seqs = p->n_seqs;
    a.seqs_full.query_start = a.seqs_swa.query_start = p->query_start;
    a.seqs_full.start_pos = a.seqs_swa.start_pos = p->start_pos;
    a.seqs_full.tables = p->full_tables, a.seqs_full.stride = p->full_stride;
    a.seqs_full.table_first = NULL, a.seqs_full.window = 0;
    a.seqs_swa.tables = p->swa_tables, a.seqs_swa.stride = p->swa_stride;
    a.seqs_swa.table_first = p->swa_first, a.seqs_swa.window = b->W;
    a.x = w->a, a.x_lo = w->a + (size_t)p->T * b->H;
    a.h = w->h, a.scratch = w->qkv, a.y_slots = w->y_slots, a.act = w->act;
    a.q = w->q, a.attn = w->attn, a.o = w->o;
    a.part = w->dec_ws, a.part_bytes = w->dec_ws_bytes;
    a.bar = w->moe_bar, a.counters = w->stream_ctr;
    a.tickets = (unsigned *)(b->step_layers + b->L);
    a.router_acc = (unsigned long long *)((char *)b->step_layers + racc_off(b->L));
    a.ss_part = (float *)((char *)b->step_layers + ss_off(b->L, b->E));
    CU(step_kernel_launch(&b->dims, &b->freq, &a, s));
    b->step_kernel_launches++;
    return 0;
}
