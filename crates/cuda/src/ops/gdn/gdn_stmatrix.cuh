// gdn_stmatrix.cuh: the scans' transposed tile store (gdn_chunked.cu,
// gdn_chunked_full.cu), apart from gdn_common.cuh because stmatrix needs
// sm_90 and the prep, which shares gdn_common.cuh, runs on older GPUs
// (KernelSource::min_sm keys on the instruction's text). sources.rs puts it
// after gdn_common.cuh, inside `namespace gdn`.

// Transposed store of four 8x8 bf16 matrices from mma C-fragment halves
// (packed bf16 pairs): lanes 8i..8i+7 address rows 0..7 of matrix i, which
// receive its columns (stmatrix.trans; rows 16-byte aligned).
__device__ __forceinline__ void stsm_x4_trans(bf16* p, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr(p)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
