// Warp-specialised grouped GEMMs of the sparse MoE's routed experts on
// block-scaled FP8 experts (sm_90a only): moe_grouped_gemm_ws.cu's persistent
// producer / consumer structure and 128 x 256 units on moe_grouped_gemm_fp8.cu's
// operands and arithmetic (the same A codes and scales, the same per-128-K
// promotion, the same act and y).
//
// - 384 threads: warpgroups 0 and 1 do the MMA (64 rows each of a 128-row
//   unit), warpgroup 2 is the producer (setmaxnreg: 40 and 232 registers).
//   The producer walks the units (taken in order from sched[0] with an
//   atomic, the tile written beside the unit's first stage) and their
//   k-steps, up to STAGES steps ahead across unit boundaries: per step its
//   thread 0 arms the stage's full mbarrier with B's 32 KiB and issues two
//   TMA boxes (128 weight rows of 128 bytes each: the gate rows and the up
//   rows of 128 act columns, or 2 x 128 y rows), and its 128 threads gather
//   A's 128 rows of 128 bytes (cp.async, arriving on the full mbarrier as
//   they land).
// - A k-step is one 128-column scale block. Each MMA warpgroup takes B's two
//   128-row halves in turn through one partial-sum buffer: 4 wgmma
//   m64n128k32 e4m3 into part, wait, promote into the half's accumulator
//   (part * scale_a[row][kb] * scale_b[block][kb]); after the second half it
//   releases the stage. The other MMA warpgroup's wgmmas run meanwhile (a
//   second partial-sum buffer would not fit the 232 registers beside the
//   two accumulators, and one read while the next wgmmas run makes ptxas
//   serialise the wgmma pipe, C7514).
// - Why 256 B rows a unit (session 36): with 128 the units read 32 KiB from
//   L2 a k-step for 4.2 MFLOP (128 FLOP a byte) and ran at L2's rate, not the
//   tensor cores'; two halves sharing A read 48 KiB for 8.4 MFLOP (171).
// - Epilogues: gate+up SiLU(gate)·up to bf16 act from the two accumulators
//   (gate, up: store_act_blocks), down y staged through shared memory per
//   warpgroup a half at a time, 16-byte stores (stage_y, copy_y).
//
// The weights' tensor map is over their bytes as a bf16 matrix of K / 2
// columns (TMA copies bytes: a box of 64 "bf16" columns is one 128-byte row,
// SW128), so box coordinates along K are k / 2.
//
// Needs K % 128 == 0, experts <= MAX_EXPERTS, gate+up: intermediate % 128
// == 0 (a unit's 128 gate rows are one scale block, as its up rows), down:
// hidden % 256 == 0.

#include <cuda_bf16.h>

namespace headroom_moe_ws_fp8 {

typedef __nv_bfloat16 bf16;
typedef unsigned char u8;

constexpr int BLOCK = 128;                        // scale block, rows and columns
constexpr int BM = 128;
constexpr int BN = 256;                           // B rows a unit: two halves of 128
constexpr int BK = 128;                           // bytes (e4m3 columns) a step: one scale block
constexpr int STAGES = 4;
constexpr int WARPGROUPS = 2;                     // MMA warpgroups
constexpr int MMA_THREADS = WARPGROUPS * 128;     // 256
constexpr int PRODUCER_THREADS = 128;             // one warpgroup
constexpr int THREADS = MMA_THREADS + PRODUCER_THREADS;  // 384
constexpr int PRODUCER_REGS = 40;                 // setmaxnreg: 128 x 40 + 256 x 232 = 168 x 384
constexpr int MMA_REGS = 232;
constexpr int WG_ROWS = BM / WARPGROUPS;          // 64: the wgmma M
constexpr int HALF_N = BN / 2;                    // 128: a half's wgmma N
constexpr int NI = HALF_N / 8;                    // 16 n8 blocks a half
constexpr int ACC = NI * 4;                       // 64 f32 a thread a half
constexpr int ROW_CHUNKS = BK / 16;               // 8 chunks of 16 bytes a row
constexpr int A_ROWS_THREAD = BM * ROW_CHUNKS / PRODUCER_THREADS;  // 8 chunks of A a producer thread per step
constexpr int A_ROW_STEP = PRODUCER_THREADS / ROW_CHUNKS;           // 16 rows between them
constexpr int A_BYTES = BM * BK;                  // 16 KiB
constexpr int B_BYTES = BN * BK;                  // 32 KiB
constexpr int B_HALF = B_BYTES / 2;               // one TMA box: 128 rows x 128 bytes
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int FULL_ARRIVALS = PRODUCER_THREADS + 1;
constexpr int MAX_EXPERTS = 256;
constexpr int EPI_BYTES = WG_ROWS * HALF_N * 2;   // a warpgroup's y of one half, bf16
constexpr int BAR_BYTES = 2 * STAGES * 8;
constexpr int TABLE_BYTES = (MAX_EXPERTS + 1) * 4;
constexpr int SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;
constexpr int SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;
constexpr int GATE_UP_COLS = BN / 2;              // 128 act columns a unit
static_assert(BK == BLOCK && ROW_CHUNKS == 8, "a stage row is one 128-byte swizzle row and one scale block");
static_assert(THREADS >= MAX_EXPERTS, "tile_table: one expert a thread");
static_assert(PRODUCER_THREADS * PRODUCER_REGS + MMA_THREADS * MMA_REGS <= headroom_moe_ws_common::cta_registers(THREADS),
              "setmaxnreg's split fits the CTA's registers");
static_assert(SMEM_DOWN <= 227 * 1024, "one CTA fits an SM");
static_assert(A_BYTES % 1024 == 0 && B_HALF % 1024 == 0 && STAGE_BYTES % 1024 == 0, "SW128 boxes 1024-aligned");

using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_wait;
using headroom_async::fence_operands;
using headroom_tma::TmaDesc;
using headroom_moe_tiles::Tile;
using headroom_moe_common::source_row;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::wgmma_m64n128k32_e4m3;
using headroom_moe_wgmma_common::store_act_blocks;
using headroom_moe_wgmma_common::promote;
using headroom_moe_common::silu_mul;
using headroom_moe_common::store_bf16x2;
using headroom_moe_wgmma_common::stage_y;
using headroom_moe_wgmma_common::copy_y;
using headroom_moe_ws_common::wg_barrier;
using headroom_moe_ws_common::get_tile;
using headroom_moe_ws_common::produce;
using headroom_moe_ws_common::wait_full;
using headroom_moe_ws_common::release;
using headroom_moe_ws_common::Ring;
using headroom_moe_ws_common::ring_begin;
using headroom_moe_ws_common::skip_unit;


// The layout moe_ws_common.cuh's producer loads (its template parameter):
// A's e4m3 codes, and the weights' map over their bytes as bf16 (K / 2).
struct Layout {
    typedef u8 Elem;
    static constexpr int BM = headroom_moe_ws_fp8::BM, BK = headroom_moe_ws_fp8::BK, CHUNK = 16;
    static constexpr int ROW_CHUNKS = headroom_moe_ws_fp8::ROW_CHUNKS;
    static constexpr int A_ROWS_THREAD = headroom_moe_ws_fp8::A_ROWS_THREAD;
    static constexpr int A_ROW_STEP = headroom_moe_ws_fp8::A_ROW_STEP, STAGES = headroom_moe_ws_fp8::STAGES;
    static constexpr int STAGE_BYTES = headroom_moe_ws_fp8::STAGE_BYTES, A_BYTES = headroom_moe_ws_fp8::A_BYTES;
    static constexpr int B_BYTES = headroom_moe_ws_fp8::B_BYTES, B_HALF = headroom_moe_ws_fp8::B_HALF;
    static constexpr int MAP_DIV = 2;
};

// One k-step's wgmmas of one warpgroup and one half of B into part: its 64
// rows of A against the half's 128 rows (from zero: the first one's scale-d
// is off).
__device__ __forceinline__ void mma_half(float (&part)[ACC], unsigned stage_base, int wg, int half) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
    const unsigned sa = stage_base + wg * WG_ROWS * 128;
    const unsigned sb = stage_base + A_BYTES + half * B_HALF;
    fence_operands(part);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks) {
        wgmma_m64n128k32_e4m3(part, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(sb + ks * 32, 16, SBO), ks > 0);
    }
    wgmma_commit();
}

// The scales of a thread's fragment of a unit: its two rows' A scale rows and
// B's two halves' scale rows (gate+up: the gate block, the up block; down:
// the two y blocks).
struct UnitScales {
    const float* a[2];
    const float* b[2];
};

template <bool GATE_UP>
__device__ __forceinline__ UnitScales unit_scales(const float* __restrict__ a_s, const int* __restrict__ slot_token,
                                                  const float* __restrict__ w_s, const Tile& tl, int r0, int lane,
                                                  int K, int n_out) {
    const int kbs = K / BK;
    UnitScales sc;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r = r0 + lane / 4 + h * 8;
        if (r >= tl.rows) r = 0;  // a row past the unit: A's zero rows make its products 0
        sc.a[h] = a_s + source_row<GATE_UP>(slot_token, tl.m0 + r, true) * kbs;
    }
    if (GATE_UP) {
        const int n_blocks = (2 * n_out + BLOCK - 1) / BLOCK;
        sc.b[0] = w_s + ((long long)tl.e * n_blocks + tl.nt * GATE_UP_COLS / BLOCK) * kbs;
        sc.b[1] = w_s + ((long long)tl.e * n_blocks + (n_out + tl.nt * GATE_UP_COLS) / BLOCK) * kbs;
    } else {
        const int n_blocks = (n_out + BLOCK - 1) / BLOCK;
        sc.b[0] = w_s + ((long long)tl.e * n_blocks + tl.nt * (BN / BLOCK)) * kbs;
        sc.b[1] = sc.b[0] + kbs;
    }
    return sc;
}

// The lane index, read where it is used: the epilogue's addresses derive
// from it, and with threadIdx.x ptxas hoisted them out of the unit loop,
// where beside the two accumulators and the partial sums they spilled.
__device__ __forceinline__ int lane_here() {
    int l;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(l));
    return l;
}

// The down epilogue of half `half` (its 128 y columns) through this
// warpgroup's EPI_BYTES.
__device__ __forceinline__ void store_y(const float (&acc)[ACC], bf16* __restrict__ out, const Tile& tl, int n_out,
                                        int wg, int wq, unsigned char* buf, int half) {
    const int lane = lane_here(), t = wq * 32 + lane;
    wg_barrier(wg);
    stage_y(acc, buf, wq * 16, 0, lane);
    wg_barrier(wg);
    copy_y<WG_ROWS, 128>(buf, out, tl.m0, tl.rows, wg * WG_ROWS, tl.nt * BN, half * HALF_N, n_out, t);
}

// The kernel body: a_q / a_s (x's codes and scales gathered through
// slot_token, or act's) against the weights of wmap with scale_inv w_s to
// out (bf16 act or y), K and n_out its GEMM's.
template <bool GATE_UP>
__device__ __forceinline__ void ws_fp8_gemm(const u8* __restrict__ a_q, const float* __restrict__ a_s,
                                            const int* __restrict__ slot_token, const float* __restrict__ w_s,
                                            bf16* __restrict__ out, const int* __restrict__ expert_offsets,
                                            const int* __restrict__ tile_offsets, int experts, int K, int n_out,
                                            int* __restrict__ sched, const TmaDesc* wmap) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ int stage_tile[STAGES * 4];  // the tile of a unit's first step in each stage
    __shared__ int next_unit;
    constexpr int EPI = GATE_UP ? 0 : WARPGROUPS * EPI_BYTES;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const Ring ring =
        ring_begin<STAGES, STAGE_BYTES, EPI, THREADS, FULL_ARRIVALS, WARPGROUPS>(smem_raw, tile_offsets, experts, tid);
    const unsigned smem0 = ring.smem0, bars = ring.bars;
    unsigned char* smem = ring.smem;
    const int* table = ring.table;

    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int total = table[experts] * n_tiles;
    const int k_tiles = K / BK;

    if (tid >= MMA_THREADS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        produce<GATE_UP, Layout>(a_q, slot_token, expert_offsets, table, experts, K, n_out, n_tiles, total, sched,
                                 &next_unit, stage_tile, smem0, bars, wmap, tid - MMA_THREADS);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(MMA_REGS));
    const int wg = warp / 4, wq = warp % 4;
    const bool warp_leader = lane == 0;  // release: one arrival an MMA warp
    unsigned char* epi = smem + STAGES * STAGE_BYTES + wg * EPI_BYTES;
    float acc[2][ACC], part[ACC];
    for (int s = 0;;) {
        // The unit's first step has landed with its tile beside it.
        wait_full<STAGES>(bars, s);
        const Tile ct = get_tile(stage_tile, s % STAGES);
        if (ct.e < 0) break;
        if (ct.rows > wg * WG_ROWS) {
            const UnitScales sc = unit_scales<GATE_UP>(a_s, slot_token, w_s, ct, wg * WG_ROWS + wq * 16, lane, K,
                                                       n_out);
#pragma unroll
            for (int q = 0; q < ACC; ++q) acc[0][q] = acc[1][q] = 0.f;
            // The k-block's scales are read a step ahead (session 41: read in
            // their own step, their L2 latency outlasted the half's wgmmas and
            // the promotion waited on them).
            float s0 = sc.a[0][0], s1 = sc.a[1][0], b0 = sc.b[0][0], b1 = sc.b[1][0];
            for (int kt = 0; kt < k_tiles; ++kt) {
                if (kt > 0) wait_full<STAGES>(bars, s + kt);
                const unsigned st = smem0 + (unsigned)(((s + kt) % STAGES) * STAGE_BYTES);
                mma_half(part, st, wg, 0);
                const int kn = min(kt + 1, k_tiles - 1);
                const float n_s0 = sc.a[0][kn], n_s1 = sc.a[1][kn];
                const float n_b0 = sc.b[0][kn], n_b1 = sc.b[1][kn];
                wgmma_wait<0>();
                fence_operands(part);
                promote(acc[0], part, s0, s1, b0, b0);
                mma_half(part, st, wg, 1);
                wgmma_wait<0>();
                fence_operands(part);
                release<STAGES>(bars, s + kt, warp_leader);  // the stage is read: the producer may refill it
                promote(acc[1], part, s0, s1, b1, b1);
                s0 = n_s0;
                s1 = n_s1;
                b0 = n_b0;
                b1 = n_b1;
            }
            s += k_tiles;
            if (GATE_UP) {
                store_act_blocks<NI>(acc[0], acc[1], out, ct.m0, ct.rows, wg * WG_ROWS + wq * 16,
                                     ct.nt * GATE_UP_COLS, n_out, lane);
            } else {
                store_y(acc[0], out, ct, n_out, wg, wq, epi, 0);
                store_y(acc[1], out, ct, n_out, wg, wq, epi, 1);
            }
        } else {
            // No row of this warpgroup's half: wait for and release each step.
            s = skip_unit<STAGES>(bars, s, k_tiles, warp_leader);
        }
    }
}

// The launcher's signatures: moe_grouped_gemm_fp8.cu's with the weights'
// scale_inv in place of their codes, then the unit counters (two ints, zero
// at the launch), then the tensor map of the codes by value.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_gate_up_ws_fp8(const u8* __restrict__ xq, const float* __restrict__ xs, const int* __restrict__ slot_token,
                        const float* __restrict__ gate_up_s, bf16* __restrict__ act,
                        const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets, int experts,
                        int hidden, int inter, int* __restrict__ sched, const __grid_constant__ TmaDesc gate_up) {
    ws_fp8_gemm<true>(xq, xs, slot_token, gate_up_s, act, expert_offsets, tile_offsets, experts, hidden, inter, sched,
                      &gate_up);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_down_ws_fp8(const u8* __restrict__ actq, const float* __restrict__ acts, const float* __restrict__ down_s,
                     bf16* __restrict__ y, const int* __restrict__ expert_offsets,
                     const int* __restrict__ tile_offsets, int experts, int inter, int hidden,
                     int* __restrict__ sched, const __grid_constant__ TmaDesc down) {
    ws_fp8_gemm<false>(actq, acts, nullptr, down_s, y, expert_offsets, tile_offsets, experts, inter, hidden, sched,
                       &down);
}

}  // namespace headroom_moe_ws_fp8
