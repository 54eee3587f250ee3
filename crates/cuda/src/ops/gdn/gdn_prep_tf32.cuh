// Gated delta rule, chunked prep: the f32-accurate tensor-core helpers of
// the (I + A)^-1 inverse (3xTF32: hi/lo split operands on mma.sync
// m16n8k8 TF32). sources.rs places this text between gdn_common.cuh and
// gdn_chunk_prep.cu (inside `namespace gdn`), which uses it.

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma1688(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc (16 x 8) += A[am0.., ak0..] (16 x 16) * B[bk0.., bn0..] (16 x 8), both
// f32 row-major in shared memory, 3xTF32 (hi/lo split of each operand; the
// inverse's 2x2 block doubling: one n8 half of a 16x16 block per warp). The
// hi.hi products and the two correction terms go to separate accumulators
// (dependent chains of 2 mma instead of 6), added at the end.
__device__ __forceinline__ void mm16x8_f32_split(float* acc, const float* A, int lda, int am0, int ak0,
                                                 const float* B, int ldb, int bk0, int bn0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    float hi[4] = {0.f, 0.f, 0.f, 0.f}, lo1[4] = {0.f, 0.f, 0.f, 0.f}, lo2[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
        const float* pa = A + (am0 + g) * lda + ak0 + 8 * ks + t;
        const float a[4] = {pa[0], pa[8 * lda], pa[4], pa[8 * lda + 4]};
        const float* pb = B + (bk0 + 8 * ks + t) * ldb + bn0 + g;
        const float b[2] = {pb[0], pb[4 * ldb]};
        unsigned ah[4], al[4], bh[2], bl[2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            ah[i] = to_tf32(a[i]);
            al[i] = to_tf32(a[i] - __uint_as_float(ah[i]));
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            bh[i] = to_tf32(b[i]);
            bl[i] = to_tf32(b[i] - __uint_as_float(bh[i]));
        }
        mma1688(lo1, al, bh);
        mma1688(lo2, ah, bl);
        mma1688(hi, ah, bh);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += hi[i] + (lo1[i] + lo2[i]);
}

// Stores -acc (16 x 8 fragment) at D[r0.., c0..] (f32, row stride ld).
__device__ __forceinline__ void store16x8_neg(float* D, int ld, int r0, int c0, const float* acc, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
        *reinterpret_cast<float2*>(D + (r0 + g + 8 * hf) * ld + c0 + 2 * t) =
            make_float2(-acc[2 * hf], -acc[2 * hf + 1]);
}

