// The warp-specialised grouped GEMMs' shared pieces (moe_grouped_gemm_ws.cu,
// bf16, and moe_grouped_gemm_ws_fp8.cu): the warpgroups' named barriers,
// cp.async arrivals on an mbarrier, the tile table in shared memory, the
// producer's unit counter and the tile it hands the MMA warpgroups beside a
// unit's first stage. Compiled in front of both sources, after
// moe_tile_list.cuh; each brings the names into its namespace with
// using-declarations. As moe_wgmma_common.cuh's helpers these keep the
// kernels' generated code byte for byte.
#ifndef HEADROOM_MOE_WS_COMMON_CUH
#define HEADROOM_MOE_WS_COMMON_CUH

namespace headroom_moe_ws_common {

using headroom_moe_tiles::Tile;

// MMA warpgroup wg's own barrier (ids 1 and 2).
__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory"); }

// One arrival on bar when this thread's cp.asyncs so far have landed (the
// arrival is one of the count set at init: .noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

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

}  // namespace headroom_moe_ws_common

#endif  // HEADROOM_MOE_WS_COMMON_CUH
