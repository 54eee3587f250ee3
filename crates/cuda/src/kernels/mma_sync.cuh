// The warp-level tensor-core product the bf16 kernels share (sm_80+):
// mma.sync m16n8k16 with bf16 A and B and f32 accumulators, in place,
// c[0..4] += A B. A is its fragment's four 32-bit registers (row-major, PTX's
// layout), B its two (column-major); three call forms of one instruction.
// Put before the kernels that use it (the MoE grouped GEMMs and decode
// experts, the GDN prefill kernels: their sources.rs).

__device__ __forceinline__ void mma_bf16_16816(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_bf16_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    mma_bf16_16816(c, a[0], a[1], a[2], a[3], b0, b1);
}

__device__ __forceinline__ void mma_bf16_16816(float* c, const unsigned* a, const unsigned* b) {
    mma_bf16_16816(c, a[0], a[1], a[2], a[3], b[0], b[1]);
}
