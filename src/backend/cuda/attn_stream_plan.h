/* The attention stream kernel's work partition (attn_stream.cu), as plain integer functions that
 * the kernel runs on the device and tests/test_attn_stream_plan.c runs on the host: which QKV row
 * pairs and O rows a block owns, and which keys a (sequence, KV head) split reads. Plain C, host
 * and device. */
#ifndef GPTOSS_BACKEND_CUDA_ATTN_STREAM_PLAN_H
#define GPTOSS_BACKEND_CUDA_ATTN_STREAM_PLAN_H

#ifdef __CUDACC__
#define ASP_FN static __host__ __device__ __forceinline__
#else
#define ASP_FN static inline
#endif

enum { ASP_KEYS = 64 }; /* keys a chunk */

/* Block b of G's share of n items: [*lo, *lo + return value). Consecutive blocks' shares are
 * contiguous and cover [0, n) once; their sizes differ by at most one. */
ASP_FN int asp_share(int b, int G, int n, int *lo) {
    const int a = (int)((long long)b * n / G), e = (int)((long long)(b + 1) * n / G);
    *lo = a;
    return e - a;
}

/* The visible keys [*k_lo, key_end) of a one-token sequence at position pos (window 0: every
 * earlier key; else the last `window` keys, the current one included), and their 64-key chunks. */
ASP_FN int asp_chunks(int pos, int window, int *k_lo) {
    *k_lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    return (pos + 1 - *k_lo + ASP_KEYS - 1) / ASP_KEYS;
}

/* Split `split` of SL slots over n_chunks chunks: its chunks [*c0, *c1) and the number of splits
 * that have keys (returned; the rest, split ≥ that, read nothing). Every split but the last gets
 * ceil(n_chunks / min(SL, n_chunks)) chunks. */
ASP_FN int asp_split(int n_chunks, int SL, int split, int *c0, int *c1) {
    const int s = SL < n_chunks ? SL : n_chunks;
    const int per = (n_chunks + s - 1) / s;
    const int S = (n_chunks + per - 1) / per;
    *c0 = split * per;
    *c1 = *c0 + per < n_chunks ? *c0 + per : n_chunks;
    return S;
}

#endif
