// Gated delta rule, chunked form: what the prep kernel (gdn_chunk_prep.cu)
// and the scans (gdn_chunked.cu, gdn_chunked_full.cu) share — the tile
// constants, the sequence table and the fragment / cp.async helpers.
// sources.rs prepends this text to each source (NVRTC compiles each as one
// unit), so one copy serves all; it opens `namespace gdn`, which each file
// closes.

#include <cuda_bf16.h>

namespace gdn {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;

constexpr int DK = 128;          // key head dim
constexpr int DV = 128;          // value head dim
constexpr int BT = 64;           // chunk rows
constexpr int MAX_SEQS = 128;    // sequences per launch (kernel parameter table)
constexpr int FAC = 132;         // floats per (chunk, head): qf[64], kf[64], exp(G_L), pad

// Padded shared-memory row strides (bf16 elements): rows land on distinct banks.
constexpr int LD128 = DK + 8;    // 136
constexpr int LD64 = BT + 8;     // 72

struct SeqTable {
    int n;                  // sequences in this launch
    int total_chunks;       // sum of ceil(rows / BT)
    int slot[MAX_SEQS];
    int first[MAX_SEQS];    // first row in the batch
    int rows[MAX_SEQS];
    int chunk0[MAX_SEQS];   // index of the sequence's first chunk in the scratch
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Fragments by ldmatrix (one instruction for 4 or 2 8x8 pieces).

// A fragment (16 x 16) of a row-major [m][k] tile with row stride ld
// (ldmatrix: rows 16-byte aligned, ld * 2 a multiple of 16).
__device__ __forceinline__ void frag_a(unsigned* a, const bf16* s, int ld, int m0, int k0, int lane) {
    const bf16* p = s + (m0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_addr(p)));
}

// B fragment (16 x 8) of a tile stored [n][k] (k contiguous) with row stride ld.
__device__ __forceinline__ void frag_b(unsigned* b, const bf16* s, int ld, int n0, int k0, int lane) {
    const bf16* p = s + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}


__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// Two floats as a packed bf16 pair (round to nearest even), low half first.
__device__ __forceinline__ unsigned pack_bf16(float a, float b) {
    bf162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<unsigned*>(&v);
}
