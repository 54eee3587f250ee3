// moe_wgmma_common.cuh: what the sparse MoE's warpgroup-MMA grouped GEMMs
// share (sm_90a only): the SW128 shared-memory matrix descriptor, the e4m3
// wgmma m64n128k32 of the FP8 kernels and their promotion of a k-block's
// partial sums (promote), and the epilogues that read a wgmma
// m64nN accumulator's fragments: SiLU(gate)·up to act (store_act:
// moe_grouped_gemm_fp8.cu, moe_grouped_gemm_ws.cu and its _fp8 form), and y
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

// d = A·B + (accumulate ? d : 0), e4m3 x e4m3 -> f32, both K-major (the FP8
// grouped GEMMs: moe_grouped_gemm_fp8.cu, moe_grouped_gemm_ws_fp8.cu).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], unsigned long long da,
                                                      unsigned long long db, int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
}

// The FP8 kernels' promotion of one k-block's partial sums: acc += part *
// A's scale of the fragment's row (s0; s1 for the row 8 below) * B's scale
// of the block's rows (b_l for n8 blocks 0..7; b_h for 8..15, the up rows of
// gate+up).
__device__ __forceinline__ void promote(float (&acc)[64], const float (&part)[64], float s0, float s1, float b_l,
                                        float b_h) {
    const float c0l = s0 * b_l, c1l = s1 * b_l, c0h = s0 * b_h, c1h = s1 * b_h;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const bool up = j >= 8;
        const float c0 = up ? c0h : c0l, c1 = up ? c1h : c1l;
        acc[4 * j] = fmaf(part[4 * j], c0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], c0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], c1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], c1, acc[4 * j + 3]);
    }
}

// The gate+up epilogue of a warp's 16-row slice (first row r0 of the tile)
// from NB n8 blocks of gate and the NB blocks of up of the same columns (the
// two halves of one accumulator, or two accumulators): act = SiLU(gate)·up in
// bf16, tile row r to out row m0 + r from column col0, rows from `rows` on
// not stored.
template <int NB>
__device__ __forceinline__ void store_act_blocks(const float* gate, const float* up, __nv_bfloat16* __restrict__ out,
                                                 int m0, int rows, int r0, int col0, int n_out, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = r0 + lane / 4 + h * 8;
        if (r >= rows) continue;
        __nv_bfloat16* orow = out + (long long)(m0 + r) * n_out + col0 + (lane % 4) * 2;
#pragma unroll
        for (int j = 0; j < NB; ++j) {
            const float v0 = silu_mul(gate[4 * j + 2 * h], up[4 * j + 2 * h]);
            const float v1 = silu_mul(gate[4 * j + 2 * h + 1], up[4 * j + 2 * h + 1]);
            store_bf16x2(orow + j * 8, v0, v1);
        }
    }
}

// store_act_blocks of one accumulator: blocks 0..NI/2-1 gate, NI/2.. the up
// rows of the same columns.
template <int ACC>
__device__ __forceinline__ void store_act(const float (&acc)[ACC], __nv_bfloat16* __restrict__ out, int m0,
                                          int rows, int r0, int col0, int n_out, int lane) {
    constexpr int NI = ACC / 4;
    store_act_blocks<NI / 2>(acc, acc + 4 * (NI / 2), out, m0, rows, r0, col0, n_out, lane);
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
