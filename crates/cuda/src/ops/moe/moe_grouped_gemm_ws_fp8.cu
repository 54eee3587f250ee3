// Warp-specialised grouped GEMMs of the sparse MoE's routed experts on
// block-scaled FP8 experts (sm_90a only): moe_grouped_gemm_ws.cu's persistent
// producer / consumer structure on moe_grouped_gemm_fp8.cu's operands and
// arithmetic (the same A codes and scales, the same per-128-K promotion, the
// same act and y).
//
// - 384 threads: warpgroups 0 and 1 do the MMA (64 rows each of a 128-row
//   unit), warpgroup 2 is the producer (setmaxnreg: 40 and 232 registers).
//   The producer walks the units (taken in order from sched[0] with an
//   atomic, the tile written beside the unit's first stage) and their
//   k-steps, up to STAGES steps ahead across unit boundaries: per step its
//   thread 0 arms the stage's full mbarrier with B's 16 KiB and issues two
//   TMA boxes (64 weight rows of 128 bytes each: gate and up rows of 64 act
//   columns, or 128 y rows), and its 128 threads gather A's 128 rows of 128
//   bytes (cp.async, arriving on the full mbarrier as they land).
// - A k-step is one 128-column scale block: each MMA warpgroup issues 4
//   wgmma m64n128k32 e4m3 into its partial sums, waits for them, releases
//   the stage and promotes them into the f32 accumulator (part *
//   scale_a[row][kb] * scale_b[block][kb]); the other MMA warpgroup's
//   wgmmas run meanwhile (a second partial-sum buffer read while the next
//   wgmmas run makes ptxas serialise the wgmma pipe, C7514).
// - Epilogues: gate+up SiLU(gate)·up to bf16 act (store_act), down y staged
//   through shared memory per warpgroup, 16-byte stores (stage_y, copy_y).
//
// The weights' tensor map is over their bytes as a bf16 matrix of K / 2
// columns (TMA copies bytes: a box of 64 "bf16" columns is one 128-byte row,
// SW128), so box coordinates along K are k / 2.
//
// Needs K % 128 == 0, experts <= MAX_EXPERTS, gate+up: intermediate % 64 ==
// 0 (a unit's 64 gate rows lie in one scale block, as its up rows), down:
// hidden % 128 == 0.

#include <cuda_bf16.h>

namespace headroom_moe_ws_fp8 {

typedef __nv_bfloat16 bf16;
typedef unsigned char u8;

constexpr int BLOCK = 128;                        // scale block, rows and columns
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 128;                           // bytes (e4m3 columns) a step: one scale block
constexpr int STAGES = 5;
constexpr int WARPGROUPS = 2;                     // MMA warpgroups
constexpr int MMA_THREADS = WARPGROUPS * 128;     // 256
constexpr int PRODUCER_THREADS = 128;             // one warpgroup
constexpr int THREADS = MMA_THREADS + PRODUCER_THREADS;  // 384
constexpr int PRODUCER_REGS = 40;                 // setmaxnreg: 128 x 40 + 256 x 232 <= 64 Ki
constexpr int MMA_REGS = 232;
constexpr int WG_ROWS = BM / WARPGROUPS;          // 64: the wgmma M
constexpr int NI = BN / 8;                        // 16 n8 blocks
constexpr int ACC = NI * 4;                       // 64 f32 a thread
constexpr int ROW_CHUNKS = BK / 16;               // 8 chunks of 16 bytes a row
constexpr int A_ROWS_THREAD = BM * ROW_CHUNKS / PRODUCER_THREADS;  // 8 chunks of A a producer thread per step
constexpr int A_ROW_STEP = PRODUCER_THREADS / ROW_CHUNKS;           // 16 rows between them
constexpr int A_BYTES = BM * BK;                  // 16 KiB
constexpr int B_BYTES = BN * BK;                  // 16 KiB
constexpr int B_HALF = B_BYTES / 2;               // one TMA box: 64 rows x 128 bytes
constexpr int B_HALF_ROWS = BN / 2;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int FULL_ARRIVALS = PRODUCER_THREADS + 1;
constexpr int MAX_EXPERTS = 256;
constexpr int EPI_BYTES = WG_ROWS * BN * 2;       // a warpgroup's y, bf16
constexpr int BAR_BYTES = 2 * STAGES * 8;
constexpr int TABLE_BYTES = (MAX_EXPERTS + 1) * 4;
constexpr int SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;
constexpr int SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;
constexpr int GATE_UP_COLS = BN / 2;              // 64 act columns a unit
static_assert(BK == BLOCK && ROW_CHUNKS == 8, "a stage row is one 128-byte swizzle row and one scale block");
static_assert(THREADS >= MAX_EXPERTS, "tile_table: one expert a thread");
static_assert(PRODUCER_THREADS * PRODUCER_REGS + MMA_THREADS * MMA_REGS <= 65536, "register file");
static_assert(SMEM_DOWN <= 227 * 1024, "one CTA fits an SM");
static_assert(A_BYTES % 1024 == 0 && B_HALF % 1024 == 0 && STAGE_BYTES % 1024 == 0, "SW128 boxes 1024-aligned");

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_wait;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_wait;
using headroom_async::fence_operands;
using headroom_tma::TmaDesc;
using headroom_tma::mbar_init;
using headroom_tma::mbar_init_fence;
using headroom_tma::mbar_expect_tx;
using headroom_tma::mbar_arrive;
using headroom_tma::mbar_wait;
using headroom_tma::tma_load_2d;
using headroom_moe_tiles::Tile;
using headroom_moe_tiles::expert_of;
using headroom_moe_common::source_row;
using headroom_moe_common::swizzle16;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::store_act;
using headroom_moe_wgmma_common::stage_y;
using headroom_moe_wgmma_common::copy_y;
using headroom_moe_ws_common::wg_barrier;
using headroom_moe_ws_common::cp_async_arrive_noinc;
using headroom_moe_ws_common::tile_table;
using headroom_moe_ws_common::take_unit;
using headroom_moe_ws_common::put_tile;
using headroom_moe_ws_common::get_tile;

// d = A·B + (accumulate ? d : 0), e4m3 x e4m3 -> f32, both K-major.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[ACC], unsigned long long da,
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

// The rows and column tile of work unit p (a 128-row tile of an expert, its
// last tile the rest, and one of n_tiles column tiles).
__device__ __forceinline__ Tile unit_tile(int p, int n_tiles, const int* table, const int* __restrict__ expert_offsets,
                                          int experts) {
    const int pp = p / n_tiles;
    Tile tl;
    tl.nt = p % n_tiles;
    tl.e = expert_of(pp, table, experts);
    tl.m0 = expert_offsets[tl.e] + (pp - table[tl.e]) * BM;
    tl.rows = min(BM, expert_offsets[tl.e + 1] - tl.m0);
    return tl;
}

// The first weight row of half h of tile tl's B (gate+up: h = 0 its 64 gate
// rows, 1 the up rows of the same act columns; down: 64 y rows each).
template <bool GATE_UP>
__device__ __forceinline__ int b_row(const Tile& tl, int h, int n_out) {
    return GATE_UP ? tl.e * 2 * n_out + h * n_out + tl.nt * GATE_UP_COLS : tl.e * n_out + tl.nt * BN + h * B_HALF_ROWS;
}

// The producer warpgroup: every k-step of the units this CTA takes into the
// stage ring, then the end stage (pt: the thread's index in the warpgroup).
template <bool GATE_UP>
__device__ __forceinline__ void produce(const u8* __restrict__ a_q, const int* __restrict__ slot_token,
                                        const int* __restrict__ expert_offsets, const int* table, int experts,
                                        int K, int n_out, int n_tiles, int total, int* __restrict__ sched,
                                        volatile int* next_unit, volatile int* stage_tile, unsigned smem0,
                                        unsigned bars, const TmaDesc* wmap, int pt) {
    const int sub = pt / ROW_CHUNKS, chunk = pt % ROW_CHUNKS;  // rows sub + 16 i, i < 8
    const unsigned dst0 = (unsigned)swizzle16<128>(sub, chunk);
    const int k_tiles = K / BK;
    int s = 0;
    for (int u = take_unit(sched, next_unit, pt); u < total; u = take_unit(sched, next_unit, pt)) {
        const Tile tl = unit_tile(u, n_tiles, table, expert_offsets, experts);
        const u8* a_ptr[A_ROWS_THREAD];
        bool a_ok[A_ROWS_THREAD];
#pragma unroll
        for (int i = 0; i < A_ROWS_THREAD; ++i) {
            const int r = sub + i * A_ROW_STEP;
            a_ok[i] = r < tl.rows;
            a_ptr[i] = a_q + source_row<GATE_UP>(slot_token, tl.m0 + r, a_ok[i]) * K + chunk * 16;
        }
        const int b0 = b_row<GATE_UP>(tl, 0, n_out), b1 = b_row<GATE_UP>(tl, 1, n_out);
        for (int kt = 0; kt < k_tiles; ++kt, ++s) {
            const int st = s % STAGES;
            const unsigned full = bars + st * 8, empty = bars + (STAGES + st) * 8;
            const unsigned base = smem0 + (unsigned)(st * STAGE_BYTES);
            const int k0 = kt * BK;
            // Both MMA warpgroups released step s - STAGES.
            if (s >= STAGES) mbar_wait(empty, (unsigned)(s / STAGES - 1) & 1u);
            if (pt == 0) {
                if (kt == 0) put_tile(stage_tile, st, tl);  // before the arrive that completes the stage
                mbar_expect_tx(full, B_BYTES);
                tma_load_2d(base + A_BYTES, wmap, k0 / 2, b0, full);
                tma_load_2d(base + A_BYTES + B_HALF, wmap, k0 / 2, b1, full);
            }
#pragma unroll
            for (int i = 0; i < A_ROWS_THREAD; ++i)
                cp_async_16(base + dst0 + i * A_ROW_STEP * 128, a_ptr[i] + k0, a_ok[i]);
            cp_async_arrive_noinc(full);
        }
    }
    // The end: a stage whose tile has expert -1 (no data, all 129 arrivals).
    const int st = s % STAGES;
    const unsigned full = bars + st * 8, empty = bars + (STAGES + st) * 8;
    if (s >= STAGES) mbar_wait(empty, (unsigned)(s / STAGES - 1) & 1u);
    if (pt == 0) {
        Tile end;
        end.e = -1;
        end.m0 = end.rows = end.nt = 0;
        put_tile(stage_tile, st, end);
        mbar_arrive(full);
    }
    cp_async_arrive_noinc(full);
    // The last CTA to end leaves the counters zero for the next launch (every
    // CTA has taken its last unit before it counts its end).
    if (pt == 0 && atomicAdd(sched + 1, 1) == (int)gridDim.x - 1) {
        atomicExch(sched, 0);
        atomicExch(sched + 1, 0);
    }
    cp_async_wait<0>();
}

// The stage of step s has landed (B by TMA, A by the producer's cp.async).
__device__ __forceinline__ void wait_full(unsigned bars, int s) {
    mbar_wait(bars + (s % STAGES) * 8, (unsigned)(s / STAGES) & 1u);
    fence_proxy_async();
}

// This warpgroup is done reading step s's stage (one thread a warpgroup).
__device__ __forceinline__ void release(unsigned bars, int s, bool leader) {
    if (leader) mbar_arrive(bars + (STAGES + s % STAGES) * 8);
}

// One k-step's wgmmas of one warpgroup into part: its 64 rows of A against
// the stage's 128 rows of B (from zero: the first one's scale-d is off).
__device__ __forceinline__ void mma_step(float (&part)[ACC], unsigned stage_base, int wg) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
    const unsigned sa = stage_base + wg * WG_ROWS * 128;
    const unsigned sb = stage_base + A_BYTES;
    fence_operands(part);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks) {
        wgmma_m64n128k32_e4m3(part, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(sb + ks * 32, 16, SBO), ks > 0);
    }
    wgmma_commit();
}

// The scales of a thread's fragment of a unit: its two rows' A scale rows and
// B's two halves' scale rows (down: one block, both the same).
struct UnitScales {
    const float* a[2];
    const float* b_lo;
    const float* b_hi;
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
        sc.b_lo = w_s + ((long long)tl.e * n_blocks + tl.nt * GATE_UP_COLS / BLOCK) * kbs;
        sc.b_hi = w_s + ((long long)tl.e * n_blocks + (n_out + tl.nt * GATE_UP_COLS) / BLOCK) * kbs;
    } else {
        const int n_blocks = (n_out + BLOCK - 1) / BLOCK;
        sc.b_lo = w_s + ((long long)tl.e * n_blocks + tl.nt) * kbs;
        sc.b_hi = sc.b_lo;
    }
    return sc;
}

// acc += part * scale_a[row][kt] * scale_b[half][kt] (blocks NI/2.. are B's
// second half: the up rows of gate+up).
__device__ __forceinline__ void promote(float (&acc)[ACC], const float (&part)[ACC], const UnitScales& sc, int kt) {
    const float s0 = sc.a[0][kt], s1 = sc.a[1][kt];
    const float b_l = sc.b_lo[kt], b_h = sc.b_hi[kt];
    const float c0l = s0 * b_l, c1l = s1 * b_l, c0h = s0 * b_h, c1h = s1 * b_h;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
        const bool up = j >= NI / 2;
        const float c0 = up ? c0h : c0l, c1 = up ? c1h : c1l;
        acc[4 * j] = fmaf(part[4 * j], c0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], c0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], c1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], c1, acc[4 * j + 3]);
    }
}

// The down epilogue through this warpgroup's EPI_BYTES.
__device__ __forceinline__ void store_y(const float (&acc)[ACC], bf16* __restrict__ out, const Tile& tl, int n_out,
                                        int wg, int wq, int lane, unsigned char* buf) {
    const int t = threadIdx.x % 128;
    wg_barrier(wg);
    stage_y(acc, buf, wq * 16, 0, lane);
    wg_barrier(wg);
    copy_y<WG_ROWS, 128>(buf, out, tl.m0, tl.rows, wg * WG_ROWS, tl.nt * BN, 0, n_out, t);
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
    const unsigned raw0 = smem_u32(smem_raw);
    const unsigned smem0 = (raw0 + 1023u) & ~1023u;
    unsigned char* smem = smem_raw + (smem0 - raw0);
    const unsigned bars = smem0 + STAGES * STAGE_BYTES + EPI;  // full[st] at + 8 st, empty[st] at + 8 (STAGES + st)
    int* table = reinterpret_cast<int*>(smem + STAGES * STAGE_BYTES + EPI + BAR_BYTES);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    tile_table<THREADS>(tile_offsets, experts, table, tid);
    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(bars + st * 8, FULL_ARRIVALS);
            mbar_init(bars + (STAGES + st) * 8, WARPGROUPS);
        }
        mbar_init_fence();
    }
    __syncthreads();

    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int total = table[experts] * n_tiles;
    const int k_tiles = K / BK;

    if (tid >= MMA_THREADS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        produce<GATE_UP>(a_q, slot_token, expert_offsets, table, experts, K, n_out, n_tiles, total, sched,
                         &next_unit, stage_tile, smem0, bars, wmap, tid - MMA_THREADS);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(MMA_REGS));
    const int wg = warp / 4, wq = warp % 4;
    const bool leader = tid % 128 == 0;
    unsigned char* epi = smem + STAGES * STAGE_BYTES + wg * EPI_BYTES;
    float acc[ACC], part[ACC];
    for (int s = 0;;) {
        // The unit's first step has landed with its tile beside it.
        wait_full(bars, s);
        const Tile ct = get_tile(stage_tile, s % STAGES);
        if (ct.e < 0) break;
        if (ct.rows > wg * WG_ROWS) {
            const UnitScales sc = unit_scales<GATE_UP>(a_s, slot_token, w_s, ct, wg * WG_ROWS + wq * 16, lane, K,
                                                       n_out);
#pragma unroll
            for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
            for (int kt = 0; kt < k_tiles; ++kt) {
                if (kt > 0) wait_full(bars, s + kt);
                mma_step(part, smem0 + (unsigned)(((s + kt) % STAGES) * STAGE_BYTES), wg);
                wgmma_wait<0>();
                fence_operands(part);
                release(bars, s + kt, leader);  // the stage is read: the producer may refill it
                promote(acc, part, sc, kt);
            }
            s += k_tiles;
            if (GATE_UP) {
                store_act(acc, out, ct.m0, ct.rows, wg * WG_ROWS + wq * 16, ct.nt * GATE_UP_COLS, n_out, lane);
            } else {
                store_y(acc, out, ct, n_out, wg, wq, lane, epi);
            }
        } else {
            // No row of this warpgroup's half: wait for and release each step.
            release(bars, s, leader);
            ++s;
            for (int kt = 1; kt < k_tiles; ++kt, ++s) {
                wait_full(bars, s);
                release(bars, s, leader);
            }
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
