// The weight-streaming grouped GEMMs on mma.sync (any sm_80+ GPU); the body
// is moe_stream_common.cuh (read its header), concatenated before this file.

namespace headroom_moe_stream {

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One stage on mma.sync m16n8k16: A = the warp's 16 weight rows (ldmatrix
// from the swizzled stage), B = the pass's rows in n8 blocks, blocks past
// n_rows skipped.
struct MmaSync {
    static constexpr bool ASYNC_PROXY = false;
    __device__ __forceinline__ static void step(float (&acc)[ACC], unsigned sw, unsigned st, int warp, int lane,
                                                int n_rows) {
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            unsigned af[4];
            ldmatrix_x4(af, sw + swz(warp * 16 + (lane % 16), ks * 2 + lane / 16));
#pragma unroll
            for (int b = 0; b < NB; b += 2) {
                if (b * 8 >= n_rows) break;
                unsigned t[4];
                ldmatrix_x4(t, st + swz(b * 8 + (lane % 8) + (lane / 16) * 8, ks * 2 + (lane / 8) % 2));
                mma_bf16(acc + 4 * b, af, t[0], t[1]);
                if ((b + 1) * 8 < n_rows) mma_bf16(acc + 4 * (b + 1), af, t[2], t[3]);
            }
        }
    }
};

extern "C" __global__ void __launch_bounds__(THREADS, 2)
moe_gemm_gate_up_stream_bf16(const bf16* __restrict__ x, const int* __restrict__ slot_token,
                             const bf16* __restrict__ gate_up, bf16* __restrict__ act,
                             const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets,
                             int experts, int hidden, int inter) {
    stream_gemm<true, MmaSync>(x, slot_token, gate_up, act, expert_offsets, tile_offsets, experts, hidden, inter);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
moe_gemm_down_stream_bf16(const bf16* __restrict__ act, const bf16* __restrict__ down, bf16* __restrict__ y,
                          const int* __restrict__ expert_offsets, const int* __restrict__ tile_offsets,
                          int experts, int inter, int hidden) {
    stream_gemm<false, MmaSync>(act, nullptr, down, y, expert_offsets, tile_offsets, experts, inter, hidden);
}

}  // namespace headroom_moe_stream
