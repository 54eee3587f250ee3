// Warp-specialised grouped GEMMs of the sparse MoE's routed experts on
// Hopper warpgroup MMA (sm_90a only; GemmImpl::Ws, the default from 16,384
// (token, k) pairs a pass). Same contract as moe_grouped_gemm_wgmma.cu, on
// 128 x 256 x 64 tiles (wgmma m64n256k16) over a persistent grid (one CTA an
// SM walking the tiles), the loads handed over on mbarriers so that the MMA
// warpgroups' k-loop has no CTA barrier:
//
// - 384 threads: warpgroups 0 and 1 do the MMA (64 rows each), warpgroup 2
//   is the producer; the producer drops to 40 registers (setmaxnreg.dec),
//   the MMA warpgroups take 232 (setmaxnreg.inc: the accumulators and the
//   down epilogue fit without spills, which the 224 registers a thread of a
//   288-thread CTA with a one-warp producer did not). The producer walks
//   the same tiles and k-steps, up to STAGES (4) steps ahead, across tile
//   boundaries: per step it waits for the stage's empty mbarrier, its
//   thread 0 arms the full mbarrier with the 32 KiB of B
//   (mbarrier.arrive.expect_tx) and issues B's two TMA boxes (128 weight
//   rows of 64 each), and its 128 threads gather A's 128 rows (8 rows x one
//   16-byte chunk a thread, cp.async, 16 rows of 128 bytes an instruction)
//   and arrive on the full mbarrier when their copies land
//   (cp.async.mbarrier.arrive.noinc). Full: 129 arrivals a phase (the
//   expect_tx arrive + 128 noinc arrives).
// - The MMA warpgroups wait on the full mbarrier only, fence the cp.async
//   writes to the async proxy, issue their 4 wgmmas, and after wgmma
//   wait_group 1 (one group in flight) release the PREVIOUS step's stage:
//   lane 0 of each MMA warp arrives on its empty mbarrier. Empty: 8
//   arrivals a phase, so no stage is refilled before every MMA warp is past
//   it (moe_ws_common.cuh's release).
// - A warpgroup without rows (the second half of an expert's last tile of
//   at most 64 rows) still waits on every step's full mbarrier and releases
//   it, in a second k-loop chosen outside the loop (no branch around the
//   wgmmas).
// - Units are handed out in order at run time: the producer's thread 0 takes
//   the next from sched[0] with an atomic and writes its tile (expert, rows,
//   column tile) beside the unit's first stage, where the MMA warpgroups read
//   it after their full wait (no global load of theirs between two units; a
//   tile of expert -1 is the end). A fixed round robin let the CTAs
//   drift apart (an expert's last tile is cheaper than a full one), so the
//   row tiles of one expert, which read the same weights, ran far apart in
//   time and read them from DRAM again (ncu, 8,192 tokens: gate+up 1.98 GB
//   from DRAM for 1.04 GB of weights and rows, L2 hit rate 43 %). Which CTA
//   computes a unit does not change its result. The CTA that ends last
//   zeroes sched[0..2) for the next launch (sched[1] counts the ends).
// - Epilogues: gate+up SiLU(gate)·up to act from the fragments (store_act);
//   down y staged through shared memory per warpgroup, 16-byte stores
//   (stage_y, copy_y).
//
// Needs K % BK == 0, experts <= MAX_EXPERTS (the tile table in shared
// memory), gate+up: intermediate % 128 == 0, down: hidden % 256 == 0, the
// weights' tensor map `wmap` (rows of K, 64 x 128 boxes, SW128).

#include <cuda_bf16.h>

namespace headroom_moe_ws {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int WARPGROUPS = 2;                     // MMA warpgroups
constexpr int MMA_THREADS = WARPGROUPS * 128;     // 256
constexpr int PRODUCER_THREADS = 128;             // one warpgroup
constexpr int THREADS = MMA_THREADS + PRODUCER_THREADS;  // 384
constexpr int PRODUCER_REGS = 40;                 // setmaxnreg: 128 x 40 + 256 x 232 = 168 x 384
constexpr int MMA_REGS = 232;
constexpr int WG_ROWS = BM / WARPGROUPS;          // 64: the wgmma M
constexpr int NI = BN / 8;
constexpr int ACC = NI * 4;
constexpr int CHUNK = 8;
constexpr int ROW_CHUNKS = BK / CHUNK;            // 8
constexpr int A_ROWS_THREAD = BM * ROW_CHUNKS / PRODUCER_THREADS;  // 8 chunks of A a producer thread per step
constexpr int A_ROW_STEP = PRODUCER_THREADS / ROW_CHUNKS;           // 16 rows between them
constexpr int A_BYTES = BM * BK * 2;              // 16 KiB
constexpr int B_BYTES = BN * BK * 2;              // 32 KiB
constexpr int B_HALF = B_BYTES / 2;               // one TMA box: 128 rows x 64
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int FULL_ARRIVALS = PRODUCER_THREADS + 1;
constexpr int MAX_EXPERTS = 256;
constexpr int EPI_COLS = 128;
constexpr int EPI_BYTES = WG_ROWS * EPI_COLS * 2;
constexpr int BAR_BYTES = 2 * STAGES * 8;
constexpr int TABLE_BYTES = (MAX_EXPERTS + 1) * 4;
constexpr int SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;
constexpr int SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;
constexpr int GATE_UP_COLS = BN / 2;
static_assert(THREADS >= MAX_EXPERTS, "pair_table: one expert a thread");
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
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::store_act;
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


// d = A·B + (accumulate ? d : 0): A and B K-major SW128 descriptors.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long da, unsigned long long db,
                                                 int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(accumulate));
}


// The layout moe_ws_common.cuh's producer loads (its template parameter).
struct Layout {
    typedef bf16 Elem;
    static constexpr int BM = headroom_moe_ws::BM, BK = headroom_moe_ws::BK, CHUNK = headroom_moe_ws::CHUNK;
    static constexpr int ROW_CHUNKS = headroom_moe_ws::ROW_CHUNKS, A_ROWS_THREAD = headroom_moe_ws::A_ROWS_THREAD;
    static constexpr int A_ROW_STEP = headroom_moe_ws::A_ROW_STEP, STAGES = headroom_moe_ws::STAGES;
    static constexpr int STAGE_BYTES = headroom_moe_ws::STAGE_BYTES, A_BYTES = headroom_moe_ws::A_BYTES;
    static constexpr int B_BYTES = headroom_moe_ws::B_BYTES, B_HALF = headroom_moe_ws::B_HALF;
    static constexpr int MAP_DIV = 1;  // the weights' map counts K in A's elements
};

// One k-step of one warpgroup: its 64 rows of A against the stage's 256 rows of B.
__device__ __forceinline__ void mma_step(float (&acc)[ACC], unsigned stage_base, int wg, int kt) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
    const unsigned sa = stage_base + wg * WG_ROWS * 128;
    const unsigned sb = stage_base + A_BYTES;
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
        wgmma_m64n256k16(acc, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(sb + ks * 32, 16, SBO),
                         ks > 0 || kt > 0);
    }
    wgmma_commit();
}

// The down epilogue through this warpgroup's EPI_BYTES, 128 columns at a time.
__device__ __forceinline__ void store_y(const float (&acc)[ACC], bf16* __restrict__ out, const Tile& tl, int n_out,
                                        int wg, int wq, int lane, unsigned char* buf) {
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        wg_barrier(wg);
        stage_y(acc, buf, wq * 16, half * (NI / 2), lane);
        wg_barrier(wg);
        copy_y<WG_ROWS, 128>(buf, out, tl.m0, tl.rows, wg * WG_ROWS, tl.nt * BN, half * EPI_COLS, n_out, t);
    }
}

// The kernel body: a_src (x gathered through slot_token, or act) against
// the weights of wmap to out (act or y), K and n_out its GEMM's.
template <bool GATE_UP>
__device__ __forceinline__ void ws_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
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
        produce<GATE_UP, Layout>(a_src, slot_token, expert_offsets, table, experts, K, n_out, n_tiles, total, sched,
                                 &next_unit, stage_tile, smem0, bars, wmap, tid - MMA_THREADS);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(MMA_REGS));
        const int wg = warp / 4, wq = warp % 4;
        const bool warp_leader = lane == 0;  // release: one arrival an MMA warp
        unsigned char* epi = smem + STAGES * STAGE_BYTES + wg * EPI_BYTES;
        float acc[ACC];
#pragma unroll
        for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
        for (int s = 0;;) {
            // The unit's first step has landed with its tile beside it.
            wait_full<STAGES>(bars, s);
            const Tile ct = get_tile(stage_tile, s % STAGES);
            if (ct.e < 0) break;
            if (ct.rows > wg * WG_ROWS) {
                // Step 0 alone (nothing of this tile to release yet), then
                // each step releases the one before once its wgmmas are done.
                mma_step(acc, smem0 + (unsigned)((s % STAGES) * STAGE_BYTES), wg, 0);
                ++s;
                for (int kt = 1; kt < k_tiles; ++kt, ++s) {
                    wait_full<STAGES>(bars, s);
                    mma_step(acc, smem0 + (unsigned)((s % STAGES) * STAGE_BYTES), wg, kt);
                    wgmma_wait<1>();
                    fence_operands(acc);
                    release<STAGES>(bars, s - 1, warp_leader);
                }
                wgmma_wait<0>();
                fence_operands(acc);
                release<STAGES>(bars, s - 1, warp_leader);
                if (GATE_UP) {
                    store_act(acc, out, ct.m0, ct.rows, wg * WG_ROWS + wq * 16, ct.nt * GATE_UP_COLS, n_out, lane);
                } else {
                    store_y(acc, out, ct, n_out, wg, wq, lane, epi);
                }
            } else {
                s = skip_unit<STAGES>(bars, s, k_tiles, warp_leader);
            }
        }
    }
}

// The launcher's signatures: moe_grouped_gemm_wgmma.cu's without the
// weights' pointer, then the unit counters (two ints, zero at the launch),
// then the weights' tensor map by value.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_gate_up_ws_bf16(const bf16* __restrict__ x, const int* __restrict__ slot_token, bf16* __restrict__ act,
                         const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets, int experts,
                         int hidden, int inter, int* __restrict__ sched, const __grid_constant__ TmaDesc gate_up) {
    ws_gemm<true>(x, slot_token, act, expert_offsets, tile_offsets, experts, hidden, inter, sched, &gate_up);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_down_ws_bf16(const bf16* __restrict__ act, bf16* __restrict__ y, const int* __restrict__ expert_offsets,
                      const int* __restrict__ tile_offsets, int experts, int inter, int hidden,
                      int* __restrict__ sched, const __grid_constant__ TmaDesc down) {
    ws_gemm<false>(act, nullptr, y, expert_offsets, tile_offsets, experts, inter, hidden, sched, &down);
}

}  // namespace headroom_moe_ws
