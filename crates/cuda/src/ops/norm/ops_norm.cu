// RMSNorms of Qwen3.5 on bf16 activations with f32 math (transformers'
// Qwen3_5RMSNorm and Qwen3_5RMSNormGated):
//   add_rms_norm:   r = residual (+ delta, rounded to bf16 and stored back),
//                   out = r / sqrt(mean(r^2) + eps) * (1 + w)        one CTA per row
//   add_rms_norm_f32res: the same with the residual stream kept in f32 (the
//                   model's: r = residual + delta stored as f32, delta and out bf16)
//   rms_norm_groups: the same (1 + w) norm in place over groups of d  one warp per group
//   gated_rms_norm:  x = w * x / sqrt(mean(x^2) + eps) * silu(z)     one warp per group
// A NaN in a row (group) makes that row (group) NaN, and only it.
// add_rms_norm_quad_f32res (the decode step's norm) may be launched with
// programmatic dependent launch: it reads only its constant norm weight
// before it waits for the previous kernel, then lets the next kernel's CTAs
// be scheduled.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

constexpr int NORM_THREADS = 512;

// The warp and block sums are norm_row.cuh's (prepended to this program):
// one copy for every norm kernel and the MoE router's folded norm.
using headroom_norm_row::block_sum;
using headroom_norm_row::warp_sum;
static_assert(NORM_THREADS / 32 <= 16, "block_sum's partials hold 16 warps");

// r = residual[c] (+ delta[c], stored back): a bf16 residual is rounded to
// bf16 before it is stored and used, an f32 one is kept unrounded.
__device__ __forceinline__ float add_one(bf16* res, const bf16* del, int c) {
    float v = __bfloat162float(res[c]);
    if (del) {
        const bf16 r = __float2bfloat16(v + __bfloat162float(del[c]));
        res[c] = r;
        v = __bfloat162float(r);
    }
    return v;
}

__device__ __forceinline__ float add_one(float* res, const bf16* del, int c) {
    float v = res[c];
    if (del) {
        v += __bfloat162float(del[c]);
        res[c] = v;
    }
    return v;
}

__device__ __forceinline__ float as_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float as_float(float v) { return v; }

// The add_rms_norm body over a residual of RES (bf16 or f32) elements.
template <typename RES>
__device__ __forceinline__ void add_rms_norm(RES* residual, const bf16* delta, const float* w,
                                             bf16* out, int cols, float eps) {
    RES* res = residual + (i64)blockIdx.x * cols;
    const bf16* del = delta ? delta + (i64)blockIdx.x * cols : nullptr;
    bf16* o = out + (i64)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = add_one(res, del, c);
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss) / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        o[c] = __float2bfloat16(as_float(res[c]) * inv * (1.0f + w[c]));
}

// One CTA (NORM_THREADS) per row of `cols`. `delta` may be null.
extern "C" __global__ void add_rms_norm_bf16(bf16* residual, const bf16* delta, const float* w,
                                             bf16* out, int cols, float eps) {
    add_rms_norm<bf16>(residual, delta, w, out, cols, eps);
}

// add_rms_norm with the row held in registers: bf16x2 loads, each value read
// once (the kernel above reads the residual twice with scalar loads). For even `cols`
// up to 2 * CACHED_PAIRS * blockDim.x; one CTA per row; same rounding.
#define CACHED_PAIRS 8

// r = residual pair (+ delta pair, stored back): a bf16 residual is rounded
// to bf16 before it is stored and used, an f32 one is kept unrounded.
__device__ __forceinline__ float2 add_pair(__nv_bfloat162* res, const __nv_bfloat162* del, int p) {
    float2 r = __bfloat1622float2(res[p]);
    if (del) {
        const float2 d = __bfloat1622float2(del[p]);
        const __nv_bfloat162 rb = __floats2bfloat162_rn(r.x + d.x, r.y + d.y);
        res[p] = rb;
        r = __bfloat1622float2(rb);
    }
    return r;
}

__device__ __forceinline__ float2 add_pair(float2* res, const __nv_bfloat162* del, int p) {
    float2 r = res[p];
    if (del) {
        const float2 d = __bfloat1622float2(del[p]);
        r.x += d.x;
        r.y += d.y;
        res[p] = r;
    }
    return r;
}

// The cached add_rms_norm body over a residual of RES (bf16 or f32) elements.
template <typename RES, typename RES2>
__device__ __forceinline__ void add_rms_norm_cached(RES* residual, const bf16* delta, const float* w,
                                                    bf16* out, int cols, float eps) {
    const int pairs = cols >> 1;
    RES2* res = reinterpret_cast<RES2*>(residual + (i64)blockIdx.x * cols);
    const __nv_bfloat162* del =
        delta ? reinterpret_cast<const __nv_bfloat162*>(delta + (i64)blockIdx.x * cols) : nullptr;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + (i64)blockIdx.x * cols);
    const float2* w2 = reinterpret_cast<const float2*>(w);
    float2 v[CACHED_PAIRS];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < CACHED_PAIRS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        if (p < pairs) {
            const float2 r = add_pair(res, del, p);
            v[k] = r;
            ss += r.x * r.x + r.y * r.y;
        }
    }
    const float inv = rsqrtf(block_sum(ss) / (float)cols + eps);
#pragma unroll
    for (int k = 0; k < CACHED_PAIRS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        if (p < pairs) {
            const float2 ww = w2[p];
            o[p] = __floats2bfloat162_rn(v[k].x * inv * (1.0f + ww.x), v[k].y * inv * (1.0f + ww.y));
        }
    }
}

extern "C" __global__ void add_rms_norm_cached_bf16(bf16* residual, const bf16* delta,
                                                    const float* w, bf16* out, int cols,
                                                    float eps) {
    add_rms_norm_cached<bf16, __nv_bfloat162>(residual, delta, w, out, cols, eps);
}

// In place over `groups` groups of `d`; one warp per group, 8 warps per CTA.
extern "C" __global__ void rms_norm_groups_bf16(bf16* x, const float* w, i64 groups, int d,
                                                float eps) {
    const i64 grp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (grp >= groups) return;
    const int lane = threadIdx.x & 31;
    bf16* row = x + grp * d;
    float ss = 0.0f;
    for (int c = lane; c < d; c += 32) {
        const float v = __bfloat162float(row[c]);
        ss += v * v;
    }
    const float inv = rsqrtf(warp_sum(ss) / (float)d + eps);
    for (int c = lane; c < d; c += 32)
        row[c] = __float2bfloat16(__bfloat162float(row[c]) * inv * (1.0f + w[c]));
}

// In place x = w * x_hat * silu(z) over groups of `d`; one warp per group.
extern "C" __global__ void gated_rms_norm_bf16(bf16* x, const bf16* z, const float* w, i64 groups,
                                               int d, float eps) {
    const i64 grp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (grp >= groups) return;
    const int lane = threadIdx.x & 31;
    bf16* row = x + grp * d;
    const bf16* zr = z + grp * d;
    float ss = 0.0f;
    for (int c = lane; c < d; c += 32) {
        const float v = __bfloat162float(row[c]);
        ss += v * v;
    }
    const float inv = rsqrtf(warp_sum(ss) / (float)d + eps);
    for (int c = lane; c < d; c += 32) {
        const float zv = __bfloat162float(zr[c]);
        const float silu = zv / (1.0f + expf(-zv));
        row[c] = __float2bfloat16(w[c] * (__bfloat162float(row[c]) * inv) * silu);
    }
}

// add_rms_norm over an f32 residual stream: r = residual + delta (f32, stored
// back unrounded; `delta` bf16, may be null), out = bf16(r * inv * (1 + w)).
// One CTA (NORM_THREADS) per row, any `cols`.
extern "C" __global__ void add_rms_norm_f32res(float* residual, const bf16* delta, const float* w,
                                               bf16* out, int cols, float eps) {
    add_rms_norm<float>(residual, delta, w, out, cols, eps);
}

// add_rms_norm_f32res with the row in registers (float2 residual, bf16x2
// delta and out loads/stores, each value read once): even `cols` up to
// 2 * CACHED_PAIRS * blockDim.x; one CTA per row; same results.
extern "C" __global__ void add_rms_norm_cached_f32res(float* residual, const bf16* delta,
                                                      const float* w, bf16* out, int cols,
                                                      float eps) {
    add_rms_norm_cached<float, float2>(residual, delta, w, out, cols, eps);
}

// rms_norm_groups / gated_rms_norm with 4 values per lane access (8-byte
// bf16x4 loads and stores, every value read once and kept in registers): for
// d % 4 == 0 and d <= 128 * GROUP_CHUNKS (the scalar kernels above read x
// twice with 2-byte loads). Same math and rounding; one warp per group, 8 per CTA.
#define GROUP_CHUNKS 8

__device__ __forceinline__ void load4(const bf16* p, float* f) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
}

__device__ __forceinline__ void store4(bf16* p, const float* f) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]);
    const __nv_bfloat162 b = __floats2bfloat162_rn(f[2], f[3]);
    uint2 u;
    u.x = *reinterpret_cast<const unsigned*>(&a);
    u.y = *reinterpret_cast<const unsigned*>(&b);
    *reinterpret_cast<uint2*>(p) = u;
}

// o = the group norm of N values: w * x_hat * silu(z) (GATED) or x_hat * (1 + w).
template <int N, bool GATED>
__device__ __forceinline__ void group_normed(const float* v, const float* zv, const float* wv,
                                             float inv, float* o) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        if (GATED) {
            const float silu = zv[i] / (1.0f + expf(-zv[i]));
            o[i] = wv[i] * (v[i] * inv) * silu;
        } else {
            o[i] = v[i] * inv * (1.0f + wv[i]);
        }
    }
}

template <bool GATED>
__device__ __forceinline__ void group_norm4(bf16* x, const bf16* z, const float* w, i64 groups, int d,
                                            float eps) {
    const i64 grp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (grp >= groups) return;
    const int lane = threadIdx.x & 31;
    bf16* row = x + grp * d;
    const bf16* zr = GATED ? z + grp * d : nullptr;
    float v[GROUP_CHUNKS][4];
    float zv[GROUP_CHUNKS][4];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < GROUP_CHUNKS; ++k) {
        const int c = (lane + 32 * k) * 4;
        if (c < d) {
            load4(row + c, v[k]);
            if (GATED) load4(zr + c, zv[k]);
#pragma unroll
            for (int i = 0; i < 4; ++i) ss += v[k][i] * v[k][i];
        }
    }
    const float inv = rsqrtf(warp_sum(ss) / (float)d + eps);
#pragma unroll
    for (int k = 0; k < GROUP_CHUNKS; ++k) {
        const int c = (lane + 32 * k) * 4;
        if (c < d) {
            const float4 ww = *reinterpret_cast<const float4*>(w + c);
            const float wv[4] = {ww.x, ww.y, ww.z, ww.w};
            float o[4];
            group_normed<4, GATED>(v[k], zv[k], wv, inv, o);
            store4(row + c, o);
        }
    }
}

extern "C" __global__ void rms_norm_groups_v4_bf16(bf16* x, const float* w, i64 groups, int d,
                                                   float eps) {
    group_norm4<false>(x, nullptr, w, groups, d, eps);
}

extern "C" __global__ void gated_rms_norm_v4_bf16(bf16* x, const bf16* z, const float* w,
                                                  i64 groups, int d, float eps) {
    group_norm4<true>(x, z, w, groups, d, eps);
}

using headroom_e4m3_quant::e4m3_scale;
using headroom_e4m3_quant::e4m3x2;

// The e4m3 codes and scale of one 128-wide group from its half-warp's 8
// values a lane (lane l holds columns 8l .. 8l + 7), rounded to bf16 first as
// store8 stores them: e4m3_quant.cuh's arithmetic, as fp8_quant_bf16's
// quantization of the stored row.
__device__ __forceinline__ void group_codes16(const float* o, unsigned char* q, float* s, i64 grp,
                                              int l, bool ok) {
    float e[8];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        const float2 r = __bfloat1622float2(__floats2bfloat162_rn(o[i], o[i + 1]));
        e[i] = r.x;
        e[i + 1] = r.y;
        amax = fmaxf(amax, fmaxf(fabsf(r.x), fabsf(r.y)));
    }
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const float scale = e4m3_scale(amax);
    unsigned c[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) c[j] = e4m3x2(e[2 * j], e[2 * j + 1], scale);
    if (!ok) return;
    *reinterpret_cast<uint2*>(q + grp * 128 + 8 * l) = make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
    if (l == 0) s[grp] = scale;
}

// The group norms with 16 lanes per group and 8 values (16 bytes) per lane
// access, CH accesses per lane: d % 8 == 0 and d <= 128 * CH (CH = 1: the GDN
// gated norm's 128, CH = 2: the q/k norm's 256). Two groups per warp, few
// registers (the 4-wide kernels above keep 64 values per lane whatever d is).
// Same math.
// grid (ceil(groups * 16 / blockDim.x)). load8 / store8: bf16x8.cuh.
// With q (CH = 1, d = 128: a group is one 128-column block of the FP8
// GEMMs' activations), each group's codes into q [groups][128] and its
// scale into s [groups] as well.
template <int CH, bool GATED>
__device__ __forceinline__ void group_norm16(bf16* x, const bf16* z, const float* w, i64 groups,
                                             int d, float eps, unsigned char* q = nullptr,
                                             float* s = nullptr) {
    const i64 grp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 4;
    const int l = threadIdx.x & 15;
    const bool ok = grp < groups;  // no early return: the half-warp shuffles below
    bf16* row = x + (ok ? grp : 0) * d;
    const bf16* zr = GATED ? z + (ok ? grp : 0) * d : nullptr;
    float v[CH][8], zv[CH][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        const int c = (l + 16 * k) * 8;
        if (ok && c < d) {
            load8(row + c, v[k]);
            if (GATED) load8(zr + c, zv[k]);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss += v[k][i] * v[k][i];
        }
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / (float)d + eps);
    float out0[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // the codes' values (CH = 1)
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        const int c = (l + 16 * k) * 8;
        if (ok && c < d) {
            const float4 w0 = *reinterpret_cast<const float4*>(w + c);
            const float4 w1 = *reinterpret_cast<const float4*>(w + c + 4);
            const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            float o[8];
            group_normed<8, GATED>(v[k], zv[k], wv, inv, o);
            store8(row + c, o);
#pragma unroll
            for (int i = 0; i < 8; ++i) out0[i] = o[i];
        }
    }
    // Every lane reaches the codes' shuffles (one call site); a lane past
    // the groups takes part with zeros and writes nothing.
    if (CH == 1 && q) group_codes16(out0, q, s, grp, l, ok);
}

extern "C" __global__ void rms_norm_groups_g16x1_bf16(bf16* x, const float* w, i64 groups, int d,
                                                      float eps) {
    group_norm16<1, false>(x, nullptr, w, groups, d, eps);
}
extern "C" __global__ void rms_norm_groups_g16x2_bf16(bf16* x, const float* w, i64 groups, int d,
                                                      float eps) {
    group_norm16<2, false>(x, nullptr, w, groups, d, eps);
}
extern "C" __global__ void gated_rms_norm_g16x1_bf16(bf16* x, const bf16* z, const float* w,
                                                     i64 groups, int d, float eps) {
    group_norm16<1, true>(x, z, w, groups, d, eps);
}
// gated_rms_norm_g16x1_bf16 with groups of d = 128 that also writes each
// group's e4m3 codes q [groups][128] and f32 scale s [groups] (the GDN's
// value heads of 128: the out projection's FP8 activations).
extern "C" __global__ void gated_rms_norm_g16x1_fp8(bf16* x, const bf16* z, const float* w,
                                                    unsigned char* q, float* s, i64 groups, int d,
                                                    float eps) {
    group_norm16<1, true>(x, z, w, groups, d, eps, q, s);
}
extern "C" __global__ void gated_rms_norm_g16x2_bf16(bf16* x, const bf16* z, const float* w,
                                                     i64 groups, int d, float eps) {
    group_norm16<2, true>(x, z, w, groups, d, eps);
}

// add_rms_norm_cached_f32res with 4 columns per access (16-byte residual,
// 8-byte delta and out accesses; the kernel above moves 8 and 4 bytes): for
// cols % 4 == 0 up to 4 * NORM_ROW_QUADS * blockDim.x; one CTA per row; same
// sums (f32, stored unrounded) and the same normed values. The row's math is
// norm_row.cuh's, shared with the MoE decode router that folds this norm in.
// The norm weight is constant: it is loaded before the kernel waits for the
// previous one, so under programmatic launch its latency hides behind that
// kernel's tail.
// The body of add_rms_norm_quad_f32res and of its _fp8 form below: with
// CODES, also each 128-column group's e4m3 codes into q [rows][cols] and
// its f32 scale into s [rows][cols / 128] (norm_row_out.cuh's store, which
// the MoE combine with this norm folded in shares).
template <bool CODES>
__device__ __forceinline__ void add_rms_norm_quad(float* residual, const bf16* delta, const float* w,
                                                  bf16* out, unsigned char* q, float* s, int cols,
                                                  float eps) {
    using headroom_norm_row::NORM_ROW_QUADS;
    float4 ww[NORM_ROW_QUADS];
    headroom_norm_row::load_weights(w, cols, ww);
    wait_prior_then_release_next();
    const i64 row = blockIdx.x;
    float* res = residual + row * cols;
    float4 v[NORM_ROW_QUADS];
    const float inv =
        headroom_norm_row::add_row(res, delta ? delta + row * cols : nullptr, res, cols, eps, v);
    uint2 o[NORM_ROW_QUADS];
    headroom_norm_row::normed_quads(v, ww, inv, cols, o);
    headroom_norm_row::store_normed_row<CODES>(o, row, cols, out, q, s);
}

extern "C" __global__ void add_rms_norm_quad_f32res(float* residual, const bf16* delta,
                                                    const float* w, bf16* out, int cols,
                                                    float eps) {
    add_rms_norm_quad<false>(residual, delta, w, out, nullptr, nullptr, cols, eps);
}

// add_rms_norm_quad_f32res that also writes the normed row's e4m3 codes
// q [rows][cols] and f32 scales s [rows][cols / 128] (row-major) for the FP8
// GEMMs that read it: each 128-column group of the bf16 row quantized as
// fp8_quant_bf16 does (e4m3_quant.cuh) — the same codes and scales from the
// same bf16 values. cols % 128 == 0: a warp's 32 quads at each k are one group (the
// block is a whole number of warps), so the warp's max is the group's.
extern "C" __global__ void add_rms_norm_quad_f32res_fp8(float* residual, const bf16* delta,
                                                        const float* w, bf16* out,
                                                        unsigned char* q, float* s, int cols,
                                                        float eps) {
    add_rms_norm_quad<true>(residual, delta, w, out, q, s, cols, eps);
}
