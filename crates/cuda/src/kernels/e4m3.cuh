// e4m3 weights to f32, put before the decode kernels that multiply FP8
// weights on the FMA pipe (fp8_gemv.cu, the MoE decode's moe_decode_fp8.cuh).
//
// sm_89+ (Ada, Hopper): the conversion instruction, two weights at a time
// (cvt.rn.f16x2.e4m3x2, exact: every e4m3 value is an f16), then each half
// to f32 (exact). E4M3_UNSCALE is 1: the values are the weights themselves.
// The NaN codes (0x7f, 0xff) read as NaN.
//
// Below sm_89, by integer ops: byte j of a 32-bit word is moved to the top
// byte, shifted right by 4 arithmetically (sign to bits 27 .. 31, exponent
// and mantissa to bits 26 .. 20) and masked to bit 31 and bits 26 .. 20.
// That is the f32 whose value is the e4m3 value times 2^-120, exactly:
// normal codes land on normal f32s (exponent e + 120), subnormal codes on
// f32 subnormals with the same mantissa bits. The NaN codes read as
// +-480 * 2^-120. A caller sums its products with these scaled weights and
// multiplies the sum by E4M3_UNSCALE (2^120, exact): every partial sum whose
// true magnitude is 0 or at least 2^-6 is a normal f32 after the scaling,
// so its rounding is the unscaled one; smaller partial sums round on the
// f32 subnormal grid, an absolute 2^-30 of the true (code x activation)
// units per addition.
//   e4m3_scaled<J>(u)   byte J (0 = lowest) of u, times 1 / E4M3_UNSCALE;
//   E4M3_UNSCALE        1 (sm_89+) or 2^120;
//   e4m3x2_f16x2(pair)  (sm_89+, HEADROOM_E4M3_CVT defined) two e4m3 as f16.
// A caller converting all four bytes of a word gets two conversions on
// sm_89+ (the two pairs' instructions are the same expression, merged).
#ifndef HEADROOM_E4M3_CUH
#define HEADROOM_E4M3_CUH

namespace headroom_e4m3 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890

// The conversion instruction is there (the tensor-core FP8 kernels, which
// take e4m3x2_f16x2 as mma operands, are compiled only where it is defined).
#define HEADROOM_E4M3_CVT 1

constexpr float E4M3_UNSCALE = 1.0f;

// Two e4m3 (the low byte first) as an f16 pair, exactly.
__device__ __forceinline__ unsigned e4m3x2_f16x2(unsigned short pair) {
    unsigned h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
    return h2;
}

// Bytes 2H and 2H + 1 of u as f32 (low byte first).
template <int H>
__device__ __forceinline__ float2 e4m3x2_f32(unsigned u) {
    const unsigned h2 = e4m3x2_f16x2(static_cast<unsigned short>(u >> (16 * H)));
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(h2));
    return make_float2(lo, hi);
}

template <int J>
__device__ __forceinline__ float e4m3_scaled(unsigned u) {
    static_assert(J >= 0 && J < 4, "a byte of a 32-bit word");
    const float2 f = e4m3x2_f32<J / 2>(u);
    return J % 2 ? f.y : f.x;
}

#else

constexpr float E4M3_UNSCALE = 0x1p120f;

template <int J>
__device__ __forceinline__ float e4m3_scaled(unsigned u) {
    static_assert(J >= 0 && J < 4, "a byte of a 32-bit word");
    const int top = static_cast<int>(u << (24 - 8 * J));  // byte J in bits 24 .. 31
    return __uint_as_float(static_cast<unsigned>(top >> 4) & 0x87f00000u);
}

#endif

}  // namespace headroom_e4m3

#endif  // HEADROOM_E4M3_CUH
