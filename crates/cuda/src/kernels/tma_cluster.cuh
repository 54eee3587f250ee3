// Thread-block clusters, mbarriers and TMA tile loads (sm_90a only), put
// before the kernels that use them (after async_copy.cuh): each source brings
// the names into its own namespace with using-declarations. Addresses are
// 32-bit shared-window addresses of the executing CTA (smem_u32).
//   TmaDesc                       a CUtensorMap as a kernel parameter (pass it
//                                 `const __grid_constant__`, by value);
//   cluster_rank(), cluster_id(), clusters()   this CTA's rank in its cluster,
//                                 its cluster's index and the grid's clusters;
//   cluster_sync()                every thread of every CTA of the cluster;
//   mbar_init(bar, n)             an mbarrier expecting n arrivals a phase;
//   mbar_init_fence()             the inits visible cluster-wide (then sync);
//   mbar_expect_tx(bar, bytes)    one arrival that also expects `bytes` of
//                                 TMA writes in the current phase;
//   mbar_wait(bar, parity)        spins until the phase of that parity is
//                                 complete (the default acquire.cta: with
//                                 .cluster ptxas adds an L1 invalidation,
//                                 CCTL.IVALL, to every wait);
//   mbar_arrive_cluster(bar, cta) one arrival on the mbarrier at the same
//                                 offset in CTA `cta` of the cluster (cta may
//                                 be this one; the default release.cta: a
//                                 release.cluster arrive is a MEMBAR.GPU).
//                                 Enough to release a stage whose readers
//                                 (wgmma) are complete: the overwrite waits
//                                 for reads, not for writes to be seen;
//   tma_load_2d_multicast(dst, desc, c0, c1, bar, mask)   the box at
//                                 (c0 inner, c1 outer) of desc to dst and its
//                                 bytes to bar, at the same offsets in every
//                                 CTA of the cluster named in mask.
#ifndef HEADROOM_TMA_CLUSTER_CUH
#define HEADROOM_TMA_CLUSTER_CUH

namespace headroom_tma {

struct alignas(64) TmaDesc {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_id() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned clusters() {
    unsigned r;
    asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra MBAR_WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}

__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* desc, int c0, int c1,
                                                      unsigned bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(desc)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
}

}  // namespace headroom_tma

#endif  // HEADROOM_TMA_CLUSTER_CUH
