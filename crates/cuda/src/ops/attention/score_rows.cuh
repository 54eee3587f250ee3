// The score-tile steps that attention_fused.cu (mma.sync, sm_80+) and
// attention_tiles.cuh (wgmma, sm_90a) share, over a thread's N_TILES m16n8
// score tiles s[4 * nt + j] (j < 2: row g, else row g + 8; key
// n0 + 8 * nt + 2 * t4 + (j & 1)). sources.rs puts it before both; it must
// hold no wgmma text (attention_fused builds below Hopper).

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace attn_rows {

// Scales the scores (SCALED) and, in a masked tile, sets to -inf the keys
// past a row's position (pos0 / pos1) and at or past kv_len.
template <int N_TILES, bool SCALED>
__device__ __forceinline__ void scale_mask(float* s, float scale, bool masked, int n0, int t4, int pos0,
                                           int pos1, int kv_len) {
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int key = n0 + nt * 8 + t4 * 2 + (j & 1);
            const int pos = (j < 2) ? pos0 : pos1;
            float sc = SCALED ? s[nt * 4 + j] * scale : s[nt * 4 + j];
            if (masked && (key > pos || key >= kv_len)) sc = -INFINITY;
            s[nt * 4 + j] = sc;
        }
    }
}

// The two rows' new maxima: row_max and the tile's, reduced over the 4
// threads of a row.
template <int N_TILES>
__device__ __forceinline__ void new_row_max(const float* s, const float (&row_max)[2],
                                            float (&new_max)[2]) {
    new_max[0] = row_max[0];
    new_max[1] = row_max[1];
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
        new_max[0] = fmaxf(new_max[0], fmaxf(s[nt * 4 + 0], s[nt * 4 + 1]));
        new_max[1] = fmaxf(new_max[1], fmaxf(s[nt * 4 + 2], s[nt * 4 + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 1));
        new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 2));
    }
}

}  // namespace attn_rows
