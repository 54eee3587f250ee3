// The skinny decode GEMV's machinery, shared by its two weight formats: the
// bf16 one (gemv.cu, crates/cuda/src/ops/gemv/mod.rs) and the block-scaled
// FP8 e4m3 one (fp8_gemv.cu, crates/cuda/src/ops/fp8/gemv.rs), each of which
// follows this header in its program and defines a format struct F (Bf16W,
// Fp8W) with what differs. Up to MAX_MATS matrices in one launch,
// y_m[r][n] = sum_k x[r][k] * W_m[n][k] for R = 1 ..= MAX_ROWS rows of x
// (bf16), f32 accumulate, bf16 or f32 out. Every weight byte is read once for
// all rows: at one row the launch is bound by the bytes of its matrices.
//
// Work comes in units: C consecutive outputs n of one matrix over the whole
// k range. The matrices' units follow each other (`Mat::first_unit`,
// increasing; `Params::units` in all). The grid is persistent (a few CTAs
// per SM, gemv/mod.rs sizes it): warp w of W takes units w, w + W, ... A
// unit's k range is cut into groups of 32 * U 16-byte weight chunks per row:
// lane l takes the chunks l, l + 32, ... of each of its C weight rows, U of
// them per group, with the chunk's scale beside it in a scaled format. The
// warp loads the next group (of this unit or of its next one) into registers
// before it multiplies the current one, so its loads stay in flight while it
// computes; the first group is loaded before the kernel waits for the
// previous one (the weights are constant, PDL), unless the units themselves
// depend on an earlier kernel (WAIT_FIRST). Rows of x are read through L1
// (`__ldg`); the weights skip L1. A lane sums its chunks in order (each
// chunk's products as the format says, F::fma_chunk), then the warp sums its
// lanes. `vec` = 0 (k not a multiple of a chunk's weights, or a pointer not
// 16-byte aligned) takes a scalar loop over k instead. Outputs past n are
// computed on row n - 1 and not written.
//
// A format F (a struct of static members) has:
//   Weight, Mat            a weight element; one matrix of a launch (w, y, n,
//                          first_unit, and what the format adds);
//   CHUNK_SHIFT, PER_CHUNK log2 and count of the weights in a 16-byte chunk;
//   SCALE_BLOCK            columns of a scale block along k (1, unused, in an
//                          unscaled format);
//   mat_scales(m), block_scales(s, row, kb), chunk_scale(sr, i, in)
//                          a matrix's scales, weight row `row`'s, chunk i's
//                          (nullptr, nullptr, 0 in an unscaled format);
//   unpack(v, wf), load_x(x4, row, i, xf), fma_chunk(wf, xf, scale, acc)
//                          a chunk's weights as f32; the x under chunk i of
//                          the x row at chunk `row`; acc += the chunk's products;
//   weight(w, sr, kk)      one weight at column kk as f32 (the scalar path);
//   x_rows(launch, unit)   whose rows of x the loops read: the launch's (taken
//                          once) or the unit's (taken with it);
//   out_f32(p)             the output-type flag, as an int (read where the
//                          unit finishes) or a reference (read at the store).
// The last two only keep each format's loads where its kernel had them, so
// that the generated code is the same as before the two shared this header.
//
// The program names the namespace (HEADROOM_GEMV_NS, defined just before
// this header in its sources.rs): the constants below are emitted into the
// cubin under it.

#ifndef HEADROOM_GEMV_BODY_CUH
#define HEADROOM_GEMV_BODY_CUH

#ifndef HEADROOM_GEMV_NS
#error "HEADROOM_GEMV_NS (the program's namespace) must be defined before gemv_body.cuh"
#endif

#include <cuda_bf16.h>

namespace HEADROOM_GEMV_NS {

typedef __nv_bfloat16 bf16;

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CTAS_PER_SM = 4;
constexpr int MAX_ROWS = 8;
constexpr int MAX_MATS = 6;

// The kernels' one parameter: the rows of x and up to MAX_MATS matrices.
template <class F>
struct Params {
    const bf16* x;  // [rows][k]
    int rows;
    int k;
    int out_f32;
    int count;      // matrices used, 1 ..= MAX_MATS
    int vec;        // 16-byte loads (k a multiple of a chunk, every pointer aligned)
    int units;      // units of all matrices
    typename F::Mat m[MAX_MATS];
};

// A weight chunk: read once, so not kept in L1; 256-byte L2 prefetch.
// `volatile` keeps a group's loads together ahead of the FMAs in PTX.
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One unit of a Params launch: C weight rows (the last one repeated past n),
// their scales, the rows of x they multiply and where the outputs go. `bad`
// (never here; an experts' unit's index out of range) makes the outputs NaN.
template <class F, int C>
struct Unit {
    const typename F::Weight* w;
    const float* s;
    void* y;
    const bf16* x;
    int n;
    long long n0;
    bool bad;

    // Unit `u` of the launch (u < p.units).
    __device__ __forceinline__ Unit(const Params<F>& p, int u) {
        x = p.x;
        bad = false;
        w = p.m[0].w;
        s = F::mat_scales(p.m[0]);
        y = p.m[0].y;
        n = p.m[0].n;
        int first = 0;
#pragma unroll
        for (int i = 1; i < MAX_MATS; ++i) {
            if (i < p.count && u >= p.m[i].first_unit) {
                w = p.m[i].w;
                s = F::mat_scales(p.m[i]);
                y = p.m[i].y;
                n = p.m[i].n;
                first = p.m[i].first_unit;
            }
        }
        n0 = (long long)(u - first) * C;
    }

    __device__ __forceinline__ long long row(int c) const { return n0 + c < n ? n0 + c : n - 1; }

    // The scales of row c (kb blocks along k).
    __device__ __forceinline__ const float* scales(int c, int kb) const {
        return F::block_scales(s, row(c), kb);
    }
};

// The chunks of group `g` (U per row at lane + 32 (g U + j)) and their
// scales; with GUARD (the row's last, partial group) zero past the row.
template <class F, int C, int U, bool GUARD, class T>
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
            sc[c][j] = F::chunk_scale(sr, i, in);
        }
    }
}

// acc[c][r] += the chunks of group g . x_r; with GUARD, chunks past the row
// add nothing (without, the group is whole: no branch, the x loads hoist).
template <class F, int R, int C, int U, bool GUARD>
__device__ __forceinline__ void fma_group(const uint4 (&wv)[C][U], const float (&sc)[C][U],
                                          const uint4* x4, int xstride, int stride, int g,
                                          int lane, float (&acc)[C][R]) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
        const int i = lane + 32 * (g * U + j);
        if (GUARD && i >= stride) continue;
        float wf[C][F::PER_CHUNK];
#pragma unroll
        for (int c = 0; c < C; ++c) F::unpack(wv[c][j], wf[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float xf[F::PER_CHUNK];
            F::load_x(x4, (size_t)r * xstride, i, xf);
#pragma unroll
            for (int c = 0; c < C; ++c) F::fma_chunk(wf[c], xf, sc[c][j], acc[c][r]);
        }
    }
}

// A group, whole or the row's partial last one (warp-uniform choice). The
// unguarded group hoists its R * U loads of x: only up to 3 rows, where that
// fits the registers (more rows always take the guarded code).
template <class F, int R, int C, int U, class T>
__device__ __forceinline__ void load_any(const T& t, int stride, int kb, int g, int lane,
                                         uint4 (&wv)[C][U], float (&sc)[C][U]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        load_group<F, C, U, false, T>(t, stride, kb, g, lane, wv, sc);
    } else {
        load_group<F, C, U, true, T>(t, stride, kb, g, lane, wv, sc);
    }
}

template <class F, int R, int C, int U>
__device__ __forceinline__ void fma_any(const uint4 (&wv)[C][U], const float (&sc)[C][U],
                                        const uint4* x4, int xstride, int stride, int g, int lane,
                                        float (&acc)[C][R]) {
    if (R <= 3 && (g + 1) * 32 * U <= stride) {
        fma_group<F, R, C, U, false>(wv, sc, x4, xstride, stride, g, lane, acc);
    } else {
        fma_group<F, R, C, U, true>(wv, sc, x4, xstride, stride, g, lane, acc);
    }
}

// Sums acc over the warp and writes the unit's outputs: lane c * R + r
// writes (r, n0 + c) (C * R <= 32), NaN for a bad unit; then zeroes acc.
template <int R, int C, class T>
__device__ __forceinline__ void finish(const int& out_f32, const T& t, int lane,
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
template <class F, int R, int C, int U, bool WAIT_FIRST, class T, class P>
__device__ __forceinline__ void gemv_vec(const P& p, int warp0, int warps, int lane) {
    const int stride = p.k >> F::CHUNK_SHIFT;  // 16-byte weight chunks per row
    const int xstride = p.k >> 3;              // 16-byte x chunks per row
    const int kb = (p.k + F::SCALE_BLOCK - 1) / F::SCALE_BLOCK;
    // At least one group: k = 0 still finishes each unit (with zeros).
    const int groups = max(1, (stride + 32 * U - 1) / (32 * U));
    const uint4* x4 = reinterpret_cast<const uint4*>(p.x);
    int lu = warp0;  // the unit and group being loaded
    int lg = 0;
    if (WAIT_FIRST) wait_prior_then_release_next();
    T lt(p, lu);
    uint4 cur[C][U];
    float csc[C][U];
    load_any<F, R, C, U, T>(lt, stride, kb, 0, lane, cur, csc);
    if (!WAIT_FIRST) wait_prior_then_release_next();
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    while (true) {
        // cur holds group lg of unit lt; step to the next group to load.
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
        if (more) load_any<F, R, C, U, T>(lt, stride, kb, lg, lane, next, nsc);
        fma_any<F, R, C, U>(cur, csc, F::x_rows(x4, ct.x), xstride, stride, cg, lane, acc);
        if (cg == groups - 1) finish<R, C, T>(F::out_f32(p), ct, lane, acc);
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

// Scalar path (any k, any alignment): one unit after another.
template <class F, int R, int C, class T, class P>
__device__ __forceinline__ void gemv_scalar(const P& p, int warp0, int warps, int lane) {
    wait_prior_then_release_next();
    const int k = p.k;
    const int kb = (k + F::SCALE_BLOCK - 1) / F::SCALE_BLOCK;
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
#pragma unroll 1
    for (int u = warp0; u < p.units; u += warps) {
        const T t(p, u);
        const typename F::Weight* wrow[C];
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
            for (int c = 0; c < C; ++c) wf[c] = F::weight(wrow[c][kk], srow[c], kk);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float xf = __bfloat162float(F::x_rows(p.x, t.x)[(size_t)r * k + kk]);
#pragma unroll
                for (int c = 0; c < C; ++c) acc[c][r] = fmaf(wf[c], xf, acc[c][r]);
            }
        }
        finish<R, C, T>(F::out_f32(p), t, lane, acc);
    }
}

// A kernel's body: the warp's units of type T out of P, on the 16-byte path
// when `p.vec`, else the scalar one; a warp without units only waits.
template <class F, int R, int C, int U, bool WAIT_FIRST, class T, class P>
__device__ __forceinline__ void run(const P& p) {
    const int lane = threadIdx.x & 31;
    const int warp0 = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int warps = gridDim.x * WARPS;
    if (warp0 >= p.units) {
        wait_prior_then_release_next();
        return;
    }
    if (p.vec) {
        gemv_vec<F, R, C, U, WAIT_FIRST, T, P>(p, warp0, warps, lane);
    } else {
        gemv_scalar<F, R, C, T, P>(p, warp0, warps, lane);
    }
}

// The Params GEMV of format F: C outputs a unit, U chunks per row in a group.
template <class F, int R, int C, int U>
__device__ __forceinline__ void gemv(const Params<F>& p) {
    run<F, R, C, U, false, Unit<F, C>, Params<F>>(p);
}

}  // namespace HEADROOM_GEMV_NS

#endif  // HEADROOM_GEMV_BODY_CUH
