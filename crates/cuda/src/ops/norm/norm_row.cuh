// norm_row.cuh: one row of Qwen3.5's residual add + zero-centred RMSNorm over
// an f32 residual stream, 4 columns a thread access (16-byte residual, 8-byte
// delta and output): r = residual + delta (f32, unrounded), out = bf16(r *
// inv * (1 + w)) with inv = rsqrt(mean(r^2) + eps). Used by ops_norm.cu's
// add_rms_norm_quad_f32res and by moe_decode.cu's moe_decode_route_norm (the
// MoE block's router with the post-attention norm folded in): one source for
// both, so both give the same bits. A CTA of blockDim.x <= 512 threads takes
// a row of cols % 4 == 0, cols <= 4 * NORM_ROW_QUADS * blockDim.x; every
// thread of the CTA calls each function (block-wide sums).

#ifndef HEADROOM_NORM_ROW_CUH
#define HEADROOM_NORM_ROW_CUH

#include <cuda_bf16.h>

namespace headroom_norm_row {

constexpr int NORM_ROW_QUADS = 4;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// The block's sum of x, returned to every thread: each warp's lanes, then
// the warps' sums in one warp.
__device__ __forceinline__ float block_sum(float x) {
    __shared__ float partial[16];
    __shared__ float total;
    x = warp_sum(x);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x < 32) {
        float y = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
        y = warp_sum(y);
        if (threadIdx.x == 0) total = y;
    }
    __syncthreads();
    return total;
}

// This thread's quads of the norm weight (constant: callers load it before
// they wait for the previous kernel).
__device__ __forceinline__ void load_weights(const float* w, int cols, float4 (&ww)[NORM_ROW_QUADS]) {
    const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll
    for (int k = 0; k < NORM_ROW_QUADS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        ww[k] = p < (cols >> 2) ? __ldg(w4 + p) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// This thread's quads of one residual row (zeros past cols): a caller may
// issue these loads early and add later (add_loaded).
__device__ __forceinline__ void load_row(const float* residual, int cols, float4 (&r)[NORM_ROW_QUADS]) {
    const float4* res = reinterpret_cast<const float4*>(residual);
#pragma unroll
    for (int k = 0; k < NORM_ROW_QUADS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        r[k] = p < (cols >> 2) ? res[p] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// r (this thread's quads of the residual row, load_row's) + delta (may be
// null) into v, written to res_out (may be null; may be the residual itself
// when no other CTA reads the row); returns the row's inv.
__device__ __forceinline__ float add_loaded(const float4 (&r)[NORM_ROW_QUADS], const __nv_bfloat16* delta,
                                            float* res_out, int cols, float eps, float4 (&v)[NORM_ROW_QUADS]) {
    const int quads = cols >> 2;
    const uint2* del = delta ? reinterpret_cast<const uint2*>(delta) : nullptr;
    float4* out = reinterpret_cast<float4*>(res_out);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_ROW_QUADS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        if (p < quads) {
            float4 a = r[k];
            if (del) {
                const uint2 u = del[p];
                const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
                const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
                a.x += b.x;
                a.y += b.y;
                a.z += c.x;
                a.w += c.y;
                if (out) out[p] = a;
            }
            v[k] = a;
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
    }
    return rsqrtf(block_sum(ss) / (float)cols + eps);
}

// r = residual (+ delta: may be null) of one row into v (this thread's
// quads), written to res_out (may be null; may be the residual itself when
// no other CTA reads the row); returns the row's inv.
__device__ __forceinline__ float add_row(const float* residual, const __nv_bfloat16* delta, float* res_out,
                                         int cols, float eps, float4 (&v)[NORM_ROW_QUADS]) {
    float4 r[NORM_ROW_QUADS];
    load_row(residual, cols, r);
    return add_loaded(r, delta, res_out, cols, eps, v);
}

// This thread's quads of the normed row, as 4 bf16 each: quad k in o[k].
__device__ __forceinline__ void normed_quads(const float4 (&v)[NORM_ROW_QUADS], const float4 (&ww)[NORM_ROW_QUADS],
                                             float inv, int cols, uint2 (&o)[NORM_ROW_QUADS]) {
#pragma unroll
    for (int k = 0; k < NORM_ROW_QUADS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        if (p < (cols >> 2)) {
            const __nv_bfloat162 a = __floats2bfloat162_rn(v[k].x * inv * (1.0f + ww[k].x),
                                                           v[k].y * inv * (1.0f + ww[k].y));
            const __nv_bfloat162 b = __floats2bfloat162_rn(v[k].z * inv * (1.0f + ww[k].z),
                                                           v[k].w * inv * (1.0f + ww[k].w));
            o[k].x = *reinterpret_cast<const unsigned*>(&a);
            o[k].y = *reinterpret_cast<const unsigned*>(&b);
        }
    }
}

}  // namespace headroom_norm_row

#endif  // HEADROOM_NORM_ROW_CUH
