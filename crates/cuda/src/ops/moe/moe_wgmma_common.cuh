// moe_wgmma_common.cuh: what the sparse MoE's warpgroup-MMA grouped GEMMs
// share (sm_90a only): the SW128 shared-memory matrix descriptor and the
// epilogues that read a wgmma m64nN accumulator's fragments: SiLU(gate)·up to
// act (store_act: moe_grouped_gemm_fp8.cu, moe_grouped_gemm_ws.cu), and y
// staged in shared memory as bf16 rows of 256 bytes, then stored 16 bytes a
// thread (stage_y, copy_y: moe_grouped_gemm_wgmma.cu, moe_grouped_gemm_ws.cu).
// Compiled in front of those three sources, after moe_gemm_common.cuh (whose
// names it uses); each brings the names into its namespace with
// using-declarations.
//
// Fragment layout of a warp's 16-row slice of the accumulator, n8 block j:
// acc[4j..4j+1] at row r0 + lane/4, acc[4j+2..4j+3] 8 rows below, columns
// j*8 + (lane%4)*2 + {0,1}.
//
// These helpers keep the kernels' generated code byte for byte, so their
// expressions keep the kernels' forms: a pointer sum p + a + b is not written
// p + (a + b) (it compiles differently), and no constant lives at namespace
// scope (each would become a symbol of every including cubin).
#ifndef HEADROOM_MOE_WGMMA_COMMON_CUH
#define HEADROOM_MOE_WGMMA_COMMON_CUH

namespace headroom_moe_wgmma_common {

using headroom_moe_common::silu_mul;
using headroom_moe_common::store_bf16x2;
using headroom_moe_common::swizzle16;

using headroom_async::desc_sw128;  // kernels/wgmma_sync.cuh

// The gate+up epilogue of a warp's 16-row slice (first row r0 of the tile):
// blocks 0..NI/2-1 gate, NI/2.. the up rows of the same columns; act =
// SiLU(gate)·up in bf16, tile row r to out row m0 + r from column col0, rows
// from `rows` on not stored.
template <int ACC>
__device__ __forceinline__ void store_act(const float (&acc)[ACC], __nv_bfloat16* __restrict__ out, int m0,
                                          int rows, int r0, int col0, int n_out, int lane) {
    constexpr int NI = ACC / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + lane / 4 + h * 8;
        if (r >= rows) continue;
        __nv_bfloat16* orow = out + (long long)(m0 + r) * n_out + col0 + (lane % 4) * 2;
#pragma unroll
        for (int j = 0; j < NI / 2; ++j) {
            const float g0 = acc[4 * j + 2 * h], g1 = acc[4 * j + 2 * h + 1];
            const float u0 = acc[4 * (j + NI / 2) + 2 * h], u1 = acc[4 * (j + NI / 2) + 2 * h + 1];
            const float v0 = silu_mul(g0, u0), v1 = silu_mul(g1, u1);
            store_bf16x2(orow + j * 8, v0, v1);
        }
    }
}

// Staged y: 128 columns (blocks j0 .. j0+15) of a warp's slice, first row r0
// of `buf`, as bf16 in 256-byte rows, 16-byte chunks XOR-swizzled by row (the
// fragment writes are conflict-free).
template <int ACC>
__device__ __forceinline__ void stage_y(const float (&acc)[ACC], unsigned char* buf, int r0, int j0, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + lane / 4 + h * 8;
#pragma unroll
        for (int jj = 0; jj < 16; ++jj) {
            const int j = j0 + jj;
            const int off = swizzle16<256>(r, jj) + (lane % 4) * 4;
            store_bf16x2(buf + off, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

// The staged rows to y with 16-byte stores of whole 256-byte row pieces, by
// THREADS threads (index t): staged row r of ROWS is tile row r0 + r, out row
// m0 + r0 + r, columns from col0 + col1 (y's column tile, then the piece);
// tile rows from `rows` on skipped.
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_y(const unsigned char* buf, __nv_bfloat16* __restrict__ out, int m0, int rows,
                                       int r0, int col0, int col1, int n_out, int t) {
#pragma unroll
    for (int it = 0; it < ROWS * 16 / THREADS; ++it) {
        const int idx = t + it * THREADS;
        const int r = idx / 16, c = idx % 16;  // 16 chunks a row
        const int row = r0 + r;
        if (row >= rows) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(buf + r * 256 + ((c ^ (r & 7)) * 16));
        *reinterpret_cast<uint4*>(out + (long long)(m0 + row) * n_out + col0 + col1 + c * 8) = v;
    }
}

}  // namespace headroom_moe_wgmma_common

#endif  // HEADROOM_MOE_WGMMA_COMMON_CUH
