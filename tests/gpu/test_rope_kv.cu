/* RoPE + KV write (src/backend/cuda/rope_kv.cu, rope_kv_launch_f32) against the CPU reference
 * (rope_init / rope_cos_sin / rope_apply of model/rope.c) at real shapes (64 q heads, 8 KV heads,
 * head_dim 64), random positions up to 131071, random shuffled block tables of both pools (the sliding
 * one starting at swa_first > 0), block sizes 16/32/64, and padding rows with slot -1; launches of
 * 1, 2, 47 and 255 tokens (the kernel's spread layout, several CTAs per token) and >= 256. Two
 * kinds of input rows: bf16 values widened to fp32 with no second row and no bias (V must then
 * come out bit-exact), and fp32 hi + lo + a bf16 bias, as runner_forward.c passes them.
 * Checks: q and k within bf16 rounding of the reference, V the input rounded once, every output
 * written, and not one other cache element touched (the whole cache is poisoned with NaN before the
 * launch), nor the q row past the last token. --bench times the kernel (hi + lo + bias, as in the
 * forward pass) for 1..8192 tokens, with both cache dtypes. --seed N reproduces a run.
 *
 * Every case runs twice: bf16 cache, then FP8 (e4m3 codes, attn_dims.kv_fp8) with a per-KV-head
 * scale table of powers of two, non-powers of two and one head scaled so that its values saturate
 * (|x / s| > 448). FP8 checks: V codes bit-exact against f32_to_e4m3(x * (1/s)) of the host
 * (base/numfmt.h: the same RNE + satfinite), so the GPU's cvt and the CPU reference agree code for
 * code; K codes equal to the host's rounding of the reference rotation except where the reference
 * value sits within 1e-5 (relative) of a rounding midpoint (the rotation's fp32 arithmetic differs
 * from the CPU's in the last bits), and then only by one code; K's relative error vs the unrounded
 * reference within e4m3's (<= 2^-4 per value); the q rows as with bf16; no stray writes (the cache
 * is poisoned with the NaN code 0xff). */
#include "gpu_check.h"
#include "rope_test_util.h"

extern "C" {
#include "model/rope.h"
#include "model/config.h"
}
#include "backend/cuda/rope_kv.h"
#include "backend/cuda/kv_fp8.cuh"

#include <string.h>

#include <vector>

enum { NH = 64, NKV = 8, HDIM = 64, QKV = (NH + 2 * NKV) * HDIM, WINDOW = 128 };

typedef struct {
    int start_pos, n_new;
} seq_spec;

/* One launch: the sequences fixed[0..n_fixed) (start position, new tokens), n_rand more with
 * random positions and 1..rand_max new tokens, and with pad one last padding row (slot -1, as a
 * CUDA graph's rounded-up batch has). `label` names the case in the output. */
/* The FP8 cases' scale table: K scales, V scales, then their fp32 reciprocals (attention.h). Head 5's
 * scales make |x / s| reach past 448 (saturation); the others are powers of two and not. */
static void fp8_scales(float *t) {
    const float ks[NKV] = {1.0f, 0.5f, 2.0f, 0.37f, 1.0f, 1.0f / 64, 3.0f, 0.125f};
    const float vs[NKV] = {1.0f, 0.25f, 0.7f, 4.0f, 1.0f, 1.0f / 128, 1.0f, 0.03f};
    for (int j = 0; j < NKV; j++)
        t[j] = ks[j], t[NKV + j] = vs[j], t[2 * NKV + j] = 1.0f / ks[j],
        t[3 * NKV + j] = 1.0f / vs[j];
}

/* Whether code `got` is an acceptable e4m3 rounding of q = x / s: the host's code, or its neighbour
 * when q lies within 1e-5 (relative) + slack (absolute: the rotation's fp32 rounding, ~1e-6 of the
 * inputs' size, times 1/s, which matters where x c - y s cancels) of the midpoint between the two. */
static bool e4m3_close(uint8_t got, float q, float slack) {
    const uint8_t want = f32_to_e4m3(q);
    if (got == want) return true;
    const float a = e4m3_to_f32(got), b = e4m3_to_f32(want);
    if (!isfinite(a) || fabsf(a - b) > fmaxf(0.2f * fabsf(b), 0.0025f)) return false; /* > 1 code */
    const float mid = 0.5f * (a + b);
    return fabsf(q - mid) <= 1e-5f * fabsf(q) + slack;
}

static void run_case(const rope_table *rt, const rope_kv_freq *freq, int bs, bool sliding,
                     const seq_spec *fixed, int n_fixed, int n_rand, int rand_max, bool pad,
                     const char *label, rng_t *rng, bool fp8) {
    const int ns = n_fixed + n_rand;
    seq_spec *sp = (seq_spec *)malloc(ns * sizeof(seq_spec));
    for (int i = 0; i < n_fixed; i++) sp[i] = fixed[i];
    for (int i = n_fixed; i < ns; i++)
        sp[i].start_pos = rng_below(rng, 131000), sp[i].n_new = 1 + rng_below(rng, rand_max);

    int32_t *query_start = (int32_t *)malloc((ns + 1) * sizeof(int32_t)),
            *start_pos = (int32_t *)malloc(ns * sizeof(int32_t)),
            *first = (int32_t *)malloc(ns * sizeof(int32_t));
    query_start[0] = 0;
    for (int i = 0; i < ns; i++)
        query_start[i + 1] = query_start[i] + sp[i].n_new, start_pos[i] = sp[i].start_pos;
    const int n_seq_tokens = query_start[ns];
    const int n_tokens = n_seq_tokens + (pad ? 1 : 0);

    /* Block tables: only the logical blocks the new tokens touch get (distinct, shuffled) physical
     * blocks; on the sliding pool the table starts at swa_first = the first touched block minus 0..1. */
    int stride = 0, n_touched = 0;
    for (int i = 0; i < ns; i++) {
        const int lb0 = sp[i].start_pos / bs, lb1 = (sp[i].start_pos + sp[i].n_new - 1) / bs;
        const int extra = rng_below(rng, 2); /* an older block not yet given back */
        first[i] = sliding ? (lb0 - extra > 0 ? lb0 - extra : 0) : 0;
        if (lb1 + 1 - first[i] > stride) stride = lb1 + 1 - first[i];
        n_touched += lb1 - lb0 + 1;
    }
    const int num_blocks = n_touched + 7; /* spare blocks that must stay untouched */
    int32_t *perm = (int32_t *)malloc(num_blocks * sizeof(int32_t));
    for (int b = 0; b < num_blocks; b++) perm[b] = b;
    rng_shuffle(rng, perm, num_blocks);
    int32_t *tables = (int32_t *)malloc((size_t)ns * stride * sizeof(int32_t));
    for (int k = 0; k < ns * stride; k++) tables[k] = -1;
    int next = 0;
    for (int i = 0; i < ns; i++) {
        const int lb0 = sp[i].start_pos / bs, lb1 = (sp[i].start_pos + sp[i].n_new - 1) / bs;
        for (int lb = lb0; lb <= lb1; lb++) tables[i * stride + lb - first[i]] = perm[next++];
    }
    int32_t *slots = (int32_t *)malloc(n_tokens * sizeof(int32_t));
    int rc = rope_kv_slots(ns, query_start, start_pos, tables, stride, sliding ? first : NULL, bs,
                           slots);
    CHECK(rc == 0, "rope_kv_slots found a missing block");
    int32_t *positions = (int32_t *)malloc(n_tokens * sizeof(int32_t));
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < sp[i].n_new; j++) positions[query_start[i] + j] = sp[i].start_pos + j;
    if (pad) positions[n_seq_tokens] = 12345, slots[n_seq_tokens] = -1;

    /* Random bf16 QKV rows (post-bias activations: a few units), passed widened to fp32. */
    uint16_t *qkv = (uint16_t *)malloc((size_t)n_tokens * QKV * sizeof(uint16_t));
    float *qkv_f = (float *)malloc((size_t)n_tokens * QKV * sizeof(float));
    for (size_t k = 0; k < (size_t)n_tokens * QKV; k++) {
        qkv[k] = f32_to_bf16(2.0f * rng_normal(rng));
        qkv_f[k] = bf16_to_f32(qkv[k]);
    }

    const size_t cache_elems = (size_t)num_blocks * NKV * bs * HDIM;
    const size_t eb = fp8 ? 1 : 2; /* bytes of a cache element */
    float sc[4 * NKV];
    fp8_scales(sc);
    float *d_sc = (float *)gpu_upload(sc, sizeof sc);
    float *d_qkv = (float *)gpu_upload(qkv_f, (size_t)n_tokens * QKV * 4);
    int32_t *d_pos = (int32_t *)gpu_upload(positions, n_tokens * 4),
            *d_slots = (int32_t *)gpu_upload(slots, n_tokens * 4);
    /* q_out has one guard row past the last token, which must keep its poison. */
    const size_t q_elems = (size_t)n_tokens * NH * HDIM, q_guard = NH * HDIM;
    uint16_t *d_q = (uint16_t *)gpu_alloc((q_elems + q_guard) * 2);
    uint16_t *d_k = (uint16_t *)gpu_alloc(cache_elems * eb),
             *d_v = (uint16_t *)gpu_alloc(cache_elems * eb);

    attn_dims d = {NH, NKV, HDIM, bs, fp8 ? 1 : 0};
    uint16_t *q = (uint16_t *)malloc((q_elems + q_guard) * 2);
    uint16_t *kc = (uint16_t *)malloc(cache_elems * 2), *vc = (uint16_t *)malloc(cache_elems * 2);
    uint8_t *kc8 = (uint8_t *)kc, *vc8 = (uint8_t *)vc; /* the FP8 view of the same copies */
    char *written = (char *)calloc(cache_elems, 1);

    /* The forward pass's inputs: rows hi and lo and a bf16 bias, summed in that order. */
    const size_t nq = (size_t)n_tokens * QKV;
    float *hi = (float *)malloc(nq * 4), *lo = (float *)malloc(nq * 4);
    uint16_t *bias = (uint16_t *)malloc(QKV * 2);
    for (size_t k = 0; k < nq; k++)
        hi[k] = 2.0f * rng_normal(rng), lo[k] = 0.004f * rng_normal(rng);
    for (int k = 0; k < QKV; k++) bias[k] = f32_to_bf16(0.5f * rng_normal(rng));
    float *d_hi = (float *)gpu_upload(hi, nq * 4), *d_lo = (float *)gpu_upload(lo, nq * 4);
    uint16_t *d_bias = (uint16_t *)gpu_upload(bias, QKV * 2);

    for (int form = 0; form < 2; form++) { /* 0: bf16 rows widened, alone; 1: fp32 hi + lo + bias */
        gpu_poison(d_q, (q_elems + q_guard) * 2);
        gpu_poison(d_k, cache_elems * eb);
        gpu_poison(d_v, cache_elems * eb);
        if (form == 0)
            CUDA_CHECK(rope_kv_launch_f32(&d, freq, d_qkv, NULL, NULL, QKV, n_tokens, d_pos,
                                          d_slots, d_q, d_k, d_v, fp8 ? d_sc : NULL, 0));
        else
            CUDA_CHECK(rope_kv_launch_f32(&d, freq, d_hi, d_lo, d_bias, QKV, n_tokens, d_pos,
                                          d_slots, d_q, d_k, d_v, fp8 ? d_sc : NULL, 0));
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(q, d_q, (q_elems + q_guard) * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(kc, d_k, cache_elems * eb, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(vc, d_v, cache_elems * eb, cudaMemcpyDeviceToHost));
        auto input = [&](int tk, int idx) -> float {
            const size_t k = (size_t)tk * QKV + idx;
            return form == 0 ? bf16_to_f32(qkv[k]) : (hi[k] + lo[k]) + bf16_to_f32(bias[idx]);
        };

        /* Reference, token by token; mark every cache element that should have been written. */
        memset(written, 0, cache_elems);
        relerr_acc eq = {0, 0, 0}, ek = {0, 0, 0};
        long v_mismatch = 0, k_bad = 0, k_near = 0, k_sat = 0;
        float cosv[ROPE_MAX_HALF], sinv[ROPE_MAX_HALF], x[HDIM];
        for (int tk = 0; tk < n_tokens; tk++) {
            rope_cos_sin(rt, positions[tk], cosv, sinv);
            for (int h = 0; h < NH + NKV; h++) {
                for (int i = 0; i < HDIM; i++) x[i] = input(tk, h * HDIM + i);
                rope_apply(rt, cosv, sinv, x);
                if (h < NH) {
                    for (int i = 0; i < HDIM; i++)
                        relerr_add(&eq, bf16_to_f32(q[((size_t)tk * NH + h) * HDIM + i]), x[i]);
                } else if (slots[tk] >= 0) {
                    const int s = slots[tk], j = h - NH;
                    const size_t off = (((size_t)(s / bs) * NKV + j) * bs + s % bs) * HDIM;
                    for (int i = 0; i < HDIM; i++) {
                        written[off + i] = 1;
                        if (!fp8) {
                            relerr_add(&ek, bf16_to_f32(kc[off + i]), x[i]);
                            continue;
                        }
                        const float qv = x[i] * sc[2 * NKV + j];
                        const uint8_t code = kc8[off + i];
                        if (!e4m3_close(code, qv, 1e-5f * sc[2 * NKV + j])) k_bad++;
                        k_near += code != f32_to_e4m3(qv);
                        k_sat += fabsf(qv) > 448.0f;
                        if (fabsf(qv) <= 448.0f) /* the error of values inside the range */
                            relerr_add(&ek, e4m3_to_f32(code) * sc[j], x[i]);
                    }
                }
            }
            if (slots[tk] >= 0) {
                const int s = slots[tk];
                for (int j = 0; j < NKV; j++) {
                    const size_t off = (((size_t)(s / bs) * NKV + j) * bs + s % bs) * HDIM;
                    for (int i = 0; i < HDIM; i++) {
                        const float xv = input(tk, (NH + NKV + j) * HDIM + i);
                        if (fp8)
                            v_mismatch += vc8[off + i] != f32_to_e4m3(xv * sc[3 * NKV + j]);
                        else
                            v_mismatch += vc[off + i] != f32_to_bf16(xv);
                    }
                }
            }
        }
        long stray_k = 0, stray_v = 0, stray_q = 0;
        for (size_t k = 0; k < cache_elems; k++)
            if (!written[k]) {
                if (fp8)
                    stray_k += kc8[k] != 0xff, stray_v += vc8[k] != 0xff;
                else
                    stray_k += !bf16_is_poison(kc[k]), stray_v += !bf16_is_poison(vc[k]);
            }
        for (size_t k = q_elems; k < q_elems + q_guard; k++) stray_q += !bf16_is_poison(q[k]);

        const double rq = relerr_get(&eq), rk = relerr_get(&ek);
        const char *fn = form == 0 ? (fp8 ? "bf16 rows, fp8 cache" : "bf16 rows")
                                   : (fp8 ? "fp32 hi+lo+bias, fp8 cache" : "fp32 hi+lo+bias");
        printf("rope_kv %s bs=%d %s, %s: %d tokens, q rel err %.2e, k rel err %.2e, v mismatches "
               "%ld, stray writes %ld/%ld/%ld",
               label, bs, sliding ? "sliding" : "full", fn, n_tokens, rq, rk, v_mismatch, stray_q,
               stray_k, stray_v);
        if (fp8)
            printf(", k codes off the host's %ld (at a midpoint %ld), saturated %ld", k_bad, k_near,
                   k_sat);
        printf("\n");
        CHECK(rq <= 4e-3, "%s %s: q relative error %.3e (bs %d, %s)", label, fn, rq, bs,
              sliding ? "sliding" : "full");
        /* e4m3: <= 2^-4 relative per value, ~2^-4/sqrt(12)*... in RMS: 0.03 is well above it */
        CHECK(rk <= (fp8 ? 4e-2 : 4e-3), "%s %s: k relative error %.3e (bs %d, %s)", label, fn, rk,
              bs, sliding ? "sliding" : "full");
        CHECK(k_bad == 0, "%s %s: %ld K codes are not the host's e4m3 rounding", label, fn, k_bad);
        CHECK(!fp8 || k_near * 200 <= (long)n_tokens * NKV * HDIM + 200,
              "%s %s: %ld K codes at rounding midpoints (> 0.5%%)", label, fn, k_near);
        CHECK(v_mismatch == 0, "%s %s: %ld V values differ from the input rounded once", label, fn,
              v_mismatch);
        CHECK(stray_q == 0 && stray_k == 0 && stray_v == 0,
              "%s %s: elements written outside the outputs: q %ld (past the last token), k %ld, "
              "v %ld (outside the slots)",
              label, fn, stray_q, stray_k, stray_v);
    }
    free(hi), free(lo), free(bias);
    CUDA_CHECK(cudaFree(d_hi));
    CUDA_CHECK(cudaFree(d_lo));
    CUDA_CHECK(cudaFree(d_bias));

    free(written), free(q), free(kc), free(vc), free(qkv), free(qkv_f), free(positions),
        free(slots), free(tables);
    free(perm), free(sp), free(query_start), free(start_pos), free(first);
    CUDA_CHECK(cudaFree(d_qkv));
    CUDA_CHECK(cudaFree(d_pos));
    CUDA_CHECK(cudaFree(d_slots));
    CUDA_CHECK(cudaFree(d_q));
    CUDA_CHECK(cudaFree(d_k));
    CUDA_CHECK(cudaFree(d_v));
    CUDA_CHECK(cudaFree(d_sc));
}

/* ---- the device conversions of kv_fp8.cuh against base/numfmt.h ---- */

__global__ void conv_decode_kernel(uint32_t *exact, uint32_t *f16) {
    const int c = threadIdx.x; /* 256 codes; pairs (c, c ^ 0x80) */
    const uint32_t two = (uint32_t)c | ((uint32_t)(c ^ 0x80) << 8);
    exact[c] = e4m3x2_to_bf16x2_exact(two);
    /* decode's picks, each of its three ways to the pair: x's low half, its high half, and byte 0
     * of x with byte 0 of y through a byte-permute */
    const uint32_t x = two | (two << 16), y = (uint32_t)(c ^ 0x80) * 0x01010101u;
    f16[c] = e4m3_pick_f16x2<0, 1>(x, y);
    f16[256 + c] = e4m3_pick_f16x2<2, 3>(x, y);
    f16[512 + c] = e4m3_pick_f16x2<0, 4>(x, y);
}
__global__ void conv_encode_kernel(const float *x, int n, uint8_t *codes) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) {
        const uint32_t w = pack_e4m3x2(x[2 * i], x[2 * i + 1]);
        codes[2 * i] = (uint8_t)w, codes[2 * i + 1] = (uint8_t)(w >> 8);
    }
}

static float f16_bits_to_f32(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(1024 + m), e - 25);
    return s ? -v : v;
}

static void test_conversions(void) {
    /* Decode: all 256 codes, both device paths, must give the host's values exactly, signed zeros
     * included (NaN codes NaN): bf16 (prefill) and fp16 (decode, by each of its three picks). */
    uint32_t *d_ex = (uint32_t *)gpu_alloc(256 * 4), *d_f16 = (uint32_t *)gpu_alloc(3 * 256 * 4);
    conv_decode_kernel<<<1, 256>>>(d_ex, d_f16);
    CUDA_CHECK(cudaGetLastError());
    uint32_t ex[256], h[3 * 256];
    CUDA_CHECK(cudaMemcpy(ex, d_ex, sizeof ex, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h, d_f16, sizeof h, cudaMemcpyDeviceToHost));
    long bad = 0;
    for (int c = 0; c < 256; c++) {
        const float want[2] = {e4m3_to_f32((uint8_t)c), e4m3_to_f32((uint8_t)(c ^ 0x80))};
        float got[4][2]; /* bf16, then the three fp16 picks */
        got[0][0] = bf16_to_f32((uint16_t)ex[c]), got[0][1] = bf16_to_f32((uint16_t)(ex[c] >> 16));
        for (int k = 0; k < 3; k++) {
            got[1 + k][0] = f16_bits_to_f32((uint16_t)h[256 * k + c]);
            got[1 + k][1] = f16_bits_to_f32((uint16_t)(h[256 * k + c] >> 16));
        }
        const bool nan = (c & 0x7f) == 0x7f;
        bool ok = true;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 2; j++)
                ok = ok && (nan ? isnan(got[k][j]) != 0
                                : got[k][j] == want[j] && signbit(got[k][j]) == signbit(want[j]));
        if (!ok && bad++ < 5)
            fprintf(stderr,
                    "code 0x%02x: host %g / %g, bf16 %g / %g, fp16 %g / %g, %g / %g, %g / %g\n", c,
                    (double)want[0], (double)want[1], (double)got[0][0], (double)got[0][1],
                    (double)got[1][0], (double)got[1][1], (double)got[2][0], (double)got[2][1],
                    (double)got[3][0], (double)got[3][1]);
    }
    CHECK(bad == 0, "e4m3 decode on the device: %ld of 256 codes differ from the host's", bad);

    /* Encode: the GPU's cvt.rn.satfinite against f32_to_e4m3 on a sweep of fp32 patterns in
     * [0, 600] (step 2^9 ulps), their negatives, every midpoint between codes, +-inf and NaN. */
    std::vector<float> xs;
    float lim = 600.0f;
    uint32_t ulim;
    memcpy(&ulim, &lim, 4);
    for (uint32_t u = 0; u <= ulim; u += 1u << 9) {
        float a;
        memcpy(&a, &u, 4);
        xs.push_back(a), xs.push_back(-a);
    }
    for (int c = 0; c < 0x7e; c++) {
        const float mid = 0.5f * (e4m3_to_f32((uint8_t)c) + e4m3_to_f32((uint8_t)(c + 1)));
        xs.push_back(mid), xs.push_back(-mid);
    }
    xs.push_back(INFINITY), xs.push_back(-INFINITY), xs.push_back(NAN), xs.push_back(3e38f);
    if (xs.size() % 2) xs.push_back(0.0f);
    const int n = (int)xs.size();
    float *d_x = (float *)gpu_upload(xs.data(), (size_t)n * 4);
    uint8_t *d_c = (uint8_t *)gpu_alloc((size_t)n);
    conv_encode_kernel<<<(n / 2 + 255) / 256, 256>>>(d_x, n, d_c);
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint8_t> codes((size_t)n);
    CUDA_CHECK(cudaMemcpy(codes.data(), d_c, (size_t)n, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t want = f32_to_e4m3(xs[(size_t)i]);
        const bool ok =
            isnan(xs[(size_t)i]) ? (codes[(size_t)i] & 0x7f) == 0x7f : codes[(size_t)i] == want;
        if (!ok && bad++ < 5)
            fprintf(stderr, "e4m3 of %.9g: device 0x%02x, host 0x%02x\n", (double)xs[(size_t)i],
                    codes[(size_t)i], want);
    }
    printf("e4m3 conversions: 256 codes decoded (4 paths), %d values encoded, %ld differ from the "
           "host\n",
           n, bad);
    CHECK(bad == 0, "e4m3 encode on the device: %ld of %d values differ from f32_to_e4m3", bad, n);
    CUDA_CHECK(cudaFree(d_ex));
    CUDA_CHECK(cudaFree(d_f16));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_c));
}

static void bench(const rope_kv_freq *freq, uint64_t seed) {
    const int sizes[] = {1, 64, 256, 8192};
    const int bs = 32;
    printf("| case | time (us) | achieved | fraction of ceiling |\n| --- | --- | --- | --- |\n");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float sc[4 * NKV];
    fp8_scales(sc);
    float *d_sc = (float *)gpu_upload(sc, sizeof sc);
    for (size_t cc = 0; cc < 2 * sizeof sizes / sizeof sizes[0]; cc++) {
        const size_t c = cc % (sizeof sizes / sizeof sizes[0]);
        const int fp8 = cc >= sizeof sizes / sizeof sizes[0];
        const int n = sizes[c];
        const int num_blocks = (n + bs - 1) / bs;
        attn_dims d = {NH, NKV, HDIM, bs, fp8};
        /* As the forward pass calls it: fp32 hi and lo rows and a bf16 bias. */
        float *d_hi = (float *)gpu_alloc((size_t)n * QKV * 4),
              *d_lo = (float *)gpu_alloc((size_t)n * QKV * 4);
        uint16_t *d_bias = (uint16_t *)gpu_alloc(QKV * 2);
        gpu_fill_f32(d_hi, (size_t)n * QKV, seed + c, 3.f);
        gpu_fill_f32(d_lo, (size_t)n * QKV, seed + c + 100, 0.01f);
        gpu_fill_bf16(d_bias, QKV, seed + c + 200, 0.5f);
        int32_t *pos = (int32_t *)malloc(n * 4), *slots = (int32_t *)malloc(n * 4);
        for (int i = 0; i < n; i++)
            pos[i] = 5000 + i, slots[i] = i; /* one sequence, blocks in order */
        int32_t *d_pos = (int32_t *)gpu_upload(pos, n * 4),
                *d_slots = (int32_t *)gpu_upload(slots, n * 4);
        uint16_t *d_q = (uint16_t *)gpu_alloc((size_t)n * NH * HDIM * 2);
        const size_t cache = (size_t)num_blocks * NKV * bs * HDIM * 2;
        uint16_t *d_k = (uint16_t *)gpu_alloc(cache), *d_v = (uint16_t *)gpu_alloc(cache);
        const int reps = 20;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int r = 0; r < reps; r++)
            CUDA_CHECK(rope_kv_launch_f32(&d, freq, d_hi, d_lo, d_bias, QKV, n, d_pos, d_slots, d_q,
                                          d_k, d_v, fp8 ? d_sc : NULL, st));
        CUDA_CHECK(cudaStreamEndCapture(st, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        const float us = gpu_time_graph_us(exec, st, reps, 15);
        const double bytes =
            (double)n * (2.0 * QKV * 4 + NH * HDIM * 2 + 2 * NKV * HDIM * (fp8 ? 1 : 2)) + QKV * 2;
        const double gbps = bytes / (us * 1e-6) / 1e9;
        printf("| rope_kv %d tokens%s | %.2f | %.0f GB/s | %.2f |\n", n, fp8 ? " (fp8 cache)" : "",
               us, gbps, gbps / H200_GBPS);
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(cudaFree(d_hi));
        CUDA_CHECK(cudaFree(d_lo));
        CUDA_CHECK(cudaFree(d_bias));
        CUDA_CHECK(cudaFree(d_pos));
        CUDA_CHECK(cudaFree(d_slots));
        CUDA_CHECK(cudaFree(d_q));
        CUDA_CHECK(cudaFree(d_k));
        CUDA_CHECK(cudaFree(d_v));
        free(pos), free(slots);
    }
    CUDA_CHECK(cudaFree(d_sc));
    CUDA_CHECK(cudaStreamDestroy(st));
}

int main(int argc, char **argv) {
    const uint64_t seed = gpu_test_seed(argc, argv);
    printf("test_rope_kv: seed %llu\n", (unsigned long long)seed);
    rng_t rng;
    rng_seed(&rng, seed);

    rope_table rt;
    rope_kv_freq freq;
    rope_tables_120b(&rt, &freq);

    /* Launch sizes on both sides of the kernel's switch from 5 CTAs per token (below 256 tokens)
     * to one: a lone decode (1 token), a decode in a batch padded to 2, 47 tokens (decodes, a
     * chunk and a padding row), 255 (the largest spread launch) and a large mixed step (>= 256:
     * fresh prompts, chunks in the middle of long sequences, decodes at large positions, 9 random
     * sequences). */
    const seq_spec one[] = {{70000, 1}}, two[] = {{5, 1}}, mid[] = {{100, 16}, {131000, 1}};
    const seq_spec s255[] = {{0, 200}, {4090, 40}};
    const seq_spec big[] = {{0, 1},      {0, 17},  {100, 28},  {4090, 13},
                            {131000, 7}, {127, 1}, {128, 129}, {2000, 50}};
    const int block_sizes[] = {16, 32, 64};
    for (int f8 = 0; f8 < 2; f8++) /* bf16 cache, then FP8 */
        for (int b = 0; b < 3; b++)
            for (int sl = 0; sl < 2; sl++) {
                const int bs = block_sizes[b];
                const bool fp8 = f8 == 1;
                run_case(&rt, &freq, bs, sl == 1, one, 1, 0, 1, false, "1 token", &rng, fp8);
                run_case(&rt, &freq, bs, sl == 1, two, 1, 0, 1, true, "2 tokens", &rng, fp8);
                run_case(&rt, &freq, bs, sl == 1, mid, 2, 29, 1, true, "47 tokens", &rng, fp8);
                run_case(&rt, &freq, bs, sl == 1, s255, 2, 15, 1, false, "255 tokens", &rng, fp8);
                run_case(&rt, &freq, bs, sl == 1, big, 8, 9, 40, true, ">= 256 tokens", &rng, fp8);
            }
    /* The device conversions against the host's, for every code and a sweep of floats. */
    test_conversions();

    if (gpu_test_flag(argc, argv, "--bench")) bench(&freq, seed);
    return check_report("test_rope_kv");
}
