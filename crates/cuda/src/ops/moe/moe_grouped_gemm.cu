// Grouped GEMMs of the sparse MoE's routed experts (crates/cuda/src/ops/moe).
//
// Rows are (token, k) pairs sorted by expert (moe_route.cu): expert e owns
// rows expert_offsets[e] .. expert_offsets[e+1]. The tile list is every
// (expert, row tile of BM rows) with at least one row, numbered by the
// device-side prefix tile_offsets (a CTA finds its expert by binary search);
// CTAs past the last tile exit at once, so the grid is an upper bound sized
// on the host without knowing the routing.
//
// moe_gemm_gate_up_bf16: act[r][c] = silu(x_r . gate_e[c]) * (x_r . up_e[c]).
//   A rows are gathered from x through slot_token (no gathered copy of x); a
//   tile of BN weight rows is BN/2 gate rows and the BN/2 up rows of the same
//   columns, so SiLU * mul happens in the epilogue on registers.
// moe_gemm_down_bf16: y[r][n] = act_r . down_e[n] (bf16 out, f32 accumulate).
//
// Both: mma.sync m16n8k16 bf16 -> f32, operands through ldmatrix from
// XOR-swizzled shared memory, STAGES-deep cp.async pipeline over K. Needs
// K % BK == 0 and the output width a multiple of the tile width (the launcher
// checks). Each output element depends only on its own A row: results do not
// depend on which rows share a tile.

#include <cuda_bf16.h>

namespace headroom_moe_gemm {

typedef __nv_bfloat16 bf16;

// Kernel traits (the launcher mirrors BM, BN, BK, THREADS, SMEM_BYTES).
constexpr int BM = 128;                    // A rows per tile
constexpr int BN = 128;                    // weight rows per tile
constexpr int BK = 64;                     // K per pipeline stage
constexpr int STAGES = 3;                  // cp.async stages
constexpr int WARPS_M = 4;
constexpr int WARPS_N = 2;
constexpr int THREADS = WARPS_M * WARPS_N * 32;  // 256
constexpr int WM = BM / WARPS_M;           // 32 rows per warp
constexpr int WN = BN / WARPS_N;           // 64 weight rows per warp
constexpr int MI = WM / 16;                // m16 blocks per warp
constexpr int NI = WN / 8;                 // n8 blocks per warp
constexpr int CHUNK = 8;                   // bf16 per 16-byte chunk
constexpr int ROW_CHUNKS = BK / CHUNK;     // 8
constexpr int A_ELEMS = BM * BK;
constexpr int STAGE_ELEMS = (BM + BN) * BK;
constexpr int SMEM_BYTES = STAGES * STAGE_ELEMS * 2;  // 98304: two CTAs per SM
static_assert(2 * SMEM_BYTES <= 227 * 1024, "two CTAs share an SM");
constexpr int LOADS = BM * ROW_CHUNKS / THREADS;      // 16-byte chunks per thread per operand
constexpr int ROW_STEP = THREADS / ROW_CHUNKS;        // rows between a thread's chunks
constexpr int GATE_UP_COLS = BN / 2;       // act columns per gate_up tile
static_assert(BM == BN, "A and B tiles share the load mapping");
static_assert(ROW_CHUNKS == 8, "the swizzle spans 8 chunks");
static_assert(WN % 16 == 0 && (NI / 2) % 2 == 0, "gate and up halves hold whole ldmatrix pairs");

// Element offset of 16-byte chunk c of row r: chunk XOR (row mod 8) puts the
// 8 rows an ldmatrix reads in 8 different bank groups.
__device__ __forceinline__ int swz(int r, int c) { return r * BK + ((c ^ (r & 7)) * CHUNK); }

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// moe_gemm_common.cuh, compiled in front of this file.
using headroom_moe_common::tile_sources;
using headroom_moe_common::silu_mul;
using headroom_moe_common::store_bf16x2;
using headroom_moe_common::ldmatrix_x4;

// First tile row of the warp's n8 block j. Gate_up: blocks 0..NI/2-1 are gate
// rows, NI/2.. the up rows of the same columns.
template <bool GATE_UP>
__device__ __forceinline__ int b_row(int warp_n, int j) {
    if (GATE_UP) {
        return j < NI / 2 ? warp_n * (WN / 2) + j * 8 : BN / 2 + warp_n * (WN / 2) + (j - NI / 2) * 8;
    }
    return warp_n * WN + j * 8;
}

// a_src: x [tokens][K] (GATE_UP, rows through slot_token) or act [rows][K].
// w: gate_up [E][2 n_out][K] (GATE_UP) or down [E][n_out][K].
// out: act [rows][n_out] (GATE_UP) or y [rows][n_out].
template <bool GATE_UP>
__device__ __forceinline__ void grouped_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                             const bf16* __restrict__ w, bf16* __restrict__ out,
                                             const int* __restrict__ expert_offsets,
                                             const int* __restrict__ tile_offsets, int experts, int K,
                                             int n_out) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int rt = blockIdx.x / n_tiles, nt = blockIdx.x % n_tiles;
    if (rt >= tile_offsets[experts]) return;
    // moe_tile_list.cuh's expert_of, written out with hi declared first: this
    // kernel's cubin changes through the call, or with lo declared first.
    int hi = experts, lo = 0;  // tile_offsets[lo] <= rt < tile_offsets[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tile_offsets[mid] <= rt) lo = mid; else hi = mid;
    }
    const int e = lo;
    const int m0 = expert_offsets[e] + (rt - tile_offsets[e]) * BM;
    const int rows = min(BM, expert_offsets[e + 1] - m0);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int ld_row = tid / ROW_CHUNKS, ld_chunk = tid % ROW_CHUNKS;

    const auto src = tile_sources<GATE_UP, BN, LOADS, ROW_STEP>(a_src, slot_token, w, e, m0, rows, nt, K, n_out, ld_row,
                                                                ld_chunk);
    const unsigned smem0 = smem_u32(smem_raw);
    const unsigned dst0 = (unsigned)swz(ld_row, ld_chunk) * 2;  // (ld_row + j*ROW_STEP) & 7 == ld_row & 7

    auto load_stage = [&](int stage, int kt) {
        const unsigned base = smem0 + (unsigned)(stage * STAGE_ELEMS) * 2 + dst0;
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            cp_async_16(base + j * ROW_STEP * BK * 2, src.a_ptr[j] + kt * BK, src.a_ok[j]);
            cp_async_16(base + A_ELEMS * 2 + j * ROW_STEP * BK * 2, src.b_ptr[j] + kt * BK, true);
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    const int k_tiles = K / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for all; stage kt-1 is free to overwrite
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_stage(next % STAGES, next);
        cp_async_commit();
        const unsigned sa = smem0 + (unsigned)((kt % STAGES) * STAGE_ELEMS) * 2;
        const unsigned sb = sa + A_ELEMS * 2;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            unsigned af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = warp_m * WM + i * 16 + (lane % 16);
                ldmatrix_x4(af[i], sa + (unsigned)swz(r, ks * 2 + lane / 16) * 2);
            }
            unsigned bfr[NI][2];
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int r = b_row<GATE_UP>(warp_n, j) + (lane % 8) + (lane / 16) * 8;
                unsigned t[4];
                ldmatrix_x4(t, sb + (unsigned)swz(r, ks * 2 + (lane / 8) % 2) * 2);
                bfr[j][0] = t[0];
                bfr[j][1] = t[1];
                bfr[j + 1][0] = t[2];
                bfr[j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_bf16_16816(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: fragment rows lane/4 and lane/4 + 8, columns (lane%4)*2 + {0,1}.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = warp_m * WM + i * 16 + lane / 4 + h * 8;
            if (r >= rows) continue;
            bf16* orow = out + (long long)(m0 + r) * n_out;
            if (GATE_UP) {
#pragma unroll
                for (int j = 0; j < NI / 2; ++j) {
                    const int col = nt * GATE_UP_COLS + warp_n * (WN / 2) + j * 8 + (lane % 4) * 2;
                    const float g0 = acc[i][j][2 * h], g1 = acc[i][j][2 * h + 1];
                    const float u0 = acc[i][j + NI / 2][2 * h], u1 = acc[i][j + NI / 2][2 * h + 1];
                    const float v0 = silu_mul(g0, u0), v1 = silu_mul(g1, u1);
                    store_bf16x2(orow + col, v0, v1);
                }
            } else {
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int col = nt * BN + warp_n * WN + j * 8 + (lane % 4) * 2;
                    store_bf16x2(orow + col, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
            }
        }
    }
}

HEADROOM_MOE_GATE_UP_ENTRY(moe_gemm_gate_up_bf16, grouped_gemm, 2)
HEADROOM_MOE_DOWN_ENTRY(moe_gemm_down_bf16, grouped_gemm, 2)

}  // namespace headroom_moe_gemm
