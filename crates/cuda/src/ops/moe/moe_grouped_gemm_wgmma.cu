// Grouped GEMMs of the sparse MoE's routed experts on Hopper warpgroup MMA
// (wgmma, sm_90a only). Same contract, tile list, tiles (BM x BN x BK),
// threads, grid and epilogues as moe_grouped_gemm.cu (read its header): only
// the inner product differs. Each of the two warpgroups owns 64 of the BM rows
// and issues wgmma m64n128k16 with both operands read by the tensor cores
// straight from shared memory. A BK = 64 row of bf16 is 128 bytes and the
// cp.async chunks are XOR-swizzled by (row mod 8): the canonical 128-byte
// swizzle (SW128) K-major layout of the descriptors, on a 1024-byte aligned base.
//
// The down GEMM's epilogue is staged through shared memory
// (moe_gemm_down_wgmma_s_bf16: 16-byte row-contiguous stores of y).

#include <cuda_bf16.h>

namespace headroom_moe_wgmma {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 64;
constexpr int STAGES = 3;
constexpr int WARPGROUPS = 2;
constexpr int THREADS = WARPGROUPS * 128;  // 256
constexpr int WG_ROWS = BM / WARPGROUPS;   // 64: the wgmma M
constexpr int NI = BN / 8;                 // n8 blocks of the accumulator
constexpr int CHUNK = 8;
constexpr int ROW_CHUNKS = BK / CHUNK;     // 8: one 128-byte swizzle row
constexpr int A_BYTES = BM * BK * 2;
constexpr int STAGE_BYTES = (BM + BN) * BK * 2;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + alignment slack
constexpr int LOADS = BM * ROW_CHUNKS / THREADS;
constexpr int ROW_STEP = THREADS / ROW_CHUNKS;
constexpr int GATE_UP_COLS = BN / 2;
static_assert(BM == BN && ROW_CHUNKS == 8 && WG_ROWS == 64, "SW128 tiles of 64-element rows");
static_assert(2 * SMEM_BYTES <= 227 * 1024, "two CTAs share an SM");
static_assert(A_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "tiles stay 1024-byte aligned");

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
using headroom_async::cp_async_wait;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_wait;
using headroom_async::fence_operands;
// moe_tile_list.cuh, moe_gemm_common.cuh and moe_wgmma_common.cuh, compiled
// in front of this file.
using headroom_moe_tiles::Tile;
using headroom_moe_tiles::row_tile;
using headroom_moe_common::tile_sources;
using headroom_moe_common::swizzle16;
using headroom_moe_common::silu_mul;
using headroom_moe_common::store_bf16x2;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::stage_y;
using headroom_moe_wgmma_common::copy_y;

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}

// The gate+up epilogue of one tile: SiLU(gate)·up to bf16 act, from the
// fragments (moe_wgmma_common.cuh's layout). Not that header's store_act: its
// column addressing compiles to a different cubin here.
__device__ __forceinline__ void store_act(const float (&acc)[64], bf16* __restrict__ out, int m0, int rows, int nt,
                                          int n_out, int wg, int wq, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wg * WG_ROWS + wq * 16 + lane / 4 + h * 8;
        if (r >= rows) continue;
        bf16* orow = out + (long long)(m0 + r) * n_out;
#pragma unroll
        for (int j = 0; j < NI / 2; ++j) {
            const int col = nt * GATE_UP_COLS + j * 8 + (lane % 4) * 2;
            const float g0 = acc[4 * j + 2 * h], g1 = acc[4 * j + 2 * h + 1];
            const float u0 = acc[4 * (j + NI / 2) + 2 * h], u1 = acc[4 * (j + NI / 2) + 2 * h + 1];
            const float v0 = silu_mul(g0, u0), v1 = silu_mul(g1, u1);
            store_bf16x2(orow + col, v0, v1);
        }
    }
}

// The down epilogue through shared memory: the tile's bf16 values (BM x BN,
// 32 KiB: the first stage's space; 16-byte chunks XOR-swizzled by row, so the
// fragment writes are conflict-free), then 16-byte stores of whole 256-byte
// row segments of y (the fragment layout stores 4 bytes a thread).
__device__ __forceinline__ void store_tile_staged(const float (&acc)[64], bf16* __restrict__ out, int m0,
                                                  int rows, int nt, int n_out, int wg, int wq, int lane,
                                                  int tid, unsigned char* tile) {
    static_assert(BN * 2 == 256 && BM * 256 <= STAGE_BYTES, "the staged tile: one stage, 256-byte rows");
    __syncthreads();  // both warpgroups' last wgmmas have read the stages
    stage_y(acc, tile, wg * WG_ROWS + wq * 16, 0, lane);
    __syncthreads();
    copy_y<BM, THREADS>(tile, out, m0, rows, 0, nt * BN, 0, n_out, tid);
}

template <bool GATE_UP>
__device__ __forceinline__ void grouped_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                             const bf16* __restrict__ w, bf16* __restrict__ out,
                                             const int* __restrict__ expert_offsets,
                                             const int* __restrict__ tile_offsets, int experts, int K,
                                             int n_out) {
    extern __shared__ unsigned char smem_raw[];
    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int rt = blockIdx.x / n_tiles, nt = blockIdx.x % n_tiles;
    if (rt >= tile_offsets[experts]) return;
    const Tile tl = row_tile<BM>(rt, nt, expert_offsets, tile_offsets, experts);
    const int e = tl.e, m0 = tl.m0, rows = tl.rows;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wg = warp / 4, wq = warp % 4;
    const int ld_row = tid / ROW_CHUNKS, ld_chunk = tid % ROW_CHUNKS;

    const auto src = tile_sources<GATE_UP, BN, LOADS, ROW_STEP>(a_src, slot_token, w, e, m0, rows, nt, K, n_out, ld_row,
                                                                ld_chunk);
    const unsigned smem0 = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned dst0 = (unsigned)swizzle16<128>(ld_row, ld_chunk);

    auto load_stage = [&](int stage, int kt) {
        const unsigned base = smem0 + (unsigned)(stage * STAGE_BYTES) + dst0;
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            cp_async_16(base + j * ROW_STEP * 128, src.a_ptr[j] + kt * BK, src.a_ok[j]);
            cp_async_16(base + A_BYTES + j * ROW_STEP * 128, src.b_ptr[j] + kt * BK, true);
        }
    };

    float acc[64];
#pragma unroll
    for (int q = 0; q < 64; ++q) acc[q] = 0.f;

    const int k_tiles = K / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        fence_proxy_async();  // cp.async writes -> the tensor cores' (async proxy) reads
        __syncthreads();      // stage kt landed for all; stage kt-1's wgmmas are done
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_stage(next % STAGES, next);
        cp_async_commit();
        const unsigned sa = smem0 + (unsigned)((kt % STAGES) * STAGE_BYTES) + wg * WG_ROWS * 128;
        const unsigned sb = smem0 + (unsigned)((kt % STAGES) * STAGE_BYTES) + A_BYTES;
        fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            wgmma_m64n128k16(acc, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(sb + ks * 32, 16, SBO));
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(acc);
    }
    cp_async_wait<0>();
    if (GATE_UP) {
        store_act(acc, out, m0, rows, nt, n_out, wg, wq, lane);
    } else {
        unsigned char* tile = smem_raw + (smem0 - smem_u32(smem_raw));
        store_tile_staged(acc, out, m0, rows, nt, n_out, wg, wq, lane, tid, tile);
    }
}

HEADROOM_MOE_GATE_UP_ENTRY(moe_gemm_gate_up_wgmma_bf16, grouped_gemm, 2)
HEADROOM_MOE_DOWN_ENTRY(moe_gemm_down_wgmma_s_bf16, grouped_gemm, 2)

}  // namespace headroom_moe_wgmma
