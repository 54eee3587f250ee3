// Hopper warpgroup-MMA ordering (sm_90a only), put before the kernels that
// issue wgmma (after async_copy.cuh): each source brings the names into its
// own namespace with using-declarations.
//   fence_proxy_async()      this thread's generic-proxy shared-memory writes
//                            made visible to the tensor cores (async proxy);
//   wgmma_fence()            orders register accesses before the next wgmma;
//   wgmma_commit()           closes the warpgroup's current wgmma group;
//   wgmma_wait<N>()          returns once at most N wgmma groups are pending;
//   fence_operands(d)        pins accumulator registers at this point (no read
//                            or write of them moves across);
//   desc_sw128(a, lbo, sbo)  the shared-memory matrix descriptor of a tile at
//                            a in the 128-byte swizzle layout;
//   cta_registers(threads)   the registers setmaxnreg moves between a
//                            warp-specialised CTA's warpgroups.
#ifndef HEADROOM_WGMMA_SYNC_CUH
#define HEADROOM_WGMMA_SYNC_CUH

namespace headroom_async {

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
    for (int q = 0; q < N; ++q) asm volatile("" : "+f"(d[q])::"memory");
}
// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ unsigned long long desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)((lbo >> 4) & 0x3FFF) << 16;
    d |= (unsigned long long)((sbo >> 4) & 0x3FFF) << 32;
    d |= 1ull << 62;
    return d;
}

// The registers setmaxnreg moves between a CTA's warpgroups: the CTA's own
// allocation — the launch's count a thread (65536 / threads down to a
// multiple of 8: 168 for 384) times the threads, not the SM's 64 Ki. An .inc
// asking for more than the .decs freed waits for ever (session 39: a
// producer at 48 beside MMA warpgroups at 232 hung), so each warp-specialised
// kernel asserts its split against this.
__host__ __device__ constexpr int cta_registers(int threads) { return 65536 / threads / 8 * 8 * threads; }

}  // namespace headroom_async

#endif  // HEADROOM_WGMMA_SYNC_CUH
