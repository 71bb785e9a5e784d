/* The MXFP4 expert weights re-packed once at load into the layout the expert kernels read (moe.h
 * describes it; moe_dequant.cuh turns its words back into bf16), and the largest scale byte of a
 * matrix (moe_scales_max), which decides the folded dequantisation.
 *
 * The repack of one output word is a pure function of its index (repack_one): one thread per word.
 * The test (tests/gpu/test_moe.cu) decodes every word of the result on the host and compares it with
 * the checkpoint's values. The bit positions a code is moved to are the ones moe_dequant.cuh's
 * shifts, rotate and masks expect (element i = k 8t + i, bit positions of m, e0, e1, s;
 * moe_dequant.cuh says why this layout):
 *
 *     i = 0: 6 7 8 15     i = 2: 2 3 4 11      i = 4: 28 29 30 5     i = 6: 0 1 10 9
 *     i = 1: 22 23 24 31  i = 3: 18 19 20 27   i = 5: 12 13 14 21    i = 7: 16 17 26 25 */
#include "backend/cuda/moe.h"
#include "backend/cuda/cuda_check.h"

/* Where the 4 bits of the code for element i (0…7, k order) of a word go: bit positions of m, e0,
 * e1, s (the table above, moe_dequant.cuh's place_codes). */
static __device__ __forceinline__ uint32_t pack_code(uint32_t c, int i) {
    static const uint8_t POS[8][4] = {{6, 7, 8, 15},    {22, 23, 24, 31}, {2, 3, 4, 11},
                                      {18, 19, 20, 27}, {28, 29, 30, 5},  {12, 13, 14, 21},
                                      {0, 1, 10, 9},    {16, 17, 26, 25}};
    uint32_t w = 0;
    for (int b = 0; b < 4; b++) w |= ((c >> b) & 1u) << POS[i][b];
    return w;
}

/* src: 4 checkpoint bytes read little-endian, so element i (k = 8t+i) is the nibble at bits 4i…4i+3
 * (byte i/2, low nibble for even i). */
static __device__ __forceinline__ uint32_t pack_word(uint32_t src) {
    uint32_t w = 0;
    for (int i = 0; i < 8; i++) w |= pack_code((src >> (4 * i)) & 15u, i);
    return w;
}

/* Checkpoint row of tile row i (0…15) of row tile rt. */
static __device__ __forceinline__ int tile_row(int rt, int i, int gate_up) {
    if (!gate_up) return 16 * rt + i;
    const int o = 8 * rt + (i & 7); /* SwiGLU output index */
    return 2 * o + (i >> 3);        /* rows 0…7 gate (even), 8…15 up (odd) */
}

/* One output word: index w over [E][RT][KK][32][4]. */
static __device__ __forceinline__ void repack_one(const uint8_t *blocks, const uint8_t *scales,
                                                  int R, int K, int gate_up, size_t w,
                                                  uint32_t *q_out, uint8_t *s_out, int *write_scale,
                                                  size_t *s_index) {
    const int KK = K / 64, RT = R / 16, nb = K / 32;
    const int j = (int)(w & 3);
    const int lane = (int)((w >> 2) & 31);
    size_t rest = w >> 7;
    const int kk = (int)(rest % KK);
    rest /= KK;
    const int rt = (int)(rest % RT);
    const size_t e = rest / RT;
    const int g = lane >> 2, t = lane & 3;
    const int row = tile_row(rt, g + 8 * (j & 1), gate_up);
    const int chunk = 2 * kk + (j >> 1);
    const uint8_t *src = blocks + ((e * R + row) * nb + chunk) * 16 + 4 * t;
    const uint32_t v = (uint32_t)src[0] | ((uint32_t)src[1] << 8) | ((uint32_t)src[2] << 16) |
                       ((uint32_t)src[3] << 24);
    *q_out = pack_word(v);
    /* Scale words: [E][RT][KK][8 g][4 j]; lane t == 0 of each g writes them. */
    *write_scale = t == 0;
    *s_index = (((e * RT + rt) * KK + kk) * 8 + g) * 4 + j;
    *s_out = scales[(e * R + row) * nb + chunk];
}

size_t moe_repack_q_bytes(int E, int R, int K) {
    return (size_t)E * R * K / 2;
}
size_t moe_repack_s_bytes(int E, int R, int K) {
    return (size_t)E * R * K / 32;
}

static int repack_shape_ok(int E, int R, int K, int gate_up) {
    return E > 0 && R > 0 && K > 0 && R % 16 == 0 && K % 64 == 0 && E < 65536 &&
           (!gate_up || R % 2 == 0);
}

__global__ void moe_repack_kernel(const uint8_t *blocks, const uint8_t *scales, int R, int K,
                                  int gate_up, size_t n_words, uint32_t *q, uint8_t *s) {
    for (size_t w = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w < n_words;
         w += (size_t)gridDim.x * blockDim.x) {
        uint32_t word;
        uint8_t sc;
        int ws;
        size_t si;
        repack_one(blocks, scales, R, K, gate_up, w, &word, &sc, &ws, &si);
        q[w] = word;
        if (ws) s[si] = sc;
    }
}

cudaError_t moe_repack_device(const uint8_t *blocks, const uint8_t *scales, int E, int R, int K,
                              int gate_up, uint8_t *q, uint8_t *s, cudaStream_t stream) {
    if (!repack_shape_ok(E, R, K, gate_up)) return cudaErrorInvalidValue;
    const size_t n_words = moe_repack_q_bytes(E, R, K) / 4;
    const size_t blocks_n = (n_words + 255) / 256;
    moe_repack_kernel<<<(unsigned)(blocks_n < 65536 ? blocks_n : 65536), 256, 0, stream>>>(
        blocks, scales, R, K, gate_up, n_words, (uint32_t *)q, s);
    return cudaGetLastError();
}

/* The largest scale byte of a (repacked or checkpoint) scale array: decides the folded dequantisation. */
__global__ void scales_max_kernel(const uint8_t *s, size_t n, int *out) {
    int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        m = max(m, (int)s[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, m); /* max is order-free: deterministic */
}

cudaError_t moe_scales_max(const uint8_t *s, size_t n, int *max_out, cudaStream_t stream) {
    if (!s || !max_out) return cudaErrorInvalidValue;
    int *d = NULL;
    CUDA_TRY(cudaMallocAsync((void **)&d, sizeof(int), stream));
    cudaError_t e = cudaMemsetAsync(d, 0, sizeof(int), stream);
    if (e == cudaSuccess && n > 0) {
        const size_t blocks = (n + 255) / 256;
        scales_max_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(s, n, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(max_out, d, sizeof(int), cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaError_t f = cudaFreeAsync(d, stream);
    return e != cudaSuccess ? e : f;
}
