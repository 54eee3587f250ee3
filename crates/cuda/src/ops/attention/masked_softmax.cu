// Masked softmax of the composed attention route.
//
// Input: f32 scores S (unscaled Q.K^T) of one query block, [rows][ld] per
// head, rows = heads * block_rows laid out head after head. Output: P in the
// storage dtype, same layout. Lower-right causal mask with history: the
// block's row i (absolute query index q0 + i) sees keys 0 ..= history + q0 + i;
// masked entries are written as exact zeros. Softmax is f32 with the scale
// folded into log2(e). A NaN among the visible scores makes the whole row NaN.
// One CTA of SOFTMAX_THREADS threads per row.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom {

constexpr int SOFTMAX_THREADS = 256;

// exp2 on the special-function unit (ex2.approx: ~2 ulp; exp2(-inf) = 0, NaN stays NaN).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        // Propagate NaN (fmaxf would drop it).
        x = (x != x || y != y) ? __int_as_float(0x7fc00000) : fmaxf(x, y);
    }
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float x, float* scratch) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    x = IS_MAX ? warp_max(x) : warp_sum(x);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < SOFTMAX_THREADS / 32 ? scratch[lane] : (IS_MAX ? -INFINITY : 0.f);
    if (warp == 0) x = IS_MAX ? warp_max(x) : warp_sum(x);
    if (threadIdx.x == 0) scratch[0] = x;
    __syncthreads();
    return scratch[0];
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T>
__device__ __forceinline__ void masked_softmax(const float* __restrict__ s, T* __restrict__ p, int block_rows,
                                               int n_keys, int ld, int history, int q0, float scale_log2) {
    __shared__ float scratch[SOFTMAX_THREADS / 32];
    const int row = blockIdx.x;            // head * block_rows + i
    const int i = row % block_rows;
    const int visible = min(n_keys, history + q0 + i + 1);
    const float* srow = s + (size_t)row * ld;
    T* prow = p + (size_t)row * ld;

    float m = -INFINITY;
    for (int j = threadIdx.x; j < visible; j += SOFTMAX_THREADS) {
        const float x = srow[j] * scale_log2;
        m = (x != x || m != m) ? __int_as_float(0x7fc00000) : fmaxf(m, x);
    }
    m = block_reduce<true>(m, scratch);

    float l = 0.f;
    for (int j = threadIdx.x; j < visible; j += SOFTMAX_THREADS) l += fast_exp2(srow[j] * scale_log2 - m);
    l = block_reduce<false>(l, scratch);
    const float inv = 1.f / l;

    for (int j = threadIdx.x; j < n_keys; j += SOFTMAX_THREADS) {
        const float x = j < visible ? fast_exp2(srow[j] * scale_log2 - m) * inv : 0.f;
        prow[j] = from_f32<T>(x);
    }
}

}  // namespace headroom

// Launch: grid (heads * block_rows), block SOFTMAX_THREADS.
#define SOFTMAX_ENTRY(NAME, T)                                                            \
    extern "C" __global__ void __launch_bounds__(headroom::SOFTMAX_THREADS)                        \
    attn_masked_softmax_##NAME(const float* s, T* p, int block_rows, int n_keys, int ld,           \
                               int history, int q0, float scale_log2) {                            \
        headroom::masked_softmax<T>(s, p, block_rows, n_keys, ld, history, q0, scale_log2);         \
    }

SOFTMAX_ENTRY(bf16, __nv_bfloat16)
SOFTMAX_ENTRY(f16, __half)
