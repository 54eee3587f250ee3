// The warp-specialised grouped GEMMs' shared pieces (moe_grouped_gemm_ws.cu,
// bf16, and moe_grouped_gemm_ws_fp8.cu): the warpgroups' named barriers,
// cp.async arrivals on an mbarrier, the tile table in shared memory, the
// producer warpgroup (its unit counter, the tile it hands the MMA warpgroups
// beside a unit's first stage, its loads into the stage ring) and the MMA
// warpgroups' waits and releases of a stage. Compiled in front of both
// sources, after async_copy.cuh, tma.cuh, moe_tile_list.cuh and
// moe_gemm_common.cuh; each brings the names into its namespace with
// using-declarations. As moe_wgmma_common.cuh's helpers these keep the
// kernels' generated code byte for byte.
#ifndef HEADROOM_MOE_WS_COMMON_CUH
#define HEADROOM_MOE_WS_COMMON_CUH

namespace headroom_moe_ws_common {

using headroom_async::cp_async_16;
using headroom_async::smem_u32;
using headroom_async::cp_async_wait;
using headroom_async::fence_proxy_async;
using headroom_moe_common::source_row;
using headroom_moe_common::swizzle16;
using headroom_moe_tiles::Tile;
using headroom_moe_tiles::expert_of;
using headroom_tma::TmaDesc;
using headroom_tma::mbar_arrive;
using headroom_tma::mbar_expect_tx;
using headroom_tma::mbar_init;
using headroom_tma::mbar_init_fence;
using headroom_tma::mbar_wait;
using headroom_tma::tma_load_2d;
// One arrival on a full barrier when this thread's cp.asyncs so far have
// landed (the arrival is one of the count set at init: .noinc).
using headroom_tma::cp_async_arrive_noinc;

// setmaxnreg's split: checked against wgmma_sync.cuh's cta_registers.
using headroom_async::cta_registers;

// MMA warpgroup wg's own barrier (ids 1 and 2).
__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory"); }

// table[e] = row tiles of the experts before e; every thread.
template <int THREADS>
__device__ __forceinline__ void tile_table(const int* __restrict__ tile_offsets, int experts, int* table, int tid) {
    __shared__ int warp_sums[THREADS / 32];
    const int lane = tid % 32, warp = tid / 32;
    int v = 0;
    if (tid < experts) v = tile_offsets[tid + 1] - tile_offsets[tid];
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

// The producer warpgroup's own barrier (ids 1 and 2 are the MMA warpgroups').
__device__ __forceinline__ void producer_barrier() { asm volatile("bar.sync 3, 128;\n" ::: "memory"); }

// The next unit for the producer warpgroup: thread 0 takes it from sched[0],
// all 128 threads get it through next_unit.
__device__ __forceinline__ int take_unit(int* __restrict__ sched, volatile int* next_unit, int pt) {
    if (pt == 0) *next_unit = atomicAdd(sched, 1);
    producer_barrier();
    const int u = *next_unit;
    producer_barrier();  // every thread has read it before thread 0 writes the next
    return u;
}

// The tile of the unit whose first step is in stage st (the producer's
// thread 0 writes it before the arrive that completes the stage).
__device__ __forceinline__ void put_tile(volatile int* stage_tile, int st, const Tile& tl) {
    volatile int* t = stage_tile + st * 4;
    t[0] = tl.e;
    t[1] = tl.m0;
    t[2] = tl.rows;
    t[3] = tl.nt;
}
__device__ __forceinline__ Tile get_tile(const volatile int* stage_tile, int st) {
    const volatile int* t = stage_tile + st * 4;
    Tile tl;
    tl.e = t[0];
    tl.m0 = t[1];
    tl.rows = t[2];
    tl.nt = t[3];
    return tl;
}


// The rows and column tile of work unit p (a BM-row tile of an expert, its
// last tile the rest, and one of n_tiles column tiles).
template <int BM>
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

// The first weight row of TMA box h of unit tl's B, in units of BN weight
// rows (both ws kernels): gate+up h = 0 the unit's BN / 2 gate rows (its
// BN / 2 act columns), h = 1 their up rows; down h = 0, 1 the two halves of
// its BN y rows.
template <bool GATE_UP, int BN>
__device__ __forceinline__ int b_row(const Tile& tl, int h, int n_out) {
    return GATE_UP ? tl.e * 2 * n_out + h * n_out + tl.nt * (BN / 2) : tl.e * n_out + tl.nt * BN + h * (BN / 2);
}

// The producer warpgroup: every k-step of the units this CTA takes into the
// stage ring, then the end stage (pt: the thread's index in the warpgroup).
// L, the kernel's layout: A's element type (Elem) and its BK elements a stage
// row of 128 bytes (CHUNK a 16-byte chunk, ROW_CHUNKS a row), the A chunks a
// producer thread loads a step (A_ROWS_THREAD, A_ROW_STEP rows apart), the
// stage ring (STAGES of STAGE_BYTES: A_BYTES of A, then B_BYTES of B in two
// TMA boxes of B_HALF: B_BYTES / 128 weight rows of 128 bytes: b_row's BN),
// and the weights' map's K coordinate as A's element index / MAP_DIV.
template <bool GATE_UP, typename L>
__device__ __forceinline__ void produce(const typename L::Elem* __restrict__ a_src, const int* __restrict__ slot_token,
                                        const int* __restrict__ expert_offsets, const int* table, int experts,
                                        int K, int n_out, int n_tiles, int total, int* __restrict__ sched,
                                        volatile int* next_unit, volatile int* stage_tile, unsigned smem0,
                                        unsigned bars, const TmaDesc* wmap, int pt) {
    const int sub = pt / L::ROW_CHUNKS, chunk = pt % L::ROW_CHUNKS;  // rows sub + A_ROW_STEP i
    const unsigned dst0 = (unsigned)swizzle16<128>(sub, chunk);
    const int k_tiles = K / L::BK;
    int s = 0;
    for (int u = take_unit(sched, next_unit, pt); u < total; u = take_unit(sched, next_unit, pt)) {
        const Tile tl = unit_tile<L::BM>(u, n_tiles, table, expert_offsets, experts);
        const typename L::Elem* a_ptr[L::A_ROWS_THREAD];
        bool a_ok[L::A_ROWS_THREAD];
#pragma unroll
        for (int i = 0; i < L::A_ROWS_THREAD; ++i) {
            const int r = sub + i * L::A_ROW_STEP;
            a_ok[i] = r < tl.rows;
            a_ptr[i] = a_src + source_row<GATE_UP>(slot_token, tl.m0 + r, a_ok[i]) * K + chunk * L::CHUNK;
        }
        constexpr int B_ROWS = L::B_BYTES / 128;  // a stage row is 128 bytes in both kernels
        const int b0 = b_row<GATE_UP, B_ROWS>(tl, 0, n_out), b1 = b_row<GATE_UP, B_ROWS>(tl, 1, n_out);
        for (int kt = 0; kt < k_tiles; ++kt, ++s) {
            const int st = s % L::STAGES;
            const unsigned full = bars + st * 8, empty = bars + (L::STAGES + st) * 8;
            const unsigned base = smem0 + (unsigned)(st * L::STAGE_BYTES);
            const int k0 = kt * L::BK;
            // Both MMA warpgroups released step s - STAGES.
            if (s >= L::STAGES) mbar_wait(empty, (unsigned)(s / L::STAGES - 1) & 1u);
            if (pt == 0) {
                if (kt == 0) put_tile(stage_tile, st, tl);  // before the arrive that completes the stage
                mbar_expect_tx(full, L::B_BYTES);
                tma_load_2d(base + L::A_BYTES, wmap, k0 / L::MAP_DIV, b0, full);
                tma_load_2d(base + L::A_BYTES + L::B_HALF, wmap, k0 / L::MAP_DIV, b1, full);
            }
#pragma unroll
            for (int i = 0; i < L::A_ROWS_THREAD; ++i)
                cp_async_16(base + dst0 + i * L::A_ROW_STEP * 128, a_ptr[i] + k0, a_ok[i]);
            cp_async_arrive_noinc(full);
        }
    }
    // The end: a stage whose tile has expert -1 (no data, all 129 arrivals).
    const int st = s % L::STAGES;
    const unsigned full = bars + st * 8, empty = bars + (L::STAGES + st) * 8;
    if (s >= L::STAGES) mbar_wait(empty, (unsigned)(s / L::STAGES - 1) & 1u);
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
template <int STAGES>
__device__ __forceinline__ void wait_full(unsigned bars, int s) {
    mbar_wait(bars + (s % STAGES) * 8, (unsigned)(s / STAGES) & 1u);
    fence_proxy_async();
}

// This warp is done with step s's stage (lane 0 of each MMA warp arrives:
// four arrivals an MMA warpgroup a phase). Not one thread a warpgroup: a
// warpgroup's leader that skips a unit (skip_unit, no wgmma to gather its
// four warps) could then release steps its other warps had not yet waited
// for, the producer refill those stages, and a lagging warp wait on a parity
// that had come round again: the CTA deadlocked (docs/perf/cuda-fp8.md,
// session 35).
template <int STAGES>
__device__ __forceinline__ void release(unsigned bars, int s, bool warp_leader) {
    if (warp_leader) mbar_arrive(bars + (STAGES + s % STAGES) * 8);
}

// A warp-specialised CTA's shared memory: the stage ring (from smem0, the
// 1024-byte aligned base), EPI bytes of epilogue buffers, the mbarriers
// (full[st] at bars + 8 st, empty[st] at bars + 8 (STAGES + st)) and the tile
// table; every thread gets them after the table is filled and the mbarriers
// initialised (full: FULL_ARRIVALS a phase, empty: one an MMA warp).
struct Ring {
    unsigned smem0;
    unsigned char* smem;  // the generic address of smem0
    unsigned bars;
    int* table;
};

template <int STAGES, int STAGE_BYTES, int EPI, int THREADS, int FULL_ARRIVALS, int MMA_WARPGROUPS>
__device__ __forceinline__ Ring ring_begin(unsigned char* smem_raw, const int* __restrict__ tile_offsets,
                                           int experts, int tid) {
    Ring r;
    const unsigned raw0 = smem_u32(smem_raw);
    r.smem0 = (raw0 + 1023u) & ~1023u;
    r.smem = smem_raw + (r.smem0 - raw0);
    r.bars = r.smem0 + STAGES * STAGE_BYTES + EPI;
    r.table = reinterpret_cast<int*>(r.smem + STAGES * STAGE_BYTES + EPI + 2 * STAGES * 8);
    tile_table<THREADS>(tile_offsets, experts, r.table, tid);
    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(r.bars + st * 8, FULL_ARRIVALS);
            mbar_init(r.bars + (STAGES + st) * 8, MMA_WARPGROUPS * 4);
        }
        mbar_init_fence();
    }
    __syncthreads();
    return r;
}

// A MMA warpgroup with no row of the unit that starts at step s (its first
// step waited for): each of the unit's k_tiles steps released; the step after.
template <int STAGES>
__device__ __forceinline__ int skip_unit(unsigned bars, int s, int k_tiles, bool warp_leader) {
    release<STAGES>(bars, s, warp_leader);
    ++s;
    for (int kt = 1; kt < k_tiles; ++kt, ++s) {
        wait_full<STAGES>(bars, s);
        release<STAGES>(bars, s, warp_leader);
    }
    return s;
}

}  // namespace headroom_moe_ws_common

#endif  // HEADROOM_MOE_WS_COMMON_CUH
