// moe_gemm_common.cuh: the pieces the grouped GEMMs of the sparse MoE's
// routed experts share, on any sm_80+ GPU: the source row a sorted row reads
// (the gate+up gather through slot_token), the operand pointers (tile_sources
// for the 128 x 128 kernels, weight_halves for the FP8 ones), the
// 16-byte-chunk swizzle of the shared-memory tiles, SiLU(gate)·up, the bf16
// pair store of the epilogues, the mma.sync m16n8k16 wrappers and the bf16
// kernels' two entry points (macros). Compiled in front of moe_grouped_gemm.cu
// and its _wgmma, _fp8, _ws and _stream variants (after moe_tile_list.cuh,
// where a source takes both); each brings the names it uses into its namespace
// with using-declarations. No warpgroup-MMA text here: the sm_80 sources
// include it (the sm_90a pieces are in moe_wgmma_common.cuh). The helpers keep
// the kernels' generated code byte for byte (moe_wgmma_common.cuh says how).
#ifndef HEADROOM_MOE_GEMM_COMMON_CUH
#define HEADROOM_MOE_GEMM_COMMON_CUH

#include <cuda_bf16.h>

namespace headroom_moe_common {

// The A row that sorted row m reads: x row slot_token[m] (GATE_UP: no
// gathered copy of x) or act row m; row 0 when !valid (a row past the tile,
// whose copies read nothing).
template <bool GATE_UP>
__device__ __forceinline__ long long source_row(const int* __restrict__ slot_token, int m, bool valid) {
    long long src = 0;
    if (valid) src = GATE_UP ? (long long)slot_token[m] : (long long)m;
    return src;
}

// The load side of the 128 x 128 kernels (moe_grouped_gemm.cu and its _wgmma
// variant): the sources of a thread's LOADS 16-byte chunks (chunk ld_chunk of
// tile rows ld_row + j * ROW_STEP) of A (a_ok: the row is in the tile) and of
// B, expert e's weight rows: gate+up tile rows < BN / 2 are gate rows
// nt * BN / 2 + r, the others the up rows of the same columns; down: rows
// nt * BN + r.
template <int LOADS>
struct TileSources {
    const __nv_bfloat16* a_ptr[LOADS];
    const __nv_bfloat16* b_ptr[LOADS];
    bool a_ok[LOADS];
};
template <bool GATE_UP, int BN, int LOADS, int ROW_STEP>
__device__ __forceinline__ TileSources<LOADS> tile_sources(const __nv_bfloat16* __restrict__ a_src,
                                                           const int* __restrict__ slot_token,
                                                           const __nv_bfloat16* __restrict__ w, int e, int m0,
                                                           int rows, int nt, int K, int n_out, int ld_row,
                                                           int ld_chunk) {
    constexpr int GATE_UP_COLS = BN / 2;
    TileSources<LOADS> s;
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
        const int r = ld_row + j * ROW_STEP;
        s.a_ok[j] = r < rows;
        s.a_ptr[j] = a_src + source_row<GATE_UP>(slot_token, m0 + r, s.a_ok[j]) * K + ld_chunk * 8;
        long long wrow;
        if (GATE_UP) {
            wrow = (long long)e * 2 * n_out + (r < BN / 2 ? nt * GATE_UP_COLS + r : n_out + nt * GATE_UP_COLS + r - BN / 2);
        } else {
            wrow = (long long)e * n_out + nt * BN + r;
        }
        s.b_ptr[j] = w + wrow * K + ld_chunk * 8;
    }
    return s;
}

// The sources of a thread's first B chunk in each half of a tile of BN weight
// rows of expert e (tile row `row`, `off` elements into the row): gate+up,
// gate row nt * BN / 2 + row (lo) and the up row of the same column (hi);
// down, rows nt * BN + row and BN / 2 below (the FP8 kernels).
template <bool GATE_UP, int BN, typename T>
__device__ __forceinline__ void weight_halves(const T* __restrict__ w, int e, int nt, int row, int K, int n_out,
                                              int off, const T*& lo, const T*& hi) {
    if (GATE_UP) {
        lo = w + ((long long)e * 2 * n_out + nt * (BN / 2) + row) * K + off;
        hi = lo + (long long)n_out * K;  // the up rows of the same columns
    } else {
        lo = w + ((long long)e * n_out + nt * BN + row) * K + off;
        hi = lo + (long long)(BN / 2) * K;
    }
}

// Byte offset of 16-byte chunk c of row r in a tile of ROW_BYTES-byte rows:
// chunk XOR (row mod 8) puts 8 consecutive rows' chunks in 8 different bank
// groups (conflict-free ldmatrix and fragment writes); with 128-byte rows it
// is the SW128 layout of the wgmma descriptors.
template <int ROW_BYTES>
__device__ __forceinline__ int swizzle16(int r, int c) { return r * ROW_BYTES + ((c ^ (r & 7)) * 16); }

// The gate+up epilogue's act value: SiLU(gate)·up. Callers name a pair's two
// values in order (const float v0 = ..., v1 = ...;): as the arguments of one
// call their order is the compiler's, and the cubin changes.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// Two f32 values as a bf16 pair at p (4 bytes, global or shared).
__device__ __forceinline__ void store_bf16x2(void* p, float v0, float v1) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
}

// The ldmatrix operand loads of mma.sync m16n8k16 (kernels/mma_sync.cuh).
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

}  // namespace headroom_moe_common

// The two bf16 entry points of moe_grouped_gemm.cu and its _wgmma and
// _stream variants, one signature for all (the launcher's): gate+up reads x
// through slot_token and writes act [rows][inter] (BODY<true>), down reads
// act and writes y [rows][hidden] (BODY<false>). THREADS is the source's block
// size, MIN_CTAS its CTAs per SM.
#define HEADROOM_MOE_GATE_UP_ENTRY(NAME, BODY, MIN_CTAS)                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS)                                          \
    NAME(const bf16* __restrict__ x, const int* __restrict__ slot_token, const bf16* __restrict__ gate_up,   \
         bf16* __restrict__ act, const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets, \
         int experts, int hidden, int inter) {                                                                 \
        BODY<true>(x, slot_token, gate_up, act, expert_offsets, tile_offsets, experts, hidden, inter);          \
    }
#define HEADROOM_MOE_DOWN_ENTRY(NAME, BODY, MIN_CTAS)                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS)                                          \
    NAME(const bf16* __restrict__ act, const bf16* __restrict__ down, bf16* __restrict__ y,                  \
         const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets, int experts, int inter, \
         int hidden) {                                                                                         \
        BODY<false>(act, nullptr, down, y, expert_offsets, tile_offsets, experts, inter, hidden);               \
    }

#endif  // HEADROOM_MOE_GEMM_COMMON_CUH
