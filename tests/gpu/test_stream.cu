/* How fast can a kernel read N bytes of weights, by access pattern? The decode kernels stream each
 * weight byte once, so their floor is bytes / bandwidth, but at 30-50 MB a read lasts only ~10 µs and
 * the pattern of the reads decides how much of the 4.2 TB/s it sees. Patterns:
 *   sweep        every thread reads 16 B at a time in a grid-stride loop, 8 loads in flight: the
 *                whole GPU moves through memory in address order (the memcpy shape);
 *   tiles U      each warp owns a contiguous 23 KB tile (a 16-row MXFP4 tile of the MoE small kernel:
 *                45 k steps of 512 B) and reads it in batches of U steps (all U loads, then the sums):
 *                1,500 streams at once, each 512 B at a time;
 *   interleaved  the same work per warp, but step j of warp w is at (j · warps + w) · 512: the warps
 *                read side by side, so the GPU again moves through memory in address order;
 *   rows16       the dense skinny GEMM's shape: a warp reads 16 rows of 5,760 B, 64 B of each per
 *                load (4 lanes per row), U = 8 loads per row pair in flight.
 * Each kernel adds every 32-bit word into a checksum that is compared with the host's (so a
 * pattern that skips or repeats bytes fails). --bench prints the table; without it only the checks
 * run (small sizes). */
#include "gpu_check.h"
#include "moe_test_util.h"

#include "backend/cuda/device_util.cuh"

#include <vector>

static __host__ __device__ inline uint32_t word_at(size_t i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (uint32_t)x;
}

static __global__ void fill_kernel(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = word_at(i);
}

static __device__ inline uint32_t sum4(uint4 v) {
    return v.x + v.y + v.z + v.w;
}

static __device__ inline void block_add(uint32_t *out, uint32_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

static __global__ void sweep_kernel(const uint4 *p, size_t n16, uint32_t *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + 7 * stride < n16; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = ldg_stream16(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 8; u++) acc += sum4(v[u]);
    }
    for (; i < n16; i += stride) acc += sum4(ldg_stream16(p + i));
    block_add(out, acc);
}

/* steps: 512-byte steps per warp; INTER: step j of warp w at (j · warps + w), else (w · steps + j). */
template <int U, bool INTER>
static __global__ void tiles_kernel(const uint4 *p, int warps, int steps, uint32_t *out) {
    const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    uint32_t acc = 0;
    if (w < warps) {
        for (int j0 = 0; j0 < steps; j0 += U) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = j0 + u;
                const size_t step = INTER ? (size_t)j * warps + w : (size_t)w * steps + j;
                v[u] = j < steps ? ldg_stream16(p + step * 32 + lane) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; u++) acc += sum4(v[u]);
        }
    }
    block_add(out, acc);
}

/* rows of `rowb` bytes; a warp reads 16 of them, lane (g, t) rows g and g+8 at 16-byte column 4c+t. */
static __global__ void rows16_kernel(const uint4 *p, int tiles, int row16, uint32_t *out) {
    const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    uint32_t acc = 0;
    if (w < tiles) {
        const uint4 *ra = p + ((size_t)w * 16 + g) * row16, *rb = ra + (size_t)8 * row16;
        const int chunks = row16 / 4;
        for (int c0 = 0; c0 < chunks; c0 += 8) {
            uint4 a[8], b[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const bool ok = c0 + u < chunks;
                a[u] = ok ? ldg_stream16(ra + (c0 + u) * 4 + t) : make_uint4(0, 0, 0, 0);
                b[u] = ok ? ldg_stream16(rb + (c0 + u) * 4 + t) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) acc += sum4(a[u]) + sum4(b[u]);
        }
    }
    block_add(out, acc);
}

static __global__ void empty_kernel(uint32_t *out) {
    if (threadIdx.x == 1000) *out = 0;
}

enum { STEP = 512, TILE_STEPS = 45, ROW_BYTES = 5760 };

struct pattern {
    const char *name;
    int kind; /* 0 sweep, 1 tiles U=6, 2 tiles U=16, 3 interleaved U=6, 4 rows16 */
};

static void launch(int kind, const uint4 *p, size_t bytes, uint32_t *out, int sms,
                   cudaStream_t st) {
    const int warps = (int)(bytes / (STEP * TILE_STEPS));
    switch (kind) {
    case 0:
        sweep_kernel<<<sms * 4, 256, 0, st>>>(p, bytes / 16, out);
        break;
    case 1:
        tiles_kernel<6, false><<<(warps + 3) / 4, 128, 0, st>>>(p, warps, TILE_STEPS, out);
        break;
    case 2:
        tiles_kernel<16, false><<<(warps + 3) / 4, 128, 0, st>>>(p, warps, TILE_STEPS, out);
        break;
    case 3:
        tiles_kernel<6, true><<<(warps + 3) / 4, 128, 0, st>>>(p, warps, TILE_STEPS, out);
        break;
    default: {
        const int tiles = (int)(bytes / (16 * ROW_BYTES));
        rows16_kernel<<<(tiles + 7) / 8, 256, 0, st>>>(p, tiles, ROW_BYTES / 16, out);
    }
    }
}

/* Bytes a pattern covers of a buffer of `bytes` (whole tiles or row blocks only). */
static size_t covered(int kind, size_t bytes) {
    if (kind == 0) return bytes / 16 * 16;
    if (kind == 4) return bytes / (16 * ROW_BYTES) * 16 * ROW_BYTES;
    return bytes / (STEP * TILE_STEPS) * STEP * TILE_STEPS;
}

static const pattern PATTERNS[] = {
    {"sweep", 0}, {"tiles U=6", 1}, {"tiles U=16", 2}, {"interleaved U=6", 3}, {"rows16", 4}};

int main(int argc, char **argv) {
    tu_init("test_stream");
    const bool bench = tu_has_flag(argc, argv, "--bench");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    const int sms = tu_sm_count();
    /* QKV (29.5 MB), gate_up of 4 experts (35.4 MB), lm_head (1.16 GB); tests: a few MB. */
    const size_t sizes_bench[] = {29491200, 35389440, 1158266880};
    const size_t sizes_test[] = {3538944, 1000000};
    const size_t *sizes = bench ? sizes_bench : sizes_test;
    const int n_sizes = bench ? 3 : 2;
    const int copies = bench ? 8 : 1; /* rotate so that no repetition finds its bytes in L2 */
    uint32_t *out = tu_dev_alloc<uint32_t>(1);
    if (bench) tu_bench_header();
    if (bench) {
        const double us =
            tu_time_us(st, 5, 200, [&](int) { empty_kernel<<<sms, 128, 0, st>>>(out); });
        tu_bench_row("empty kernel (launch floor)", us, 0, 0);
    }
    for (int si = 0; si < n_sizes; si++) {
        const size_t bytes = sizes[si];
        const int ncopies = bytes > (512u << 20) ? 2 : copies;
        std::vector<uint4 *> buf(ncopies);
        for (auto &b : buf) {
            CUDA_CHECK(cudaMalloc(&b, bytes));
            fill_kernel<<<sms * 8, 256, 0, st>>>((uint32_t *)b, bytes / 4);
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        for (const pattern &pt : PATTERNS) {
            const size_t cov = covered(pt.kind, bytes);
            uint32_t want = 0;
            for (size_t i = 0; i < cov / 4; i++) want += word_at(i);
            CUDA_CHECK(cudaMemsetAsync(out, 0, 4, st));
            launch(pt.kind, buf[0], bytes, out, sms, st);
            uint32_t got = 0;
            CUDA_CHECK(cudaMemcpyAsync(&got, out, 4, cudaMemcpyDeviceToHost, st));
            CUDA_CHECK(cudaStreamSynchronize(st));
            CHECK(got == want, "%s over %zu bytes: checksum %08x, expected %08x", pt.name, bytes,
                  got, want);
            if (!bench) continue;
            const double us = tu_time_us(st, 3, bytes > (512u << 20) ? 20 : 100, [&](int i) {
                launch(pt.kind, buf[i % ncopies], bytes, out, sms, st);
            });
            char name[128];
            snprintf(name, sizeof name, "%s %.1f MB", pt.name, bytes / 1e6);
            tu_bench_row(name, us, (double)cov, 0);
            if (bytes < (40u << 20)) { /* the same bytes again at once: what an L2 prefetch buys */
                const double us2 = tu_time_us(
                    st, 3, 100, [&](int) { launch(pt.kind, buf[0], bytes, out, sms, st); });
                snprintf(name, sizeof name, "%s %.1f MB, L2-warm", pt.name, bytes / 1e6);
                tu_bench_row(name, us2, (double)cov, 0);
            }
        }
        for (auto &b : buf) CUDA_CHECK(cudaFree(b));
    }
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaStreamDestroy(st));
    return check_report("test_stream");
}
