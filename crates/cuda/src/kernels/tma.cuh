// mbarriers and TMA tile loads (sm_90a only), put before the kernels that use
// them (after async_copy.cuh): each source brings the names into its own
// namespace with using-declarations. Addresses are 32-bit shared-window
// addresses of the executing CTA (smem_u32).
//   TmaDesc                       a CUtensorMap as a kernel parameter (pass it
//                                 `const __grid_constant__`, by value);
//   mbar_init(bar, n)             an mbarrier expecting n arrivals a phase;
//   mbar_init_fence()             the inits visible to the other threads and
//                                 the TMA unit (then sync; .cluster is the
//                                 fence's only scope);
//   mbar_expect_tx(bar, bytes)    one arrival that also expects `bytes` of
//                                 TMA writes in the current phase;
//   mbar_arrive(bar)              one arrival;
//   cp_async_arrive_noinc(bar)    one arrival once this thread's cp.async
//                                 copies so far have landed (counted in
//                                 the barrier's expected arrivals);
//   mbar_wait(bar, parity)        spins until the phase of that parity is
//                                 complete (the default acquire.cta);
//   tma_load_2d(dst, desc, c0, c1, bar)   the box at (c0 inner, c1 outer) of
//                                 desc to dst, its bytes to bar.
#ifndef HEADROOM_TMA_CUH
#define HEADROOM_TMA_CUH

namespace headroom_tma {

struct alignas(64) TmaDesc {
    unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
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
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* desc, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(desc)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

}  // namespace headroom_tma

#endif  // HEADROOM_TMA_CUH
