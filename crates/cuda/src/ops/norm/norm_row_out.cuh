// norm_row_out.cuh: the normed row norm_row.cuh's normed_quads made, stored
// — bf16 quads, and with CODES each 128-column group's e4m3 codes and f32
// scale as fp8_quant_bf16 makes them from the same bf16 values
// (e4m3_quant.cuh, included before this header). Used by ops_norm.cu's
// add_rms_norm_quad_f32res(_fp8) and by moe_route.cu's
// moe_combine_shared_norm(_fp8) (the MoE combine with the next norm folded
// in): one source, the same bits. cols % 128 == 0 with CODES, blockDim.x a
// whole number of warps: a warp's 32 quads at each k are one group, so the
// warp's max is the group's.

#ifndef HEADROOM_NORM_ROW_OUT_CUH
#define HEADROOM_NORM_ROW_OUT_CUH

namespace headroom_norm_row {

// Row `row` of out [rows][cols] (bf16), q [rows][cols] (e4m3) and s
// [rows][cols / 128] (f32) from this thread's quads o.
template <bool CODES>
__device__ __forceinline__ void store_normed_row(const uint2 (&o)[NORM_ROW_QUADS], long long row, int cols,
                                                 __nv_bfloat16* out, unsigned char* q, float* s) {
    using headroom_e4m3_quant::e4m3_scale;
    using headroom_e4m3_quant::e4m3x2;
    uint2* op = reinterpret_cast<uint2*>(out + row * cols);
    const int quads = cols >> 2;
#pragma unroll
    for (int k = 0; k < NORM_ROW_QUADS; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        // Warp-uniform where CODES: quads and blockDim.x are multiples of 32.
        if (p >= quads) continue;
        op[p] = o[k];
        if (!CODES) continue;
        const float e[4] = {__uint_as_float(o[k].x << 16), __uint_as_float(o[k].x & 0xffff0000u),
                            __uint_as_float(o[k].y << 16), __uint_as_float(o[k].y & 0xffff0000u)};
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(e[j]));
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        const float scale = e4m3_scale(amax);
        reinterpret_cast<unsigned*>(q + row * cols)[p] = e4m3x2(e[0], e[1], scale) | (e4m3x2(e[2], e[3], scale) << 16);
        if ((threadIdx.x & 31) == 0) s[row * (cols >> 7) + (p >> 5)] = scale;
    }
}

}  // namespace headroom_norm_row

#endif  // HEADROOM_NORM_ROW_OUT_CUH
