// e4m3 weights to f32 by integer ops (sm_80+), put before the decode kernels
// that multiply FP8 weights on the FMA pipe (fp8_gemv.cu, the MoE decode's
// moe_decode_fp8.cuh). No conversion instruction and no multiply: byte j of
// a 32-bit word is moved to the top byte, shifted right by 4 arithmetically
// (sign to bits 27 .. 31, exponent and mantissa to bits 26 .. 20) and masked
// to bit 31 and bits 26 .. 20. That is the f32 whose value is the e4m3 value
// times 2^-120, exactly: normal codes land on normal f32s (exponent e + 120),
// subnormal codes on f32 subnormals with the same mantissa bits. The NaN
// codes (0x7f, 0xff) read as +-480 * 2^-120.
//
// A caller sums its products with these scaled weights and multiplies the
// sum by E4M3_UNSCALE (exact: a power of two). Every partial sum whose true
// magnitude is 0 or at least 2^-6 is a normal f32 after the scaling, so its
// rounding is the unscaled one and the result the same bits as multiplying
// unscaled weights; smaller partial sums round on the f32 subnormal grid,
// an absolute 2^-30 of the true (code x activation) units per addition.
//   e4m3_scaled<J>(u)   byte J (0 = lowest) of u, times 2^-120;
//   E4M3_UNSCALE        2^120.
#ifndef HEADROOM_E4M3_CUH
#define HEADROOM_E4M3_CUH

namespace headroom_e4m3 {

constexpr float E4M3_UNSCALE = 0x1p120f;

template <int J>
__device__ __forceinline__ float e4m3_scaled(unsigned u) {
    static_assert(J >= 0 && J < 4, "a byte of a 32-bit word");
    const int top = static_cast<int>(u << (24 - 8 * J));  // byte J in bits 24 .. 31
    return __uint_as_float(static_cast<unsigned>(top >> 4) & 0x87f00000u);
}

}  // namespace headroom_e4m3

#endif  // HEADROOM_E4M3_CUH
