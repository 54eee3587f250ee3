// The weight-streaming grouped GEMMs on Hopper warpgroup MMA (sm_90a only);
// the body is moe_stream_common.cuh (read its header), concatenated before
// this file. Each of the two warpgroups issues wgmma m64n32k16 per k16 with
// both operands read by the tensor cores from the stage (A: its 64 weight
// rows, B: the pass's 32 rows, SW128 K-major), so the 8 warps no longer each
// read the rows' fragments through ldmatrix (the mma.sync form's shared-memory
// traffic grows with the rows; this one's does not). The accumulator layout of
// m64nN is the m16n8 fragment layout per warp quarter, which the common
// epilogue expects.

namespace headroom_moe_stream {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Pins the accumulators at this point (no read or write of them moves across).
__device__ __forceinline__ void fence_operands(float (&d)[ACC]) {
#pragma unroll
    for (int q = 0; q < ACC; ++q) asm volatile("" : "+f"(d[q])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ unsigned long long desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)((lbo >> 4) & 0x3FFF) << 16;
    d |= (unsigned long long)((sbo >> 4) & 0x3FFF) << 32;
    d |= 1ull << 62;
    return d;
}

static_assert(NMAX == 32 && ACC == 16, "wgmma m64n32: 16 accumulators a thread");
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[ACC], unsigned long long da, unsigned long long db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, 1, 1, 1, 0, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db));
}

// One stage on wgmma: warpgroup warp/4 multiplies its 64 weight rows by the
// pass's 32 rows (zero-filled past the pass's end), 4 k16 steps, waited for
// before returning (the stage is refilled after the next barrier).
struct Wgmma {
    static constexpr bool ASYNC_PROXY = true;
    __device__ __forceinline__ static void step(float (&acc)[ACC], unsigned sw, unsigned st, int warp, int,
                                                int) {
        constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
        const unsigned sa = sw + (unsigned)(warp / 4) * 64 * 128;
        fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            wgmma_m64n32k16(acc, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(st + ks * 32, 16, SBO));
        }
        wgmma_commit();
        wgmma_wait_all();
        fence_operands(acc);
    }
};

extern "C" __global__ void __launch_bounds__(THREADS, 2)
moe_gemm_gate_up_stream_wgmma_bf16(const bf16* __restrict__ x, const int* __restrict__ slot_token,
                                   const bf16* __restrict__ gate_up, bf16* __restrict__ act,
                                   const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets,
                                   int experts, int hidden, int inter) {
    stream_gemm<true, Wgmma>(x, slot_token, gate_up, act, expert_offsets, tile_offsets, experts, hidden, inter);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
moe_gemm_down_stream_wgmma_bf16(const bf16* __restrict__ act, const bf16* __restrict__ down, bf16* __restrict__ y,
                                const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets,
                                int experts, int inter, int hidden) {
    stream_gemm<false, Wgmma>(act, nullptr, down, y, expert_offsets, tile_offsets, experts, inter, hidden);
}

}  // namespace headroom_moe_stream
