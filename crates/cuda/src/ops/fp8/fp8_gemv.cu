// Block-scaled FP8 GEMV for decode (crates/cuda/src/ops/fp8/gemv.rs): up to
// MAX_MATS matrices in one launch, y_m[r][n] = sum_k x[r][k] * W_m[n][k] *
// s_m[n / 128][k / 128] for R = 1 ..= MAX_ROWS rows of x (bf16), W float8
// e4m3 [n][k] (one byte each, row-major), s f32 [ceil(n/128)][ceil(k/128)]
// (the checkpoint's `weight_scale_inv`), f32 accumulate, bf16 or f32 out.
// Every weight byte is read once for all rows.
//
// The structure is gemv.cu's: work comes in units of C consecutive outputs
// of one matrix over the whole k range, the matrices' units follow each
// other, the grid is persistent and warp w of W takes units w, w + W, ...
// A 16-byte chunk holds 16 weights of one row, inside one 128-column block
// (8 chunks a block): lane l takes the chunks l, l + 32, ... of each of its
// C rows, U of them per group (C * U = 8 loads a lane in flight at one row,
// 4 at more rows, where the C * R sums and the 16 converted weights a chunk
// take the registers), with the chunk's block scale loaded beside it. The next group is loaded before the
// current one is multiplied; the first before the kernel waits for the
// previous one (weights and scales are constant, PDL). A chunk's 16
// products are summed in f32, multiplied by their block's scale and added
// to the lane's f32 sum (the block's sum is thus taken in pieces of 16,
// each scaled); the warp then sums its lanes.
// e4m3 -> f32 times 2^-120 by three integer ops (e4m3.cuh), no conversion
// instruction; a chunk's 16 products in two chains of 8, their sum then
// multiplied by 2^120 (exact) and by the block's scale.
// `vec` = 0 (k not a multiple of 16, or x or a W not 16-byte aligned) takes
// a scalar loop over k instead. Outputs past n are computed on row n - 1
// and not written.
//
// fp8_gemv_experts (crates/cuda/src/ops/fp8/experts.rs), the MoE decode's
// variant, runs the same loops on other units: one output of one (row,
// expert) pair each, the pair's expert and input row taken from the
// expert ids (written by the routing kernel, so read after the wait) and
// the stacked experts' matrices; an id out of range writes NaN.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace headroom_fp8_gemv {

typedef __nv_bfloat16 bf16;
using headroom_e4m3::e4m3_scaled;
using headroom_e4m3::E4M3_UNSCALE;

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CTAS_PER_SM = 4;
constexpr int MAX_ROWS = 8;
constexpr int MAX_MATS = 6;
constexpr int BLOCK = 128;
// 16-byte chunks per 128-column block.
constexpr int CHUNKS_PER_BLOCK = BLOCK / 16;

struct Mat {
    const unsigned char* w;  // [n][k] e4m3
    const float* s;          // [ceil(n/128)][ceil(k/128)]
    void* y;                 // [rows][n], bf16 or f32
    int n;
    int first_unit;          // its first unit (C outputs each)
};

struct Params {
    const bf16* x;  // [rows][k]
    int rows;
    int k;
    int out_f32;
    int count;      // matrices used, 1 ..= MAX_MATS
    int vec;        // 16-byte loads (k % 16 == 0, x and every W aligned)
    int units;      // units of all matrices
    Mat m[MAX_MATS];
};
static_assert(sizeof(Mat) == 32, "Mat layout (gemv.rs)");
static_assert(sizeof(Params) == 32 + 32 * MAX_MATS, "Params layout (gemv.rs)");

// A weight chunk: read once, so not kept in L1; 256-byte L2 prefetch.
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// 8 bf16 -> f32.
__device__ __forceinline__ void unpack_bf16(const uint4& v, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        f[2 * j] = __uint_as_float(u[j] << 16);
        f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
}

// Two e4m3 (low byte first) -> f32.
__device__ __forceinline__ float2 fp8x2_to_float2(unsigned pair) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
    return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// 16 e4m3 -> f32 times 2^-120 (e4m3.cuh): a chunk's products are summed
// with these and the sum multiplied by E4M3_UNSCALE.
__device__ __forceinline__ void unpack_fp8(const uint4& v, float (&f)[16]) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        f[4 * j] = e4m3_scaled<0>(u[j]);
        f[4 * j + 1] = e4m3_scaled<1>(u[j]);
        f[4 * j + 2] = e4m3_scaled<2>(u[j]);
        f[4 * j + 3] = e4m3_scaled<3>(u[j]);
    }
}

__device__ __forceinline__ float fp8_to_float(unsigned char b) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(*reinterpret_cast<const __half*>(&h));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One unit: C weight rows (the last one repeated past n), the rows of x
// they multiply and where the outputs go; `bad` (an expert index out of
// range) makes the outputs NaN.
template <int C>
struct Unit {
    const unsigned char* w;
    const float* s;
    void* y;
    const bf16* x;
    int n;
    long long n0;
    bool bad;

    // Unit `u` of the launch (u < p.units).
    __device__ __forceinline__ Unit(const Params& p, int u) {
        x = p.x;
        bad = false;
        w = p.m[0].w;
        s = p.m[0].s;
        y = p.m[0].y;
        n = p.m[0].n;
        int first = 0;
#pragma unroll
        for (int i = 1; i < MAX_MATS; ++i) {
            if (i < p.count && u >= p.m[i].first_unit) {
                w = p.m[i].w;
                s = p.m[i].s;
                y = p.m[i].y;
                n = p.m[i].n;
                first = p.m[i].first_unit;
            }
        }
        n0 = (long long)(u - first) * C;
    }

    __device__ __forceinline__ long long row(int c) const { return n0 + c < n ? n0 + c : n - 1; }

    // The scales of row c's 128-row block (kb blocks along k).
    __device__ __forceinline__ const float* scales(int c, int kb) const {
        return s + (row(c) / BLOCK) * kb;
    }
};

// The batched-experts launch (MoE decode): pair q (a row and one of its
// experts) multiplies input row q / x_group by expert ids[q]'s matrix into
// y row q. ids are written by the routing kernel: read after the wait.
struct ExpertParams {
    const bf16* x;           // [pairs / x_group][k]
    const int* ids;          // [pairs]
    const unsigned char* w;  // [experts][n][k] e4m3
    const float* s;          // [experts][ceil(n/128)][ceil(k/128)]
    void* y;                 // [pairs][n], bf16 or f32
    int pairs;
    int x_group;             // pairs sharing one input row (top_k, or 1)
    int experts;
    int n;
    int k;
    int out_f32;
    int vec;                 // 16-byte loads (k % 16 == 0, x and w aligned)
    int units;               // pairs * n
};
static_assert(sizeof(ExpertParams) == 72, "ExpertParams layout (gemv.rs)");

// One output of one pair (C = 1).
struct ExpertUnit {
    const unsigned char* w;
    const float* s;
    void* y;
    const bf16* x;
    int n;
    long long n0;
    bool bad;

    __device__ __forceinline__ ExpertUnit(const ExpertParams& p, int u) {
        const int q = u / p.n;
        const int e = p.ids[q];
        bad = e < 0 || e >= p.experts;
        const long long ee = bad ? 0 : e;
        const long long nb = (p.n + BLOCK - 1) / BLOCK;
        const long long kb = (p.k + BLOCK - 1) / BLOCK;
        w = p.w + ee * p.n * (long long)p.k;
        s = p.s + ee * nb * kb;
        y = static_cast<char*>(p.y) + (size_t)q * p.n * (p.out_f32 ? 4 : 2);
        x = p.x + (size_t)(q / p.x_group) * p.k;
        n = p.n;
        n0 = u - (long long)q * p.n;
    }

    __device__ __forceinline__ long long row(int) const { return n0; }

    __device__ __forceinline__ const float* scales(int, int kb) const {
        return s + (n0 / BLOCK) * kb;
    }
};

// The chunks of group `g` (U per row at lane + 32 (g U + j)) and their
// scales; with GUARD (the row's last, partial group) zero past the row.
template <int C, int U, bool GUARD, class T>
__device__ __forceinline__ void load_group(const T& t, int stride, int kb, int g, int lane,
                                           uint4 (&wv)[C][U], float (&sc)[C][U]) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const uint4* wr = reinterpret_cast<const uint4*>(t.w) + t.row(c) * stride;
        const float* sr = t.scales(c, kb);
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int i = lane + 32 * (g * U + j);
            const bool in = !GUARD || i < stride;
            wv[c][j] = in ? load_weight(wr + i) : make_uint4(0u, 0u, 0u, 0u);
            sc[c][j] = in ? __ldg(sr + i / CHUNKS_PER_BLOCK) : 0.f;
        }
    }
}

// acc[c][r] += scale * (the chunk . x_r) for the chunks of group g; with
// GUARD, chunks past the row add nothing.
template <int R, int C, int U, bool GUARD>
__device__ __forceinline__ void fma_group(const uint4 (&wv)[C][U], const float (&sc)[C][U],
                                          const uint4* x4, int xstride, int stride, int g,
                                          int lane, float (&acc)[C][R]) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
        const int i = lane + 32 * (g * U + j);
        if (GUARD && i >= stride) continue;
        float wf[C][16];
#pragma unroll
        for (int c = 0; c < C; ++c) unpack_fp8(wv[c][j], wf[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float xf[16];
            unpack_bf16(__ldg(x4 + (size_t)r * xstride + 2 * i), xf);
            unpack_bf16(__ldg(x4 + (size_t)r * xstride + 2 * i + 1), xf + 8);
#pragma unroll
            for (int c = 0; c < C; ++c) {
                // Two chains of 8 (even and odd columns), then their sum.
                float p0 = 0.f, p1 = 0.f;
#pragma unroll
                for (int e = 0; e < 16; e += 2) {
                    p0 = fmaf(wf[c][e], xf[e], p0);
                    p1 = fmaf(wf[c][e + 1], xf[e + 1], p1);
                }
                acc[c][r] = fmaf((p0 + p1) * E4M3_UNSCALE, sc[c][j], acc[c][r]);
            }
        }
    }
}

// Whole groups take the unguarded code (up to 3 rows, where it fits the
// registers); the row's partial last group, and more rows, the guarded one.
template <int R, int C, int U, class T>
__device__ __forceinline__ void load_any(const T& t, int stride, int kb, int g, int lane,
                                         uint4 (&wv)[C][U], float (&sc)[C][U]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        load_group<C, U, false, T>(t, stride, kb, g, lane, wv, sc);
    } else {
        load_group<C, U, true, T>(t, stride, kb, g, lane, wv, sc);
    }
}

template <int R, int C, int U>
__device__ __forceinline__ void fma_any(const uint4 (&wv)[C][U], const float (&sc)[C][U],
                                        const uint4* x4, int xstride, int stride, int g, int lane,
                                        float (&acc)[C][R]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        fma_group<R, C, U, false>(wv, sc, x4, xstride, stride, g, lane, acc);
    } else {
        fma_group<R, C, U, true>(wv, sc, x4, xstride, stride, g, lane, acc);
    }
}

// Sums acc over the warp and writes the unit's outputs: lane c * R + r
// writes (r, n0 + c) (C * R <= 32), NaN for a bad unit; then zeroes acc.
template <int R, int C, class T>
__device__ __forceinline__ void finish(int out_f32, const T& t, int lane, float (&acc)[C][R]) {
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = warp_sum(acc[c][r]);
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (lane == c * R + r && t.n0 + c < t.n) {
                const size_t at = (size_t)r * t.n + t.n0 + c;
                const float v = t.bad ? __int_as_float(0x7fffffff) : acc[c][r];
                if (out_f32) {
                    static_cast<float*>(t.y)[at] = v;
                } else {
                    static_cast<bf16*>(t.y)[at] = __float2bfloat16_rn(v);
                }
            }
            acc[c][r] = 0.f;
        }
    }
}

// 16-byte path: the warp's units, one group loaded ahead of the one it
// multiplies. With WAIT_FIRST (units that depend on an earlier kernel's
// output) the wait comes before the first unit is made.
template <int R, int C, int U, bool WAIT_FIRST, class T, class P>
__device__ __forceinline__ void gemv_vec(const P& p, int warp0, int warps, int lane) {
    const int stride = p.k >> 4;   // 16-byte weight chunks per row
    const int xstride = p.k >> 3;  // 16-byte x chunks per row
    const int kb = (p.k + BLOCK - 1) / BLOCK;
    const int groups = max(1, (stride + 32 * U - 1) / (32 * U));
    int lu = warp0;  // the unit and group being loaded
    int lg = 0;
    if (WAIT_FIRST) wait_prior_then_release_next();
    T lt(p, lu);
    uint4 cur[C][U];
    float csc[C][U];
    load_any<R, C, U, T>(lt, stride, kb, 0, lane, cur, csc);
    if (!WAIT_FIRST) wait_prior_then_release_next();
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    while (true) {
        const T ct = lt;
        const int cg = lg;
        if (++lg == groups) {
            lg = 0;
            lu += warps;
            if (lu < p.units) lt = T(p, lu);
        }
        const bool more = lu < p.units;
        uint4 next[C][U];
        float nsc[C][U];
        if (more) load_any<R, C, U, T>(lt, stride, kb, lg, lane, next, nsc);
        fma_any<R, C, U>(cur, csc, reinterpret_cast<const uint4*>(ct.x), xstride, stride, cg,
                         lane, acc);
        if (cg == groups - 1) finish<R, C, T>(p.out_f32, ct, lane, acc);
        if (!more) break;
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int j = 0; j < U; ++j) {
                cur[c][j] = next[c][j];
                csc[c][j] = nsc[c][j];
            }
    }
}

// Scalar path (any k, any alignment): one unit after another, each product
// scaled by its block's scale.
template <int R, int C, class T, class P>
__device__ __forceinline__ void gemv_scalar(const P& p, int warp0, int warps, int lane) {
    wait_prior_then_release_next();
    const int k = p.k;
    const int kb = (k + BLOCK - 1) / BLOCK;
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    for (int u = warp0; u < p.units; u += warps) {
        const T t(p, u);
        const unsigned char* wrow[C];
        const float* srow[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            wrow[c] = t.w + t.row(c) * k;
            srow[c] = t.scales(c, kb);
        }
#pragma unroll 1
        for (int kk = lane; kk < k; kk += 32) {
            float wf[C];
#pragma unroll
            for (int c = 0; c < C; ++c)
                wf[c] = fp8_to_float(wrow[c][kk]) * __ldg(srow[c] + kk / BLOCK);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float xf = __bfloat162float(t.x[(size_t)r * k + kk]);
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c][r] = fmaf(wf[c], xf, acc[c][r]);
            }
        }
        finish<R, C, T>(p.out_f32, t, lane, acc);
    }
}

template <int R, int C, int U>
__device__ __forceinline__ void gemv(const Params& p) {
    const int lane = threadIdx.x & 31;
    const int warp0 = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int warps = gridDim.x * WARPS;
    if (warp0 >= p.units) {
        wait_prior_then_release_next();
        return;
    }
    if (p.vec) {
        gemv_vec<R, C, U, false, Unit<C>>(p, warp0, warps, lane);
    } else {
        gemv_scalar<R, C, Unit<C>>(p, warp0, warps, lane);
    }
}

// The batched-experts GEMV: one output of one pair a unit (one row, C = 1).
__device__ __forceinline__ void gemv_experts(const ExpertParams& p) {
    const int lane = threadIdx.x & 31;
    const int warp0 = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int warps = gridDim.x * WARPS;
    if (warp0 >= p.units) {
        wait_prior_then_release_next();
        return;
    }
    if (p.vec) {
        gemv_vec<1, 1, 8, true, ExpertUnit>(p, warp0, warps, lane);
    } else {
        gemv_scalar<1, 1, ExpertUnit>(p, warp0, warps, lane);
    }
}

}  // namespace headroom_fp8_gemv

// fp8_gemv_c{C}_r{R}: C outputs per unit, U chunks per row in a group, R
// rows: at one row one output per unit (8 chunks a lane in flight), or two
// (4 chunks of each row: whole groups at k = 2048, for wide launches); two
// at 2 ..= MAX_ROWS rows.
#define FP8_GEMV_ENTRY(NAME, C, U, R)                                                      \
    extern "C" __global__ void __launch_bounds__(headroom_fp8_gemv::THREADS,              \
                                                 headroom_fp8_gemv::CTAS_PER_SM)          \
        fp8_gemv_##NAME##_r##R(const headroom_fp8_gemv::Params p) {                        \
        headroom_fp8_gemv::gemv<R, C, U>(p);                                               \
    }

FP8_GEMV_ENTRY(c1, 1, 8, 1)
FP8_GEMV_ENTRY(c2, 2, 4, 1)
FP8_GEMV_ENTRY(c2, 2, 2, 2)
FP8_GEMV_ENTRY(c2, 2, 2, 3)
FP8_GEMV_ENTRY(c2, 2, 2, 4)
FP8_GEMV_ENTRY(c2, 2, 2, 5)
FP8_GEMV_ENTRY(c2, 2, 2, 6)
FP8_GEMV_ENTRY(c2, 2, 2, 7)
FP8_GEMV_ENTRY(c2, 2, 2, 8)

// fp8_gemv_experts: the batched-experts GEMV of MoE decode.
extern "C" __global__ void __launch_bounds__(headroom_fp8_gemv::THREADS,
                                             headroom_fp8_gemv::CTAS_PER_SM)
    fp8_gemv_experts(const headroom_fp8_gemv::ExpertParams p) {
    headroom_fp8_gemv::gemv_experts(p);
}
