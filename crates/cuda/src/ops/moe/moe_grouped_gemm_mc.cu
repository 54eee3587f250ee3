// Cluster-multicast grouped GEMMs of the sparse MoE's routed experts on
// Hopper warpgroup MMA (sm_90a only). Same contract, tile list and results
// as moe_grouped_gemm_wide.cu (its 128 x 256 x 64 tiles, wgmma m64n256k16,
// one CTA an SM walking the tiles, 4 stages loaded 2 k-steps ahead, the same
// epilogues and f32 accumulation order: results bit-identical to Wide); what
// differs is where B comes from:
//
// - Clusters of 2 CTAs work on 256 rows of one expert and the same weight
//   columns ("a pair"): each k-step's 256 x 64 weight tile is read from L2
//   once for both. Each CTA loads one 128-row half with TMA (SW128 boxes, the
//   layout of the wgmma descriptors) multicast into both CTAs' stage, so B
//   costs half the L2 reads of Wide (the wide kernels waited on L2).
// - A (gathered x rows for gate+up, act rows for down) is loaded by all 256
//   threads with cp.async as in Wide (cp.async groups + the CTA barrier).
// - Per stage a full mbarrier (one local arrival carrying the 32 KiB expected
//   from both halves) and an empty mbarrier collecting both CTAs' releases:
//   thread 0 of each CTA, after the CTA barrier of step s (every wgmma up to
//   s - 2 done), releases step s - 2's stage in both CTAs; before it loads
//   its half of step s + 2 into that stage it waits for the release of both.
// - Pairs: per expert ceil(rows / 256) = ceil(row tiles / 2), their prefix
//   in shared memory (pair_table); pair p = row pair * n_tiles + column tile,
//   cluster c walks p = c + j * clusters. The expert's last pair splits its
//   rows between the CTAs in 64-row units (pair_tile). A warpgroup without
//   rows (a rank or a half of a tile past the expert's end) still waits,
//   releases and loads, but runs the k-loop without wgmma: a second loop,
//   chosen outside the k-loop (a branch inside it made ptxas serialise the
//   wgmma pipe in the warp-specialised wide variant).
//
// Needs K % BK == 0, experts <= MAX_EXPERTS, gate+up: intermediate % 128 ==
// 0, down: hidden % 256 == 0; the tensor map `wmap` of the weights as rows of
// K (gate+up: E * 2 * inter rows, down: E * hidden rows), 64 x 128 boxes, SW128
// (the launcher builds it and falls back to the wide kernels otherwise).

#include <cuda_bf16.h>

namespace headroom_moe_mc {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int AHEAD = STAGES - 2;          // k-steps loaded ahead of the one computed
constexpr int WARPGROUPS = 2;
constexpr int THREADS = WARPGROUPS * 128;  // 256
constexpr int WG_ROWS = BM / WARPGROUPS;   // 64: the wgmma M
constexpr int NI = BN / 8;                 // 32 n8 blocks of the accumulator
constexpr int ACC = NI * 4;                // 128 f32 accumulators a thread
constexpr int CHUNK = 8;
constexpr int ROW_CHUNKS = BK / CHUNK;     // 8: one 128-byte swizzle row
constexpr int A_BYTES = BM * BK * 2;       // 16 KiB
constexpr int B_BYTES = BN * BK * 2;       // 32 KiB, both halves
constexpr int B_HALF = B_BYTES / 2;        // one CTA's TMA box: 128 rows x 64
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int CLUSTER = 2;
constexpr int MAX_EXPERTS = 256;           // one expert a thread in pair_table
constexpr int EPI_COLS = 128;              // y columns staged per half
constexpr int EPI_BYTES = WG_ROWS * EPI_COLS * 2;  // 16 KiB per warpgroup (down)
constexpr int BAR_BYTES = 2 * STAGES * 8;          // full[STAGES], empty[STAGES]
constexpr int TABLE_BYTES = (MAX_EXPERTS + 1) * 4;
constexpr int SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;  // + alignment slack
constexpr int SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;
constexpr int GATE_UP_COLS = BN / 2;       // 128 act columns per gate+up tile
static_assert(THREADS == MAX_EXPERTS, "pair_table: one expert a thread");
static_assert(CLUSTER == 2, "the release arrives on ranks 0 and 1");
static_assert(SMEM_DOWN <= 227 * 1024, "one CTA fits an SM");
static_assert(A_BYTES % 1024 == 0 && B_HALF % 1024 == 0 && STAGE_BYTES % 1024 == 0, "SW128 boxes 1024-aligned");

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
using headroom_async::cp_async_wait;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_wait;
using headroom_async::fence_operands;
using headroom_tma::TmaDesc;
using headroom_tma::cluster_rank;
using headroom_tma::cluster_id;
using headroom_tma::clusters;
using headroom_tma::cluster_sync;
using headroom_tma::mbar_init;
using headroom_tma::mbar_init_fence;
using headroom_tma::mbar_expect_tx;
using headroom_tma::mbar_wait;
using headroom_tma::mbar_arrive_cluster;
using headroom_tma::tma_load_2d_multicast;
using headroom_moe_tiles::Tile;
using headroom_moe_tiles::expert_of;
using headroom_moe_common::source_row;
using headroom_moe_common::swizzle16;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::store_act;
using headroom_moe_wgmma_common::stage_y;
using headroom_moe_wgmma_common::copy_y;

__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory"); }

// d = A·B + (accumulate ? d : 0), as in moe_grouped_gemm_wide.cu.
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

// table[e] = pairs of the experts before e (pairs of expert f: its row tiles
// rounded up to even, halved), e = 0 ..= experts; one expert a thread.
__device__ __forceinline__ void pair_table(const int* __restrict__ tile_offsets, int experts, int* table, int tid) {
    __shared__ int warp_sums[THREADS / 32];
    const int lane = tid % 32, warp = tid / 32;
    int v = 0;
    if (tid < experts) v = (tile_offsets[tid + 1] - tile_offsets[tid] + 1) / 2;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int n = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += n;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    for (int w = 0; w < warp; ++w) v += warp_sums[w];
    if (tid < experts) table[tid + 1] = v;
    if (tid == 0) table[0] = 0;
    __syncthreads();
}

// This CTA's rows of pair p and the first weight row of its half of B. A
// pair is 256 consecutive rows of an expert (the expert's last pair the rest,
// rem rows); its rows go to the two CTAs in 64-row units (one warpgroup's
// wgmma M), rank 0 taking the larger half: a full pair 128 + 128, rem = 100
// 64 + 36, rem = 30 30 + 0. A warpgroup without rows issues no wgmma, and one
// warpgroup alone keeps the tensor cores busy, so the last pair's time is
// its larger CTA's units, not a whole tile on both SMs.
template <bool GATE_UP>
__device__ __forceinline__ Tile pair_tile(int p, int n_tiles, const int* table, const int* __restrict__ expert_offsets,
                                          int experts, int rank, int n_out, int& b_row) {
    const int pp = p / n_tiles;
    Tile tl;
    tl.nt = p % n_tiles;
    tl.e = expert_of(pp, table, experts);
    const int m0 = expert_offsets[tl.e] + (pp - table[tl.e]) * (CLUSTER * BM);
    const int rem = min(CLUSTER * BM, expert_offsets[tl.e + 1] - m0);
    const int units = (rem + WG_ROWS - 1) / WG_ROWS;
    const int rows0 = min(rem, (units + 1) / 2 * WG_ROWS);
    tl.m0 = rank ? m0 + rows0 : m0;
    tl.rows = rank ? rem - rows0 : rows0;
    b_row = GATE_UP ? tl.e * 2 * n_out + rank * n_out + tl.nt * GATE_UP_COLS
                    : tl.e * n_out + tl.nt * BN + rank * (BN / 2);
    return tl;
}

// The load side: every thread's A chunks (cp.async), thread 0's TMA half of
// B; the pair and k-step its next loads belong to.
template <bool GATE_UP>
struct Loader {
    static constexpr int STEP = THREADS / ROW_CHUNKS;  // 32 rows between a thread's chunks
    static constexpr int A_N = BM / STEP;              // 4
    const bf16* a_ptr[A_N];
    bool a_ok[A_N];
    int b_row;
    int j = 0, kt = 0;
    unsigned dst0;

    __device__ __forceinline__ void point_at(const Tile& tl, const bf16* __restrict__ a_src,
                                             const int* __restrict__ slot_token, int K, int row, int chunk) {
#pragma unroll
        for (int q = 0; q < A_N; ++q) {
            const int r = row + q * STEP;
            a_ok[q] = r < tl.rows;
            a_ptr[q] = a_src + source_row<GATE_UP>(slot_token, tl.m0 + r, a_ok[q]) * K + chunk * CHUNK;
        }
    }

    // Loads global step s (this pair's k-step kt) into its stage, then moves
    // on (to the next pair after the last k-step).
    template <typename Next>
    __device__ __forceinline__ void issue(int s, unsigned smem0, unsigned bars, const TmaDesc* wmap, int tid,
                                          unsigned rank, int k_tiles, int my_pairs, Next&& next_pair) {
        const int st = s % STAGES;
        const unsigned base = smem0 + (unsigned)(st * STAGE_BYTES);
        const int k0 = kt * BK;
#pragma unroll
        for (int q = 0; q < A_N; ++q) cp_async_16(base + dst0 + q * STEP * 128, a_ptr[q] + k0, a_ok[q]);
        if (tid == 0) {
            const unsigned full = bars + st * 8, empty = bars + (STAGES + st) * 8;
            // Both CTAs released the stage's previous step (s - STAGES).
            if (s >= STAGES) mbar_wait(empty, (unsigned)(s / STAGES - 1) & 1u);
            mbar_expect_tx(full, B_BYTES);
            tma_load_2d_multicast(base + A_BYTES + rank * B_HALF, wmap, k0, b_row, full, (1u << CLUSTER) - 1);
        }
        if (++kt == k_tiles) {
            kt = 0;
            if (++j < my_pairs) next_pair(j);
        }
    }
};

// One k-step of one warpgroup, as Wide's mma_step.
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

// The down epilogue through this warpgroup's EPI_BYTES, as Wide's store_y.
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

// The kernel body. out: act [rows][n_out] (GATE_UP) or y [rows][n_out]; w
// (in wmap): gate_up [E][2 n_out][K] or down [E][n_out][K].
template <bool GATE_UP>
__device__ __forceinline__ void mc_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                        bf16* __restrict__ out, const int* __restrict__ expert_offsets,
                                        const int* __restrict__ tile_offsets, int experts, int K, int n_out,
                                        const TmaDesc* wmap) {
    extern __shared__ unsigned char smem_raw[];
    constexpr int EPI = GATE_UP ? 0 : WARPGROUPS * EPI_BYTES;
    const unsigned raw0 = smem_u32(smem_raw);
    const unsigned smem0 = (raw0 + 1023u) & ~1023u;
    unsigned char* smem = smem_raw + (smem0 - raw0);
    const unsigned bars = smem0 + STAGES * STAGE_BYTES + EPI;  // full[st] at + 8 st, empty[st] at + 8 (STAGES + st)
    int* table = reinterpret_cast<int*>(smem + STAGES * STAGE_BYTES + EPI + BAR_BYTES);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wg = warp / 4, wq = warp % 4;
    const unsigned rank = cluster_rank();

    pair_table(tile_offsets, experts, table, tid);
    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(bars + st * 8, 1);                      // this CTA's expect_tx
            mbar_init(bars + (STAGES + st) * 8, CLUSTER);     // one release per CTA
        }
        mbar_init_fence();
    }
    cluster_sync();  // the peer's barriers exist before any multicast or remote arrival

    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int total = table[experts] * n_tiles;
    const int cid = (int)cluster_id(), ncl = (int)clusters();
    if (cid >= total) return;  // both CTAs of the cluster (same pairs)
    const int my_pairs = (total - cid + ncl - 1) / ncl;
    const int k_tiles = K / BK;
    const int steps = my_pairs * k_tiles;

    Loader<GATE_UP> ld;
    const int ld_row = tid / ROW_CHUNKS, ld_chunk = tid % ROW_CHUNKS;
    ld.dst0 = (unsigned)swizzle16<128>(ld_row, ld_chunk);
    auto next_pair = [&](int j) {
        const Tile tl =
            pair_tile<GATE_UP>(cid + j * ncl, n_tiles, table, expert_offsets, experts, (int)rank, n_out, ld.b_row);
        ld.point_at(tl, a_src, slot_token, K, ld_row, ld_chunk);
    };
    next_pair(0);
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < steps) ld.issue(s, smem0, bars, wmap, tid, rank, k_tiles, my_pairs, next_pair);
        cp_async_commit();
    }

    float acc[ACC];
#pragma unroll
    for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
    unsigned char* epi = smem + STAGES * STAGE_BYTES + wg * EPI_BYTES;

    // Step s of the pipeline: its loads landed (A: cp.async groups, B: the
    // full barrier), the CTA barrier (every wgmma up to s - 2 done here), the
    // release of step s - 2's stage to both CTAs, the MMA (MMA: a compile-time
    // choice), the loads of step s + AHEAD into the released stage.
    int s = 0;
#define HEADROOM_MC_K_STEP(MMA)                                                                                   \
    {                                                                                                             \
        const int st = s % STAGES;                                                                                \
        cp_async_wait<AHEAD - 1>();                                                                               \
        mbar_wait(bars + st * 8, (unsigned)(s / STAGES) & 1u);                                                    \
        fence_proxy_async();                                                                                      \
        __syncthreads();                                                                                          \
        if (tid == 0 && s >= 2) {                                                                                 \
            const unsigned empty = bars + (STAGES + (s - 2) % STAGES) * 8;                                        \
            mbar_arrive_cluster(empty, 0);                                                                        \
            mbar_arrive_cluster(empty, 1);                                                                        \
        }                                                                                                         \
        if (MMA) mma_step(acc, smem0 + (unsigned)(st * STAGE_BYTES), wg, kt);                                    \
        if (s + AHEAD < steps) ld.issue(s + AHEAD, smem0, bars, wmap, tid, rank, k_tiles, my_pairs, next_pair); \
        cp_async_commit();                                                                                        \
        if (MMA) {                                                                                                \
            wgmma_wait<1>();                                                                                      \
            fence_operands(acc);                                                                                  \
        }                                                                                                         \
        ++s;                                                                                                      \
    }

    for (int c_j = 0; c_j < my_pairs; ++c_j) {
        int b_row_unused;
        const Tile ct =
            pair_tile<GATE_UP>(cid + c_j * ncl, n_tiles, table, expert_offsets, experts, (int)rank, n_out, b_row_unused);
        // Warpgroup-uniform, outside the k-loops (the loops' CTA barriers
        // are the same barrier 0 reached from either loop, warp by warp).
        if (ct.rows > wg * WG_ROWS) {
            for (int kt = 0; kt < k_tiles; ++kt) HEADROOM_MC_K_STEP(true)
            wgmma_wait<0>();
            fence_operands(acc);
            if (GATE_UP) {
                store_act(acc, out, ct.m0, ct.rows, wg * WG_ROWS + wq * 16, ct.nt * GATE_UP_COLS, n_out, lane);
            } else {
                store_y(acc, out, ct, n_out, wg, wq, lane, epi);
            }
        } else {
            for (int kt = 0; kt < k_tiles; ++kt) HEADROOM_MC_K_STEP(false)
        }
    }
#undef HEADROOM_MC_K_STEP
    cp_async_wait<0>();
    cluster_sync();  // the peer's last remote arrivals landed before this CTA leaves
}

// The launcher's signatures: Wide's (moe_gemm_common.cuh), then the weights'
// tensor map by value.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_gate_up_mc_bf16(const bf16* __restrict__ x, const int* __restrict__ slot_token, bf16* __restrict__ act,
                         const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets, int experts,
                         int hidden, int inter, const __grid_constant__ TmaDesc gate_up) {
    mc_gemm<true>(x, slot_token, act, expert_offsets, tile_offsets, experts, hidden, inter, &gate_up);
}
extern "C" __global__ void __launch_bounds__(THREADS, 1)
moe_gemm_down_mc_bf16(const bf16* __restrict__ act, bf16* __restrict__ y, const int* __restrict__ expert_offsets,
                      const int* __restrict__ tile_offsets, int experts, int inter, int hidden,
                      const __grid_constant__ TmaDesc down) {
    mc_gemm<false>(act, nullptr, y, expert_offsets, tile_offsets, experts, inter, hidden, &down);
}

}  // namespace headroom_moe_mc
