// Skinny bf16 GEMV for decode (crates/cuda/src/backend/gemv.rs): up to
// MAX_MATS matrices in one launch, y_m[r][n] = sum_k x[r][k] * W_m[n][k] for
// R = 1 ..= MAX_ROWS rows of x, f32 accumulate, bf16 or f32 out. Every weight
// byte is read once for all rows: at one row the launch is bound by the bytes
// of its matrices, not by a GEMM's tiles.
//
// Each warp computes C consecutive outputs n of one matrix over the whole k
// range: lane l takes the 16-byte chunks l, l + 32, ... of each of its C
// weight rows, U chunks per row in flight (C * U = 8 loads a lane), the
// rows of x read through L1 (`__ldg`; the weights skip L1). The matrices'
// CTAs follow each other along blockIdx.x (`Mat::first_block`, increasing).
// `vec` = 0 (k not a multiple of 8, or a pointer not 16-byte aligned) takes a
// scalar loop over k instead. Outputs past n are computed on row n - 1 and
// not written.

#include <cuda_bf16.h>

namespace headroom_gemv {

typedef __nv_bfloat16 bf16;

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_ROWS = 8;
constexpr int MAX_MATS = 6;

struct Mat {
    const bf16* w;    // [n][k]
    void* y;          // [rows][n], bf16 or f32
    int n;
    int first_block;  // its first CTA along blockIdx.x
};

struct Params {
    const bf16* x;  // [rows][k]
    int rows;
    int k;
    int out_f32;
    int count;      // matrices used, 1 ..= MAX_MATS
    int vec;        // 16-byte loads (k % 8 == 0, every pointer aligned)
    int pad;
    Mat m[MAX_MATS];
};
static_assert(sizeof(Mat) == 24, "Mat layout (gemv.rs)");
static_assert(sizeof(Params) == 32 + 24 * MAX_MATS, "Params layout (gemv.rs)");

// A weight chunk: read once, so not kept in L1; 256-byte L2 prefetch.
// `volatile` keeps a call's loads together ahead of the FMAs that use them
// in PTX.
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8]) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        f[2 * j] = __uint_as_float(u[j] << 16);
        f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// acc[c][r] += wv[c][u] . x_r, the chunks at lane index i + 32u.
template <int R, int C, int U>
__device__ __forceinline__ void fma_chunks(const uint4 (&wv)[C][U], const uint4* x4, int stride,
                                           int i, float (&acc)[C][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        float wf[C][8];
#pragma unroll
        for (int c = 0; c < C; ++c) unpack(wv[c][u], wf[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float xf[8];
            unpack(__ldg(x4 + (size_t)r * stride + i + 32 * u), xf);
#pragma unroll
            for (int c = 0; c < C; ++c)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[c][r] = fmaf(wf[c][j], xf[j], acc[c][r]);
        }
    }
}

// The U chunks at i + 32u of each of the C rows, loaded to registers.
template <int R, int C, int U>
__device__ __forceinline__ void chunks(const uint4* (&wrow)[C], const uint4* x4, int stride, int i,
                                       float (&acc)[C][R]) {
    uint4 wv[C][U];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int u = 0; u < U; ++u) wv[c][u] = load_weight(wrow[c] + i + 32 * u);
    fma_chunks<R, C, U>(wv, x4, stride, i, acc);
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

template <int R, int C, int U>
__device__ __forceinline__ void gemv(const Params& p) {
    const int b = blockIdx.x;
    const bf16* w = p.m[0].w;
    void* y = p.m[0].y;
    int n = p.m[0].n, first = 0;
#pragma unroll
    for (int i = 1; i < MAX_MATS; ++i) {
        if (i < p.count && b >= p.m[i].first_block) {
            w = p.m[i].w;
            y = p.m[i].y;
            n = p.m[i].n;
            first = p.m[i].first_block;
        }
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long n0 = ((long long)(b - first) * WARPS + warp) * C;
    if (n0 >= n) return;
    const int k = p.k;
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
    if (p.vec) {
        const int stride = k >> 3;
        const uint4* wrow[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const long long row = n0 + c < n ? n0 + c : n - 1;
            wrow[c] = reinterpret_cast<const uint4*>(w) + row * stride;
        }
        // The weights do not depend on the previous kernel: start pulling
        // this warp's first chunks into L2, then wait for it (PDL).
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (lane + 32 * u < stride) prefetch_l2(wrow[c] + lane + 32 * u);
        wait_prior_then_release_next();
        const uint4* x4 = reinterpret_cast<const uint4*>(p.x);
        int i = lane;
#pragma unroll 1
        for (; i + 32 * (U - 1) < stride; i += 32 * U) chunks<R, C, U>(wrow, x4, stride, i, acc);
#pragma unroll 1
        for (; i < stride; i += 32) chunks<R, C, 1>(wrow, x4, stride, i, acc);
    } else {
        wait_prior_then_release_next();
        const bf16* wrow[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const long long row = n0 + c < n ? n0 + c : n - 1;
            wrow[c] = w + row * k;
        }
#pragma unroll 1
        for (int kk = lane; kk < k; kk += 32) {
            float wf[C];
#pragma unroll
            for (int c = 0; c < C; ++c) wf[c] = __bfloat162float(wrow[c][kk]);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float xf = __bfloat162float(p.x[(size_t)r * k + kk]);
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c][r] = fmaf(wf[c], xf, acc[c][r]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = warp_sum(acc[c][r]);
    // Lane c * R + r writes output (r, n0 + c): C * R <= 32.
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (lane == c * R + r && n0 + c < n) {
                const size_t at = (size_t)r * n + n0 + c;
                if (p.out_f32) {
                    static_cast<float*>(y)[at] = acc[c][r];
                } else {
                    static_cast<bf16*>(y)[at] = __float2bfloat16_rn(acc[c][r]);
                }
            }
        }
    }
}

}  // namespace headroom_gemv

// gemv_c{C}_r{R}: C outputs per warp, U chunks per output in flight, R rows:
// one output per warp at one row, two at 2 ..= MAX_ROWS rows.
#define GEMV_ENTRY(NAME, C, U, R)                                                     \
    extern "C" __global__ void __launch_bounds__(headroom_gemv::THREADS)             \
        gemv_##NAME##_r##R(const headroom_gemv::Params p) {                           \
        headroom_gemv::gemv<R, C, U>(p);                                              \
    }

GEMV_ENTRY(c1, 1, 8, 1)
GEMV_ENTRY(c2, 2, 4, 2)
GEMV_ENTRY(c2, 2, 4, 3)
GEMV_ENTRY(c2, 2, 4, 4)
GEMV_ENTRY(c2, 2, 4, 5)
GEMV_ENTRY(c2, 2, 4, 6)
GEMV_ENTRY(c2, 2, 4, 7)
GEMV_ENTRY(c2, 2, 4, 8)
