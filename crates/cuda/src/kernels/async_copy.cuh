// cp.async staging of tiles in shared memory (sm_80+), put before the kernels
// that copy tiles with it (the MoE grouped GEMMs, the fused attention
// kernels): each source brings the names into its own namespace with
// using-declarations and keeps its own variants where they differ (other
// cache hints or memory clobbers).
//   smem_u32(p)              the shared-window address of a generic pointer;
//   cp_async_16(dst, src, v) one 16-byte global -> shared copy, zero-filled
//                            (0 bytes read) when !v;
//   cp_async_commit()        closes the thread's current copy group;
//   cp_async_wait<N>()       returns once at most N groups are in flight.
// The Hopper warpgroup-MMA wrappers are in wgmma_sync.cuh (sm_90a sources only).
#ifndef HEADROOM_ASYNC_COPY_CUH
#define HEADROOM_ASYNC_COPY_CUH

namespace headroom_async {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;  // 0 bytes read: the destination is zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

}  // namespace headroom_async

#endif  // HEADROOM_ASYNC_COPY_CUH
