/* GPU sampling: greedy, temperature draws and top-K logprobs over one logits row per CTA. The
 * contract and the algorithm are in sampling.h; the CPU twin is step/sampler.c.
 *
 * A CTA has 512 threads (16 warps; 1024 would leave 64 registers a thread, and it spilled) and
 * makes, per row:
 *   1. one pass for the maximum: the largest (key, -id) pair, where key is the float's
 * order-preserving integer (NaN -> -inf, -0 -> +0), so the winner is the lowest id among the
 * maxima;
 *   2. one pass for the normaliser(s): warp w sums the weights of its contiguous span of ids, tile
 * by tile (32 consecutive ids, an inclusive warp scan in double), and thread 0 prefixes the span
 *      totals in order;
 *   3. (temperature) a walk over one span only, repeating pass 2's additions, to find the crossing;
 *   4. (top-K) a histogram pass, a gather pass and K block-wide max reductions in shared memory.
 * Every reduction has a fixed shape, so a row gives the same bits whatever else is in the batch.
 *
 * Plain greedy rows (no top-K list) skip all that: greedy_kernel, launched first, does them with G
 * CTAs per row (the greedy fast path, below the main kernel), and sampling_kernel leaves them
 * alone. Both kernels decide with the same predicate (greedy_fast), so every row is done exactly
 * once. */
#include "backend/cuda/sampling.h"
#include "base/rng.h"

#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

enum { SP_THREADS = 512, SP_WARPS = SP_THREADS / 32, SP_BINS = 2048, SP_CAND = 2048 };
enum { DIST_FINITE = 0, DIST_POSINF = 1, DIST_NONE = 2 };
#define FULL_MASK 0xffffffffu

/* ---- the float order and the (key, id) packing ---- */

/* IEEE floats as unsigned integers in the same order: flip the sign bit of positives, every bit of
 * negatives. NaN becomes -inf first (never drawn, never wins a tie) and -0 becomes +0 (they tie).
 * Done on the bits so that no compiler rewrite of "x == 0 ? 0 : x" can lose it. */
static __device__ __forceinline__ uint32_t order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0xff800000u;
    if ((u & 0x7fffffffu) == 0u) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Larger key first, then lower id: the low word holds the id complemented. Every real pair is > 0
 * (the smallest key, of -inf, is 0x007fffff), so 0 means "nothing". */
static __device__ __forceinline__ unsigned long long pack_kid(uint32_t key, int id) {
    return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (uint32_t)id);
}
static __device__ __forceinline__ int unpack_id(unsigned long long p) {
    return (int)(0xffffffffu - (uint32_t)(p & 0xffffffffull));
}

/* ---- the distribution (sampler.c's dist) ---- */

typedef struct {
    float max, temp;
    int mode;
} dist;

/* (x - max) / T rounded as the CPU rounds it (no fused or approximate division). */
static __device__ __forceinline__ float scaled(const dist &d, float x) {
    if (d.mode == DIST_FINITE) return x != x ? -INFINITY : __fdiv_rn(__fsub_rn(x, d.max), d.temp);
    if (d.mode == DIST_POSINF) return x == INFINITY ? 0.0f : -INFINITY;
    return 0.0f;
}
static __device__ __forceinline__ float weight(const dist &d, float x) {
    const float s = scaled(d, x);
    return s < -104.0f ? 0.0f : expf(s);
}

/* ---- block reductions (NW warps <= 32 in the block; red has NW + 1 entries) ---- */

/* The maximum of v over the warp, in every lane. */
template <typename T> static __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const T t = __shfl_xor_sync(FULL_MASK, v, o);
        v = t > v ? t : v;
    }
    return v;
}

/* The maximum of v over the block, in every thread; `none` is below every real value (what the lanes
 * of missing warps contribute). */
template <int NW, typename T> static __device__ __forceinline__ T block_max(T v, T *red, T none) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_max(lane < NW ? red[lane] : none);
        if (lane == 0) red[NW] = v;
    }
    __syncthreads();
    v = red[NW];
    __syncthreads(); /* red may be reused at once */
    return v;
}

/* Inclusive scan of one double per lane, in lane order (a fixed sequence of additions). */
static __device__ __forceinline__ double warp_scan_incl(double s, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(FULL_MASK, s, o);
        if (lane >= o) s += t;
    }
    return s;
}
static __device__ __forceinline__ double warp_sum(double s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    return s;
}

/* A plain greedy row: the argmax and its logprob, no top-K list of either kind (lp_k and prompt_k
 * after sampling_kernel's clamps). greedy_kernel takes these rows, sampling_kernel all others. */
static __device__ __forceinline__ bool greedy_fast(const gpu_row &d, int V) {
    const int lp_k = min(max(d.lp_k, 0), min(GPU_TOPK_MAX, V));
    const int pk = min(max(d.prompt_k, 0), min(GPU_TOPK_MAX, V));
    return d.mode == GPU_ROW_GREEDY && lp_k == 0 && pk == 0;
}

/* ---- the kernel ---- */

__global__ void __launch_bounds__(SP_THREADS, 1)
    sampling_kernel(const float *logits, int V, const gpu_row *rows, gpu_row_out *outs,
                    int32_t *slot_last, int max_slots) {
    __shared__ unsigned long long red64[SP_WARPS + 1];
    __shared__ int red32[SP_WARPS + 1];
    __shared__ double span_sum[SP_WARPS], span_sum1[SP_WARPS], prefix[SP_WARPS + 1];
    __shared__ uint32_t hist[SP_BINS];
    __shared__ uint32_t cand_key[SP_CAND];
    __shared__ int32_t cand_id[SP_CAND];
    __shared__ int32_t top[GPU_TOPK_MAX];
    __shared__ double s_z, s_z1, s_target;
    __shared__ int s_wstar, s_token, s_bin, s_ncand, s_count;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const gpu_row d = rows[blockIdx.x];
    const bool on_gpu = d.mode == GPU_ROW_GREEDY || d.mode == GPU_ROW_TEMP;
    const int lp_k = on_gpu ? min(max(d.lp_k, 0), min(GPU_TOPK_MAX, V)) : 0;
    const int pk = min(max(d.prompt_k, 0), min(GPU_TOPK_MAX, V));
    if (!on_gpu && pk == 0) return; /* uniform: the whole CTA leaves */
    if (greedy_fast(d, V)) return;  /* greedy_kernel's row (uniform too) */
    const float *x = logits + (size_t)blockIdx.x * (size_t)V;

    /* 1. The maximum (lowest id on ties) and the distribution's mode. */
    unsigned long long best = 0;
    for (int i = tid; i < V; i += SP_THREADS) {
        const unsigned long long p = pack_kid(order_key(x[i]), i);
        best = p > best ? p : best;
    }
    best = block_max<SP_WARPS>(best, red64, 0ull);
    const int arg = unpack_id(best);
    dist dT;
    dT.max = x[arg];
    dT.mode = (dT.max != dT.max || dT.max == -INFINITY) ? DIST_NONE
              : dT.max == INFINITY                      ? DIST_POSINF
                                                        : DIST_FINITE;
    float temp = 1.0f;
    if (d.mode == GPU_ROW_TEMP) {
        temp = d.temperature > 0.0f ? d.temperature
                                    : 1.0f;   /* the host sends GREEDY for T <= 0 or NaN */
        if (temp == INFINITY) temp = FLT_MAX; /* inf / inf would be NaN */
    }
    dT.temp = temp;
    dist d1 = dT;
    d1.temp = 1.0f;
    const bool need1 = pk > 0 && temp != 1.0f; /* prompt logprobs want softmax at T = 1 too */

    /* 2. Span sums. Warp w owns ids [w * span, (w + 1) * span), span a multiple of 32. */
    const int span = (((V + SP_WARPS - 1) / SP_WARPS) + 31) & ~31;
    const int lo = warp * span, hi = min(V, lo + span);
    double run = 0.0, run1 = 0.0;
    int last = -1; /* highest id with a positive weight (the draw's fallback, as in sampler.c) */
    if (d.mode == GPU_ROW_TEMP) { /* the draw repeats these exact additions: a scan per tile */
        for (int base = lo; base < hi; base += 32) {
            const int i = base + lane;
            const float xv = i < hi ? x[i] : 0.0f;
            const float w = i < hi ? weight(dT, xv) : 0.0f;
            if (w > 0.0f) last = i;
            const double s = warp_scan_incl((double)w, lane);
            run += __shfl_sync(FULL_MASK, s, 31);
            if (need1) run1 += i < hi ? (double)weight(d1, xv) : 0.0; /* per lane; reduced below */
        }
        if (need1) run1 = warp_sum(run1);
    } else { /* only the normaliser: per-lane sums, one warp reduction */
        for (int base = lo; base < hi; base += 32) {
            const int i = base + lane;
            if (i < hi) run += (double)weight(dT, x[i]);
        }
        run = warp_sum(run);
    }
    if (lane == 0) span_sum[warp] = run, span_sum1[warp] = run1;
    last = block_max<SP_WARPS>(last, red32,
                               -1); /* also orders the span_sum writes before the reads below */
    if (tid == 0) {
        double p = 0.0, p1 = 0.0;
        prefix[0] = 0.0;
        for (int w = 0; w < SP_WARPS; w++) {
            p += span_sum[w];
            prefix[w + 1] = p;
            p1 += span_sum1[w];
        }
        s_z = p;
        s_z1 = need1 ? p1 : p;
        s_token = arg;
        s_wstar = -1;
        if (d.mode == GPU_ROW_TEMP) {
            const double target = rng_uniform01d(rng_hash2(d.seed, d.output_pos)) * p;
            s_target = target;
            for (int w = 0; w < SP_WARPS; w++)
                if (prefix[w + 1] > target) {
                    s_wstar = w;
                    break;
                }
            if (s_wstar < 0) s_token = last >= 0 ? last : arg; /* u * z rounded up to z */
        }
    }
    __syncthreads();

    /* 3. The draw: walk span w* with pass 2's additions until prefix + running sum > target. */
    if (d.mode == GPU_ROW_TEMP && warp == s_wstar) {
        const double pre = prefix[warp], target = s_target;
        double r = 0.0;
        for (int base = lo; base < hi; base += 32) {
            const int i = base + lane;
            const float w = i < hi ? weight(dT, x[i]) : 0.0f;
            const double s = warp_scan_incl((double)w, lane);
            const unsigned hit = __ballot_sync(FULL_MASK, pre + (r + s) > target);
            if (hit) {
                if (lane == 0) s_token = base + __ffs(hit) - 1;
                break;
            }
            r += __shfl_sync(FULL_MASK, s, 31);
        }
    }
    __syncthreads();
    const int token = s_token;
    const double log_z = log(s_z), log_z1 = log(s_z1);
    if (tid == 0) {
        gpu_row_out *o = outs + blockIdx.x;
        o->n_top = lp_k;
        o->n_prompt = pk;
        /* The prompt token's own logprob, with the top-K's arithmetic (equal when it is among them). */
        if (pk > 0 && d.prompt_target >= 0 && d.prompt_target < V)
            o->prompt_target_lp = (float)((double)scaled(d1, x[d.prompt_target]) - log_z1);
        if (on_gpu) {
            o->token = token;
            o->logprob = (float)((double)scaled(dT, x[token]) - log_z);
            if (d.slot >= 0 && d.slot < max_slots) slot_last[d.slot] = token;
        }
    }

    /* 4. Top-K entries, K = max(lp_k, pk). */
    const int K = max(lp_k, pk);
    if (K == 0) return;
    for (int b = tid; b < SP_BINS; b += SP_THREADS) hist[b] = 0u;
    __syncthreads();
    for (int i = tid; i < V; i += SP_THREADS) atomicAdd(&hist[order_key(x[i]) >> 21], 1u);
    __syncthreads();
    if (warp == 0) {
        /* Lane l owns bins 2047 - 64 l - j (j = 0..63): the lanes walk down from the top together.
         */
        uint32_t c = 0;
        for (int j = 0; j < 64; j++) c += hist[SP_BINS - 1 - 64 * lane - j];
        uint32_t cum = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t t = __shfl_up_sync(FULL_MASK, cum, o);
            if (lane >= o) cum += t;
        }
        const unsigned ball =
            __ballot_sync(FULL_MASK, cum >= (uint32_t)K); /* lane 31 holds V >= K */
        if (lane == __ffs(ball) - 1) {
            uint32_t acc = cum - c;
            for (int j = 0; j < 64; j++) {
                acc += hist[SP_BINS - 1 - 64 * lane - j];
                if (acc >= (uint32_t)K) {
                    s_bin = SP_BINS - 1 - 64 * lane - j;
                    s_ncand = (int)acc;
                    break;
                }
            }
        }
        if (lane == 0) s_count = 0;
    }
    __syncthreads();
    const uint32_t bin = (uint32_t)s_bin;
    const int ncand = s_ncand;
    unsigned long long prev = ~0ull;
    if (ncand <= SP_CAND) {
        for (int i = tid; i < V; i += SP_THREADS) {
            const uint32_t k = order_key(x[i]);
            if ((k >> 21) >= bin) {
                const int at =
                    atomicAdd(&s_count, 1); /* order does not matter: selection below is by value */
                if (at < SP_CAND) cand_key[at] = k, cand_id[at] = i;
            }
        }
        __syncthreads();
        const int n = min(s_count, SP_CAND);
        for (int r = 0; r < K; r++) {
            unsigned long long b = 0;
            for (int j = tid; j < n; j += SP_THREADS) {
                const unsigned long long p = pack_kid(cand_key[j], cand_id[j]);
                if (p < prev && p > b) b = p;
            }
            b = block_max<SP_WARPS>(b, red64, 0ull);
            if (tid == 0) top[r] = b ? unpack_id(b) : 0;
            prev = b;
        }
    } else { /* thousands of tied candidates: K passes over the row */
        for (int r = 0; r < K; r++) {
            unsigned long long b = 0;
            for (int i = tid; i < V; i += SP_THREADS) {
                const unsigned long long p = pack_kid(order_key(x[i]), i);
                if (p < prev && p > b) b = p;
            }
            b = block_max<SP_WARPS>(b, red64, 0ull);
            if (tid == 0) top[r] = b ? unpack_id(b) : 0;
            prev = b;
        }
    }
    __syncthreads();
    if (tid < K) {
        gpu_row_out *o = outs + blockIdx.x;
        const int id = top[tid];
        const float xv = x[id];
        if (tid < lp_k) {
            o->top_ids[tid] = id;
            o->top_lp[tid] = (float)((double)scaled(dT, xv) - log_z);
        }
        if (tid < pk) {
            o->prompt_ids[tid] = id;
            o->prompt_lp[tid] = (float)((double)scaled(d1, xv) - log_z1);
        }
    }
}

/* ---- the greedy fast path ----
 *
 * Why: a plain greedy row wants the argmax and z = the sum of exp(x - max) (its logprob is
 * scaled(max) - log z = -log z), yet sampling_kernel spends one CTA of 512 threads on it: ~167 us
 * per decode step on an H200 at batch 1 (ncu; 146 us in graph replays), 4.6% of a 3.6 ms step,
 * because one SM reads the whole 804 KB row (twice) and does the expf and the double additions
 * alone while the other 131 SMs idle.
 *
 * What: the row is cut into G chunks of `chunk` consecutive ids (a multiple of 32), one CTA of
 * GF_THREADS each, grid (rows, G). A chunk's CTA reads its chunk twice (the second time from L1/L2)
 * and makes the same two passes as sampling_kernel over it:
 *   1. its best (key, -id) pair, whose logit m_c is the chunk's maximum, and the chunk's dist (the
 *      mode of m_c, T = 1);
 *   2. z_c = the sum of weight(chunk dist, x_i) in double: the weights relative to m_c.
 * With G = 1 the chunk is the row and that is the answer. Otherwise thread 0 stores (best, z_c) in
 * the workspace, __threadfence()s and adds 1 to the row's counter; the CTA that sees G - 1 there is
 * the last one, so every partial is visible to it. It merges them: the best pair over the chunks
 * (the argmax of the row, lowest id on ties, exactly), the row's dist from its logit M, and
 *   z = sum over chunks c of  z_c * exp(m_c - M)  (FINITE: chunks whose m_c is finite)
 *                             z_c                  (POSINF: chunks holding a +inf, z_c = their
 *                                                   count; NONE: every chunk, z_c = its length)
 * in double, the chunks of any other mode adding 0 (their weights are 0 under the row's dist). It
 * writes the result as sampling_kernel does and puts the counter back to 0, so the next launch (a
 * graph replay too) finds the workspace as it was. Each sum has a fixed shape (thread t holds chunk
 * t; warp sums, then the warp totals in order), so a given (row, G) always gives the same bits.
 *
 * How close: the token is exact. Against the one-CTA z, z_c rounds expf(x - m_c) instead of
 * expf(x - M) (an ulp, ~1e-7 relative, per weight) and the -104 cut-off moves by m_c - M (only
 * weights under e^-104 ~ 1e-45 of the largest are affected): the logprob moves by ~1e-7, and
 * sampler.c's test bound is 1e-4.
 *
 * The shape (gf_geometry), measured on the H200 with gpt-oss's 201,088 ids, all rows plain greedy,
 * us per launch (both kernels; CUDA graph replays) against sampling_kernel alone before this path:
 *      rows        1     8    16    32    64   128   256   512
 *      before    146   147   148   151   151   246   491   976
 *      now       6.7  10.7  15.7  24.8  42.4  74.5   137   261
 * Few rows want many CTAs per row (G * rows ~ GF_BLOCKS, a few per SM on 132 SMs: G = 99 at one
 * row, 5.8 us for greedy_kernel; G = 32 took 9.3 us there, G = 1 162 us). Many rows want chunks
 * short enough that the second read comes from L2: from 32 rows on G stays at V / GF_CHUNK_MAX
 * (16 for gpt-oss, chunks of 12,576 ids); one CTA per row (G = 1) took 246 us at 256 rows and
 * 320 us at 512, G = 16 136 and 260, G = 64 161 and 319. No chunk is shorter than GF_CHUNK_MIN ids
 * (a vocabulary of 1,000 keeps G = 1). G depends on the number of rows under 32 only, where a
 * row's logprob may differ in its last bits from one batch size to another (the token never does).
 * Rows that are not plain greedy cost one extra, empty launch: ~0.7 us. */

enum {
    GF_THREADS = 256,
    GF_WARPS = GF_THREADS / 32,
    GF_UNROLL = 8,       /* loads in flight per thread */
    GF_BLOCKS = 512,     /* CTAs wanted per launch */
    GF_CHUNKS_MAX = 128, /* <= GF_THREADS: the merge holds one partial per thread */
    GF_CHUNK_MIN = 2048, /* ids */
    GF_CHUNK_MAX = 12800 /* ids (50 KB) */
};
static_assert(GF_CHUNKS_MAX <= GF_THREADS, "the merge holds one partial per thread");

/* One chunk's result (16 bytes). */
typedef struct {
    unsigned long long best; /* the chunk's largest (key, -id) pair */
    double z;                /* the sum of its weights relative to its own maximum */
} gf_part;

/* The dist of a row (or chunk) whose maximum logit is m, as sampling_kernel sets it, at T = 1. */
static __device__ __forceinline__ dist dist_at(float m) {
    dist r;
    r.max = m;
    r.mode = (m != m || m == -INFINITY) ? DIST_NONE : m == INFINITY ? DIST_POSINF : DIST_FINITE;
    r.temp = 1.0f;
    return r;
}

/* GF_UNROLL values of the chunk, loads in flight together: x[base + u·GF_THREADS + tid] (0 past hi). */
static __device__ __forceinline__ void gf_load(const float *x, int base, int hi,
                                               float v[GF_UNROLL]) {
#pragma unroll
    for (int u = 0; u < GF_UNROLL; u++) {
        const int i = base + u * GF_THREADS + (int)threadIdx.x;
        v[u] = i < hi ? x[i] : 0.0f;
    }
}

/* Block reductions over GF_THREADS threads (block_max<GF_WARPS> for the maximum); every thread
 * gets the result. red has GF_WARPS + 1 entries. */
/* The sum: each warp's xor tree, then the warp totals in warp order. */
static __device__ __forceinline__ double gf_sum(double v, double *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int w = 0; w < GF_WARPS; w++) s += red[w];
        red[GF_WARPS] = s;
    }
    __syncthreads();
    v = red[GF_WARPS];
    __syncthreads();
    return v;
}

/* The row's result, written as sampling_kernel writes a greedy row without lists. */
static __device__ __forceinline__ void gf_write(const gpu_row &d, const float *x, int arg,
                                                const dist &dM, double z, gpu_row_out *o,
                                                int32_t *slot_last, int max_slots) {
    o->n_top = 0;
    o->n_prompt = 0;
    o->token = arg;
    o->logprob = (float)((double)scaled(dM, x[arg]) - log(z));
    if (d.slot >= 0 && d.slot < max_slots) slot_last[d.slot] = arg;
}

/* Grid (rows, G), G = gridDim.y; counters [rows] and parts [rows][G] are the workspace (unused when
 * G == 1). */
__global__ void __launch_bounds__(GF_THREADS)
    greedy_kernel(const float *__restrict__ logits, int V, const gpu_row *rows, gpu_row_out *outs,
                  int32_t *slot_last, int max_slots, int chunk, unsigned int *counters,
                  gf_part *parts) {
    __shared__ unsigned long long red64[GF_WARPS + 1];
    __shared__ double redd[GF_WARPS + 1];
    __shared__ int s_last;

    const int tid = threadIdx.x, row = blockIdx.x, c = blockIdx.y, G = gridDim.y;
    const gpu_row d = rows[row];
    if (!greedy_fast(d, V)) return; /* sampling_kernel's row: the whole CTA leaves */
    const float *x = logits + (size_t)row * (size_t)V;
    const int lo = c * chunk, hi = min(V, lo + chunk); /* lo < V: the host makes no empty chunk */

    /* 1. The chunk's best pair, GF_UNROLL independent loads per thread in flight. */
    unsigned long long best = 0;
    for (int base = lo; base < hi; base += GF_THREADS * GF_UNROLL) {
        float v[GF_UNROLL];
        gf_load(x, base, hi, v);
#pragma unroll
        for (int u = 0; u < GF_UNROLL; u++) {
            const int i = base + u * GF_THREADS + tid;
            if (i < hi) {
                const unsigned long long p = pack_kid(order_key(v[u]), i);
                best = p > best ? p : best;
            }
        }
    }
    best = block_max<GF_WARPS>(best, red64, 0ull);
    const int arg = unpack_id(best);
    const dist dc = dist_at(x[arg]);

    /* 2. The chunk's weights relative to its maximum, per thread in double, then one block sum. */
    double z = 0.0;
    for (int base = lo; base < hi; base += GF_THREADS * GF_UNROLL) {
        float v[GF_UNROLL];
        gf_load(x, base, hi, v);
#pragma unroll
        for (int u = 0; u < GF_UNROLL; u++) {
            const int i = base + u * GF_THREADS + tid;
            if (i < hi) z += (double)weight(dc, v[u]);
        }
    }
    z = gf_sum(z, redd);
    if (G == 1) { /* the chunk is the row */
        if (tid == 0) gf_write(d, x, arg, dc, z, outs + row, slot_last, max_slots);
        return;
    }

    /* 3. Publish the partial; the row's last CTA to arrive merges. */
    if (tid == 0) {
        gf_part *p = parts + (size_t)row * (size_t)G + (size_t)c;
        p->best = best;
        p->z = z;
        __threadfence(); /* the partial before the count */
        const unsigned int seen = atomicAdd(counters + row, 1u);
        s_last = seen == (unsigned int)(G - 1);
        __threadfence(); /* the count before the partials read below */
    }
    __syncthreads();
    if (!s_last) return;

    /* 4. The merge, thread t holding chunk t (L2 reads: other SMs wrote them). */
    const gf_part *pr = parts + (size_t)row * (size_t)G;
    const unsigned long long pb = tid < G ? __ldcg(&pr[tid].best) : 0ull;
    const double pz = tid < G ? __ldcg(&pr[tid].z) : 0.0;
    const unsigned long long gbest = block_max<GF_WARPS>(pb, red64, 0ull);
    const int garg = unpack_id(gbest);
    const dist dM = dist_at(x[garg]);
    double zc = 0.0;
    if (tid < G) {
        const dist dt = dist_at(x[unpack_id(pb)]);
        if (dt.mode == dM.mode)
            zc = dM.mode == DIST_FINITE ? pz * exp((double)dt.max - (double)dM.max) : pz;
    }
    const double zall = gf_sum(zc, redd);
    if (tid == 0) {
        gf_write(d, x, garg, dM, zall, outs + row, slot_last, max_slots);
        counters[row] = 0u; /* ready for the next launch */
    }
}

/* The chunks of a launch of n_rows rows over V ids: G = ceil(GF_BLOCKS / n_rows), at least
 * ceil(V / GF_CHUNK_MAX), at most ceil(V / GF_CHUNK_MIN) and GF_CHUNKS_MAX; chunk = ceil(V / G)
 * rounded up to 32 ids; then G = ceil(V / chunk), so that no chunk is empty. */
static void gf_geometry(int n_rows, int V, int *chunk, int *G) {
    long long g = ((long long)GF_BLOCKS + n_rows - 1) / n_rows;
    const long long g_lo = ((long long)V + GF_CHUNK_MAX - 1) / GF_CHUNK_MAX,
                    g_hi = ((long long)V + GF_CHUNK_MIN - 1) / GF_CHUNK_MIN;
    if (g < g_lo) g = g_lo;
    if (g > g_hi) g = g_hi;
    if (g > GF_CHUNKS_MAX) g = GF_CHUNKS_MAX;
    if (g < 1) g = 1;
    long long ch = ((long long)V + g - 1) / g;
    ch = (ch + 31) / 32 * 32;
    if (ch > V) ch = V;
    *chunk = (int)ch;
    *G = (int)(((long long)V + ch - 1) / ch); /* <= g */
}

/* The workspace: counters [max_rows] (unsigned int), then the partials [max_rows][GF_CHUNKS_MAX]
 * (a launch of n rows uses [n][G] of them, G <= GF_CHUNKS_MAX whatever the vocabulary; 2 KB a row,
 * 1 MB for 512 rows, next to their 412 MB of logits). */
static size_t gf_counters_bytes(int max_rows) {
    return ((size_t)max_rows * sizeof(unsigned int) + 255) / 256 * 256;
}

extern "C" size_t sampling_workspace_bytes(int max_rows) {
    if (max_rows < 1) return 0;
    return gf_counters_bytes(max_rows) + (size_t)max_rows * GF_CHUNKS_MAX * sizeof(gf_part);
}

/* ---- structured output's masks ----
 *
 * One thread per token, so that both the mask words (32 lanes share one) and the logits are read and
 * written coalesced; only disallowed tokens are written. Grid (rows, ceil(V / MK_THREADS)). */
enum { MK_THREADS = 256 };

__global__ void __launch_bounds__(MK_THREADS)
    mask_kernel(float *logits, int V, const int32_t *mask_of_row, const uint32_t *masks,
                int words) {
    const int row = blockIdx.x, t = blockIdx.y * MK_THREADS + threadIdx.x;
    const int m = mask_of_row[row];
    if (m < 0 || t >= V) return;
    const int w = t >> 5;
    const uint32_t bits = w < words ? masks[(size_t)m * (size_t)words + (size_t)w] : 0u;
    if (!(bits >> (t & 31) & 1u)) logits[(size_t)row * (size_t)V + (size_t)t] = -INFINITY;
}

extern "C" cudaError_t sampling_mask_launch(float *logits, int vocab, int n_rows,
                                            const int32_t *mask_of_row, const uint32_t *masks,
                                            int words, cudaStream_t stream) {
    if (vocab < 1 || n_rows < 0 || words < 0 || !logits || (n_rows && !mask_of_row))
        return cudaErrorInvalidValue;
    if (n_rows == 0) return cudaSuccess;
    const unsigned gy = (unsigned)((vocab + MK_THREADS - 1) / MK_THREADS);
    mask_kernel<<<dim3((unsigned)n_rows, gy), MK_THREADS, 0, stream>>>(logits, vocab, mask_of_row,
                                                                       masks, words);
    return cudaGetLastError();
}

extern "C" cudaError_t sampling_launch(const float *logits, int vocab, const gpu_row *rows,
                                       int n_rows, gpu_row_out *outs, int32_t *slot_last,
                                       int max_slots, void *workspace, int workspace_rows,
                                       cudaStream_t stream) {
    if (vocab < 1 || n_rows < 0 || !logits || !rows || !outs) return cudaErrorInvalidValue;
    if (n_rows == 0) return cudaSuccess;
    if (workspace && n_rows > workspace_rows) return cudaErrorInvalidValue;
    int chunk = vocab, G = 1;
    if (workspace) gf_geometry(n_rows, vocab, &chunk, &G);
    unsigned int *counters = (unsigned int *)workspace;
    gf_part *parts =
        workspace ? (gf_part *)((char *)workspace + gf_counters_bytes(workspace_rows)) : NULL;
    greedy_kernel<<<dim3((unsigned)n_rows, (unsigned)G), GF_THREADS, 0, stream>>>(
        logits, vocab, rows, outs, slot_last, max_slots, chunk, counters, parts);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sampling_kernel<<<(unsigned)n_rows, SP_THREADS, 0, stream>>>(logits, vocab, rows, outs,
                                                                 slot_last, max_slots);
    return cudaGetLastError();
}
