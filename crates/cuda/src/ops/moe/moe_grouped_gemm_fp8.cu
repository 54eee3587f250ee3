// Block-scaled FP8 grouped GEMMs of the sparse MoE's routed experts on Hopper
// warpgroup MMA (sm_90a only): the same tile list, gather, epilogues and
// outputs as moe_grouped_gemm_wgmma.cu (bf16 act and y), with e4m3 operands.
//
// Operands. A: e4m3 activations [rows][K] with one f32 scale per (row,
// 128-column group), scales [rows][K / 128] (fp8_quant_bf16's row-major
// table): x quantized per token for gate+up (rows gathered through
// slot_token, codes and scales alike), act quantized per sorted row for down.
// B: the experts' e4m3 weights [E][n][K] with f32 scale_inv
// [E][ceil(n / 128)][K / 128] (the real weight is w * scale_inv of its 128 x
// 128 block); gate+up: n = 2 * inter (gate rows, then up rows), down: n =
// hidden.
//
// Tiles. The routing's row tiles are BM = 128 sorted rows of one expert; a CTA
// (one warpgroup, 128 threads) takes one half (HM = 64 rows, the wgmma M) of
// one row tile and BN = 128 weight rows (gate+up: 64 gate rows and the 64 up
// rows of the same act columns; down: 128 y columns). A down CTA takes
// DOWN_TILES such column tiles (the last of a row the rest) in one pipeline:
// the next tile's first k-blocks load while a tile's y is stored, since K =
// intermediate is only a few k-blocks (4 on the 35B-A3B). Grid: row tile x
// half x column tile (of DOWN_TILES for down), the CTAs of a half that holds
// no row return at once.
//
// K loop. BK = 128 = one scale block; a row of a stage is 128 bytes, one
// 128-byte swizzle row (16-byte chunks XOR-swizzled by row mod 8), exactly
// the bytes of the bf16 kernels' BK = 64 rows, so the SW128 K-major
// descriptors are the same; a k32 wgmma step is 32 bytes along the row. Each
// k-block's 4 wgmma m64n128k32 e4m3 x e4m3 accumulate into `part` (from zero:
// the first one's scale-d predicate is off), then "promotion" adds
// part * scale_a[row][kb] * scale_b[nb][kb] into the f32 accumulator (as
// DeepSeek-V3's FP8 training and DeepGEMM do: the tensor cores' FP8
// accumulation keeps ~14 bits, the promotion every 128 K bounds the loss).
// 3 cp.async stages loaded 2 k-blocks ahead; 3 CTAs per SM, so one CTA's
// promotion and barrier overlap the others' wgmmas.
//
// Needs K % 128 == 0, gate+up: inter % 64 == 0 (a 64-row half of gate or up
// lies in one scale block), down: hidden % 128 == 0 (the launcher checks).

#include <cuda_bf16.h>

namespace headroom_moe_fp8 {

typedef __nv_bfloat16 bf16;
typedef unsigned char u8;

constexpr int BLOCK = 128;       // scale block, rows and columns
constexpr int BM = 128;          // rows of a routing row tile
constexpr int HM = 64;           // rows per CTA: the wgmma M
constexpr int BN = 128;          // weight rows per CTA
constexpr int BK = 128;          // K per stage: one scale block, 128 bytes a row
constexpr int STAGES = 3;
constexpr int THREADS = 128;     // one warpgroup
constexpr int CTAS_PER_SM = 3;
constexpr int NI = BN / 8;       // 16 n8 blocks of the accumulator
constexpr int ACC = NI * 4;      // 64 f32 a thread
constexpr int CHUNKS = BK / 16;  // 8 chunks of 16 bytes a row
constexpr int A_BYTES = HM * BK;             // 8 KiB
constexpr int STAGE_BYTES = A_BYTES + BN * BK;  // 24 KiB
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + alignment slack
constexpr int ROW_STEP = THREADS / CHUNKS;   // 16 rows between a thread's chunks
constexpr int A_LOADS = HM / ROW_STEP;       // 4
constexpr int B_HALF = BN / 2 / ROW_STEP;    // 4 loads per half of B
constexpr int GATE_UP_COLS = BN / 2;         // 64 act columns per gate+up CTA
constexpr int DOWN_TILES = 2;                // column tiles of BN y columns per down CTA
static_assert(BK == BLOCK && CHUNKS == 8, "a stage row is one 128-byte swizzle row and one scale block");
static_assert(CTAS_PER_SM * (SMEM_BYTES + 1024) <= 228 * 1024, "three CTAs share an SM");
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
using headroom_moe_tiles::expert_of;
using headroom_moe_common::source_row;
using headroom_moe_common::weight_halves;
using headroom_moe_common::swizzle16;
using headroom_moe_common::store_bf16x2;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::wgmma_m64n128k32_e4m3;
using headroom_moe_wgmma_common::promote;
using headroom_moe_wgmma_common::store_act;


// One CTA: rows m0 .. m0 + rows of expert e (sorted order), column tile nt.
// a_q / a_s: A codes [..][K] and scales [..][K / 128], row src of sorted row
// m0 + r being slot_token[m0 + r] (GATE_UP) or m0 + r. w / w_s: the experts'
// B codes and scale_inv. out: act [rows][n_out] (GATE_UP: SiLU(gate)·up) or y
// [rows][n_out], bf16.
template <bool GATE_UP>
__device__ __forceinline__ void fp8_grouped_gemm(const u8* __restrict__ a_q, const float* __restrict__ a_s,
                                                 const int* __restrict__ slot_token, const u8* __restrict__ w,
                                                 const float* __restrict__ w_s, bf16* __restrict__ out,
                                                 const int* __restrict__ expert_offsets,
                                                 const int* __restrict__ tile_offsets, int experts, int K,
                                                 int n_out) {
    extern __shared__ unsigned char smem_raw[];
    // Column tiles of the grid: GATE_UP_COLS act columns, or up to
    // DOWN_TILES tiles of BN y columns (the last CTA of a row takes the rest).
    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : (n_out / BN + DOWN_TILES - 1) / DOWN_TILES;
    const int rt = blockIdx.x / (2 * n_tiles);
    const int half = (blockIdx.x / n_tiles) % 2, nt = blockIdx.x % n_tiles;
    if (rt >= tile_offsets[experts]) return;
    const int e = expert_of(rt, tile_offsets, experts);
    const int m0 = expert_offsets[e] + (rt - tile_offsets[e]) * BM + half * HM;
    const int rows = min(HM, expert_offsets[e + 1] - m0);
    if (rows <= 0) return;  // the tile's second half is empty

    const int tid = threadIdx.x, lane = tid % 32, wq = tid / 32;
    const int ld_row = tid / CHUNKS, ld_chunk = tid % CHUNKS;
    const int kbs = K / BK;  // scale blocks along K

    // Load side: A rows ld_row + q * ROW_STEP (gathered), B rows likewise in
    // two halves (gate and up rows for GATE_UP).
    const u8* a_ptr[A_LOADS];
    bool a_ok[A_LOADS];
#pragma unroll
    for (int q = 0; q < A_LOADS; ++q) {
        const int r = ld_row + q * ROW_STEP;
        a_ok[q] = r < rows;
        a_ptr[q] = a_q + source_row<GATE_UP>(slot_token, m0 + r, a_ok[q]) * K + ld_chunk * 16;
    }
    const u8* b_lo;
    const u8* b_hi;
    weight_halves<GATE_UP, BN>(w, e, GATE_UP ? nt : nt * DOWN_TILES, ld_row, K, n_out, ld_chunk * 16, b_lo, b_hi);
    const long long b_step = (long long)ROW_STEP * K;

    // Scales: this thread's two accumulator rows (wq * 16 + lane / 4 and 8
    // below; a row past the tile reads the first row's, its products are 0),
    // and the B blocks of the tile's gate (lo) and up (hi) halves.
    const float* sa[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r = wq * 16 + lane / 4 + h * 8;
        if (r >= rows) r = 0;
        sa[h] = a_s + source_row<GATE_UP>(slot_token, m0 + r, true) * kbs;
    }
    const int n_blocks = GATE_UP ? (2 * n_out + BLOCK - 1) / BLOCK : (n_out + BLOCK - 1) / BLOCK;
    const float* sb_lo;
    const float* sb_hi;
    if (GATE_UP) {
        sb_lo = w_s + ((long long)e * n_blocks + nt * GATE_UP_COLS / BLOCK) * kbs;
        sb_hi = w_s + ((long long)e * n_blocks + (n_out + nt * GATE_UP_COLS) / BLOCK) * kbs;
    } else {
        sb_lo = w_s + ((long long)e * n_blocks + nt * DOWN_TILES) * kbs;
        sb_hi = sb_lo;
    }

    const unsigned smem0 = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned dst0 = (unsigned)swizzle16<128>(ld_row, ld_chunk);
    // The k-blocks of every tile the CTA takes (down: DOWN_TILES column tiles
    // of y or the row's rest, gate+up: one) run in one pipeline: block it is
    // k-block it % kbs of tile it / kbs, whose B rows are BN rows further and
    // whose scale row is the next one (so its scale is sb_lo[it]).
    constexpr int TILES = GATE_UP ? 1 : DOWN_TILES;
    const int tiles = GATE_UP ? 1 : min(TILES, n_out / BN - nt * TILES);  // down: the row's rest if fewer
    const int blocks = tiles * kbs;
    auto load_stage = [&](int stage, int it) {
        const int tile = TILES == 1 ? 0 : it / kbs;
        const unsigned base = smem0 + (unsigned)(stage * STAGE_BYTES) + dst0;
        const int k0 = (it - tile * kbs) * BK;
        const long long b_off = (long long)tile * BN * K;
#pragma unroll
        for (int q = 0; q < A_LOADS; ++q) cp_async_16(base + q * ROW_STEP * 128, a_ptr[q] + k0, a_ok[q]);
#pragma unroll
        for (int q = 0; q < B_HALF; ++q) {
            cp_async_16(base + A_BYTES + q * ROW_STEP * 128, b_lo + b_off + q * b_step + k0, true);
            cp_async_16(base + A_BYTES + (q + B_HALF) * ROW_STEP * 128, b_hi + b_off + q * b_step + k0, true);
        }
    };

    float acc[ACC], part[ACC];
#pragma unroll
    for (int q = 0; q < ACC; ++q) acc[q] = part[q] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < blocks) load_stage(s, s);
        cp_async_commit();
    }
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes (K-major SW128; LBO unused)
    for (int it = 0, tile = 0; it < blocks; ++it) {
        const int kt = it - tile * kbs;  // the k-block of tile `tile`
        cp_async_wait<STAGES - 2>();
        fence_proxy_async();  // cp.async writes -> the tensor cores' (async proxy) reads
        __syncthreads();      // stage it landed for all; k-block it-1's wgmmas are done
        const int next = it + STAGES - 1;
        if (next < blocks) load_stage(next % STAGES, next);
        cp_async_commit();
        const unsigned st = smem0 + (unsigned)((it % STAGES) * STAGE_BYTES);
        fence_operands(part);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
            wgmma_m64n128k32_e4m3(part, desc_sw128(st + ks * 32, 16, SBO), desc_sw128(st + A_BYTES + ks * 32, 16, SBO),
                                  ks > 0);
        }
        wgmma_commit();
        // The k-block's scales, read while the tensor cores work.
        const float s0 = sa[0][kt], s1 = sa[1][kt];
        const float b_l = sb_lo[it], b_h = sb_hi[it];
        wgmma_wait<0>();
        fence_operands(part);
        promote(acc, part, s0, s1, b_l, b_h);
        if (!GATE_UP && kt + 1 == kbs) {
            // Tile `tile` of y done (moe_wgmma_common.cuh's fragment layout;
            // the warp's rows from wq * 16), while the next tile's first
            // k-blocks load.
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wq * 16 + lane / 4 + h * 8;
                if (r >= rows) continue;
                bf16* orow = out + (long long)(m0 + r) * n_out + (nt * TILES + tile) * BN + (lane % 4) * 2;
#pragma unroll
                for (int j = 0; j < NI; ++j) store_bf16x2(orow + j * 8, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            }
#pragma unroll
            for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
            ++tile;
        }
    }
    cp_async_wait<0>();

    // The gate+up epilogue from the fragments: act through store_act.
    if (GATE_UP) store_act(acc, out, m0, rows, wq * 16, nt * GATE_UP_COLS, n_out, lane);
}

}  // namespace headroom_moe_fp8

// act [rows][inter] = SiLU(x·gate)·(x·up) per sorted row, x gathered by slot_token.
extern "C" __global__ void __launch_bounds__(headroom_moe_fp8::THREADS, headroom_moe_fp8::CTAS_PER_SM)
    moe_gemm_gate_up_fp8(const unsigned char* __restrict__ xq, const float* __restrict__ xs,
                         const int* __restrict__ slot_token, const unsigned char* __restrict__ gate_up,
                         const float* __restrict__ gate_up_s, __nv_bfloat16* __restrict__ act,
                         const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets,
                         int experts, int hidden, int inter) {
    headroom_moe_fp8::fp8_grouped_gemm<true>(xq, xs, slot_token, gate_up, gate_up_s, act, expert_offsets,
                                             tile_offsets, experts, hidden, inter);
}

// y [rows][hidden] = act·downᵀ per sorted row.
extern "C" __global__ void __launch_bounds__(headroom_moe_fp8::THREADS, headroom_moe_fp8::CTAS_PER_SM)
    moe_gemm_down_fp8(const unsigned char* __restrict__ actq, const float* __restrict__ acts,
                      const unsigned char* __restrict__ down, const float* __restrict__ down_s,
                      __nv_bfloat16* __restrict__ y, const int* __restrict__ expert_offsets,
                      const int* __restrict__ tile_offsets, int experts, int inter, int hidden) {
    headroom_moe_fp8::fp8_grouped_gemm<false>(actq, acts, nullptr, down, down_s, y, expert_offsets,
                                              tile_offsets, experts, inter, hidden);
}
