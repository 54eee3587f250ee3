// Activations to e4m3 per 128-column group, put before the kernels that
// write FP8 codes (fp8_quant.cu's quantization, and the norms that write
// their output's codes beside it, ops_norm.cu): one arithmetic, so every
// writer makes the same codes and scales from the same bf16 values.
//   e4m3_scale(amax)    the group's scale: amax / 448, rounded to nearest
//                       (1 for an all-zero group; a NaN does not count in
//                       amax, fmaxf drops it);
//   e4m3x2(a, b, s)     the codes of a / s and b / s (low byte first),
//                       rounded to nearest, saturated to +-448.
#ifndef HEADROOM_E4M3_QUANT_CUH
#define HEADROOM_E4M3_QUANT_CUH

#include <cuda_fp8.h>

namespace headroom_e4m3_quant {

// 448: the largest finite e4m3 (a literal, not a namespace constant: the
// compiler keeps no global for it).
__device__ __forceinline__ float e4m3_scale(float amax) {
    return amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f;
}

__device__ __forceinline__ unsigned e4m3x2(float a, float b, float scale) {
    return __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, scale), __fdiv_rn(b, scale)), __NV_SATFINITE,
                                    __NV_E4M3);
}

}  // namespace headroom_e4m3_quant

#endif  // HEADROOM_E4M3_QUANT_CUH
