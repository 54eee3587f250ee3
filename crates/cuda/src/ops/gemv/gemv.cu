// Skinny bf16 GEMV for decode (crates/cuda/src/ops/gemv/mod.rs): up to
// MAX_MATS matrices in one launch, y_m[r][n] = sum_k x[r][k] * W_m[n][k] for
// R = 1 ..= MAX_ROWS rows of x, f32 accumulate, bf16 or f32 out. Every weight
// byte is read once for all rows: at one row the launch is bound by the bytes
// of its matrices, not by a GEMM's tiles.
//
// Work comes in units: C consecutive outputs n of one matrix over the whole
// k range. The matrices' units follow each other (`Mat::first_unit`,
// increasing; `Params::units` in all). The grid is persistent (a few CTAs
// per SM, `gemv.rs` sizes it): warp w of W takes units w, w + W, ... A unit's
// k range is cut into groups of 32 * U 16-byte chunks per row: lane l takes
// the chunks l, l + 32, ... of each of its C weight rows, U of them per
// group (C * U = 8 loads a lane). The warp loads the next group (of this unit
// or of its next one) into registers before it multiplies the current one,
// so its loads stay in flight while it computes; the first group is loaded
// before the kernel waits for the previous one (the weights are constant,
// PDL). Rows of x are read through L1 (`__ldg`); the weights skip L1. A lane
// sums its chunks in order, then the warp sums its lanes.
// `vec` = 0 (k not a multiple of 8, or a pointer not 16-byte aligned) takes a
// scalar loop over k instead. Outputs past n are computed on row n - 1 and
// not written.

#include <cuda_bf16.h>

namespace headroom_gemv {

typedef __nv_bfloat16 bf16;

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CTAS_PER_SM = 4;
constexpr int MAX_ROWS = 8;
constexpr int MAX_MATS = 6;

struct Mat {
    const bf16* w;   // [n][k]
    void* y;         // [rows][n], bf16 or f32
    int n;
    int first_unit;  // its first unit (C outputs each)
};

struct Params {
    const bf16* x;  // [rows][k]
    int rows;
    int k;
    int out_f32;
    int count;      // matrices used, 1 ..= MAX_MATS
    int vec;        // 16-byte loads (k % 8 == 0, every pointer aligned)
    int units;      // units of all matrices
    Mat m[MAX_MATS];
};
static_assert(sizeof(Mat) == 24, "Mat layout (gemv.rs)");
static_assert(sizeof(Params) == 32 + 24 * MAX_MATS, "Params layout (gemv.rs)");

// A weight chunk: read once, so not kept in L1; 256-byte L2 prefetch.
// `volatile` keeps a group's loads together ahead of the FMAs in PTX.
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

// One unit: C weight rows (the last one repeated past n) and where they go.
template <int C>
struct Unit {
    const bf16* w;
    void* y;
    int n;
    long long n0;

    // Unit `u` of the launch (u < p.units).
    __device__ __forceinline__ Unit(const Params& p, int u) {
        w = p.m[0].w;
        y = p.m[0].y;
        n = p.m[0].n;
        int first = 0;
#pragma unroll
        for (int i = 1; i < MAX_MATS; ++i) {
            if (i < p.count && u >= p.m[i].first_unit) {
                w = p.m[i].w;
                y = p.m[i].y;
                n = p.m[i].n;
                first = p.m[i].first_unit;
            }
        }
        n0 = (long long)(u - first) * C;
    }

    __device__ __forceinline__ long long row(int c) const { return n0 + c < n ? n0 + c : n - 1; }
};

// The chunks of group `g` (U per row at lane + 32 (g U + j)); with GUARD
// (the row's last, partial group) zero past the row.
template <int C, int U, bool GUARD>
__device__ __forceinline__ void load_group(const Unit<C>& t, int stride, int g, int lane,
                                           uint4 (&wv)[C][U]) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const uint4* wr = reinterpret_cast<const uint4*>(t.w) + t.row(c) * stride;
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int i = lane + 32 * (g * U + j);
            wv[c][j] = !GUARD || i < stride ? load_weight(wr + i) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// acc[c][r] += the chunks of group g . x_r; with GUARD, chunks past the row
// add nothing (without, the group is whole: no branch, the x loads hoist).
template <int R, int C, int U, bool GUARD>
__device__ __forceinline__ void fma_group(const uint4 (&wv)[C][U], const uint4* x4, int stride,
                                          int g, int lane, float (&acc)[C][R]) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
        const int i = lane + 32 * (g * U + j);
        if (GUARD && i >= stride) continue;
        float wf[C][8];
#pragma unroll
        for (int c = 0; c < C; ++c) unpack(wv[c][j], wf[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float xf[8];
            unpack(__ldg(x4 + (size_t)r * stride + i), xf);
#pragma unroll
            for (int c = 0; c < C; ++c)
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[c][r] = fmaf(wf[c][e], xf[e], acc[c][r]);
        }
    }
}

// A group, whole or the row's partial last one (warp-uniform choice; with
// more than 3 rows always the guarded code, which needs fewer registers).
template <int R, int C, int U>
__device__ __forceinline__ void load_any(const Unit<C>& t, int stride, int g, int lane,
                                         uint4 (&wv)[C][U]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        load_group<C, U, false>(t, stride, g, lane, wv);
    } else {
        load_group<C, U, true>(t, stride, g, lane, wv);
    }
}

// The unguarded group hoists its R * U loads of x: only up to 3 rows, where
// that fits the registers (more rows keep the per-chunk guard).
template <int R, int C, int U>
__device__ __forceinline__ void fma_any(const uint4 (&wv)[C][U], const uint4* x4, int stride,
                                        int g, int lane, float (&acc)[C][R]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        fma_group<R, C, U, false>(wv, x4, stride, g, lane, acc);
    } else {
        fma_group<R, C, U, true>(wv, x4, stride, g, lane, acc);
    }
}

// Sums acc over the warp and writes the unit's outputs: lane c * R + r
// writes (r, n0 + c) (C * R <= 32); then zeroes acc.
template <int R, int C>
__device__ __forceinline__ void finish(const Params& p, const Unit<C>& t, int lane,
                                       float (&acc)[C][R]) {
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
                if (p.out_f32) {
                    static_cast<float*>(t.y)[at] = acc[c][r];
                } else {
                    static_cast<bf16*>(t.y)[at] = __float2bfloat16_rn(acc[c][r]);
                }
            }
            acc[c][r] = 0.f;
        }
    }
}

// 16-byte path: the warp's units, one group loaded ahead of the one it multiplies.
template <int R, int C, int U>
__device__ __forceinline__ void gemv_vec(const Params& p, int warp0, int warps, int lane) {
    const int stride = p.k >> 3;
    // At least one group: k = 0 still finishes each unit (with zeros).
    const int groups = max(1, (stride + 32 * U - 1) / (32 * U));
    const uint4* x4 = reinterpret_cast<const uint4*>(p.x);
    int lu = warp0;  // the unit and group being loaded
    int lg = 0;
    Unit<C> lt(p, lu);
    uint4 cur[C][U];
    load_any<R, C, U>(lt, stride, 0, lane, cur);
    wait_prior_then_release_next();
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    while (true) {
        // cur holds group lg of unit lt; step to the next group to load.
        const Unit<C> ct = lt;
        const int cg = lg;
        if (++lg == groups) {
            lg = 0;
            lu += warps;
            if (lu < p.units) lt = Unit<C>(p, lu);
        }
        const bool more = lu < p.units;
        uint4 next[C][U];
        if (more) load_any<R, C, U>(lt, stride, lg, lane, next);
        fma_any<R, C, U>(cur, x4, stride, cg, lane, acc);
        if (cg == groups - 1) finish<R, C>(p, ct, lane, acc);
        if (!more) break;
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int j = 0; j < U; ++j) cur[c][j] = next[c][j];
    }
}

// Scalar path (any k, any alignment): one unit after another.
template <int R, int C>
__device__ __forceinline__ void gemv_scalar(const Params& p, int warp0, int warps, int lane) {
    wait_prior_then_release_next();
    const int k = p.k;
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    for (int u = warp0; u < p.units; u += warps) {
        const Unit<C> t(p, u);
        const bf16* wrow[C];
#pragma unroll
        for (int c = 0; c < C; ++c) wrow[c] = t.w + t.row(c) * k;
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
        finish<R, C>(p, t, lane, acc);
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
        gemv_vec<R, C, U>(p, warp0, warps, lane);
    } else {
        gemv_scalar<R, C>(p, warp0, warps, lane);
    }
}

}  // namespace headroom_gemv

// gemv_c{C}_r{R}: C outputs per unit, U chunks per row in a group, R rows:
// one output per unit at one row, two at 2 ..= MAX_ROWS rows.
#define GEMV_ENTRY(NAME, C, U, R)                                                          \
    extern "C" __global__ void __launch_bounds__(headroom_gemv::THREADS,                  \
                                                 headroom_gemv::CTAS_PER_SM)              \
        gemv_##NAME##_r##R(const headroom_gemv::Params p) {                                \
        headroom_gemv::gemv<R, C, U>(p);                                                   \
    }

GEMV_ENTRY(c1, 1, 8, 1)
GEMV_ENTRY(c2, 2, 4, 2)
GEMV_ENTRY(c2, 2, 4, 3)
GEMV_ENTRY(c2, 2, 4, 4)
GEMV_ENTRY(c2, 2, 4, 5)
GEMV_ENTRY(c2, 2, 4, 6)
GEMV_ENTRY(c2, 2, 4, 7)
GEMV_ENTRY(c2, 2, 4, 8)
