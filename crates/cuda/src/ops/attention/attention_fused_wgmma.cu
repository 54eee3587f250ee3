// Fused prefill attention on Hopper warpgroup MMA (wgmma, sm_90a).
//
// Same semantics and launch contract as attention_fused.cu (head-major
// q/out [q_heads][q_len][D], k/v [kv_heads][kv_len][D], lower-right causal
// with history, integer GQA, f32 online softmax, NaN propagates); grid
// (ceil(q_len / BLOCK_M), q_heads), CTA of 128 threads per warpgroup.
//
// Structure: one warpgroup per CTA (two CTAs per SM), owning 64 query rows. S = Q.K^T is
// D/16 wgmma m64n64k16 with both operands read by the tensor cores straight
// from shared memory (K-major, 128-byte swizzle); O += P.V is BLOCK_N/16
// wgmma m64nDk16 with P from registers (the S accumulator re-packed to
// 16 bits) and V from shared memory as an N-major operand. Tiles live in
// shared memory as [D/64 column blocks][rows][64 elements], 16-byte chunks
// XOR-swizzled by (row mod 8): the canonical SW128 layout of the descriptors.
// K/V streaming (cp.async), tile order, masking and softmax follow the
// mma.sync kernel: the wgmma accumulator fragment of each warp has the same
// register layout as that kernel's m16n8 fragments. No global workspace.

// The shared pieces (tiles, wrappers, loader, combine) are in wgmma_common.cuh; the
// key-tile loop and the split partial's store in attention_tiles.cuh.

namespace headroom_wg {

// Split-KV and packed-GQA parameters (all three plain prefill when
// splits == 1, q_period == q_len and kv_stride == kv_len * D):
//  kv_stride  elements between two KV heads' rows (a cache slot's capacity * D).
//  q_period   query positions repeat every q_period rows: the rows of a head are
//             the query group's heads stacked (q_len = group * q_period), so one
//             CTA serves a whole GQA group of a short chunk; history = kv_len - q_period.
//  splits     CTAs per (query tile, head) along the keys (blockIdx.z); with
//             splits > 1 each writes its f32 output normalised by its own sum
//             and that sum's log2-sum-exp to part_o / part_lse, and
//             attn_split_combine makes the result.
template <int D, typename T>
__device__ __forceinline__ void attn_fused_prefill(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
    int q_len, int kv_len, int q_heads, int kv_heads, float scale_log2, long long kv_stride,
    int q_period, int splits, float* __restrict__ part_o, float* __restrict__ part_lse) {
    static_assert(D == 64 || D == 128 || D == 256, "wgmma N is the head dim");
    constexpr int D_TILES = D / 8;         // n8 blocks of O per thread

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;
    // K, then V right after it.
    const unsigned sK = sQ + Smem<D>::Q_BYTES;
    const unsigned sV = sK + Smem<D>::KV_BYTES;

    const int tid = threadIdx.x;
    const int warp = tid / 32;              // 0..3: the one warpgroup
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t4 = lane % 4;

    const int num_m_blocks = (q_len + BLOCK_M - 1) / BLOCK_M;
    // CTAs start in linear block order: longest query blocks of every head
    // first, so the short ones fill the tail of the grid (grid = (m blocks, q_heads)).
    const int lin = blockIdx.y * gridDim.x + blockIdx.x;
    const int m_block = num_m_blocks - 1 - lin / q_heads;
    const int head = lin % q_heads;
    const int kv_head = head / (q_heads / kv_heads);
    const int history = kv_len - q_period;
    const int m0 = m_block * BLOCK_M;
    const int split = blockIdx.z;

    const T* gQ = q + ((size_t)head * q_len + m0) * D;
    const T* gK = k + (size_t)kv_head * kv_stride;
    const T* gV = v + (size_t)kv_head * kv_stride;
    T* gO = out + ((size_t)head * q_len + m0) * D;

    const int last_row = min(m0 + BLOCK_M, q_len) - 1;
    // This split's key tiles [n_lo, n_blocks): an even share of the tile's keys.
    ATTN_SPLIT_KEY_TILES(q_period);
    if (n_lo >= n_blocks) {
        // No keys for this split: an empty partial (zero output, log-sum -inf).
        const int rows = min(BLOCK_M, q_len - m0);
        const size_t prow = ((size_t)split * q_heads + head) * q_len + m0;
        for (int i = threadIdx.x; i < rows * D; i += THREADS) part_o[prow * D + i] = 0.f;
        for (int i = threadIdx.x; i < rows; i += THREADS) part_lse[prow + i] = -INFINITY;
        return;
    }

    load_tile<D, BLOCK_M>(sQ, gQ, q_len - m0, tid);

    const int warp_row0 = warp * 16;  // = wg * 64 + (warp % 4) * 16
    const int pos0 = history + (m0 + warp_row0 + g) % q_period;
    const int pos1 = history + (m0 + warp_row0 + g + 8) % q_period;

    float acc_o[D / 2];
    float row_max[2], row_sum[2];
    attend_key_tiles<D, T>(sQ, sK, sV, gK, gV, [](int nb) { return (size_t)nb * BLOCK_N * D; }, n_lo,
                           n_blocks, n_unmasked, kv_len, pos0, pos1, scale_log2, acc_o, row_max,
                           row_sum);

    const int row0 = warp_row0 + g;
    const int row1 = row0 + 8;
    if (splits > 1) {
        const size_t prow = ((size_t)split * q_heads + head) * q_len + m0;
        store_split_partial<D>(acc_o, row_max, row_sum, scale_log2, m0 + row0 < q_len,
                               m0 + row1 < q_len, prow + row0, prow + row1, part_o, part_lse);
        return;
    }
    const float inv0 = 1.f / row_sum[0];
    const float inv1 = 1.f / row_sum[1];
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt) {
        const int col = dt * 8 + t4 * 2;
        if (m0 + row0 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row0 * D + col) =
                Ops<T>::pack(acc_o[dt * 4 + 0] * inv0, acc_o[dt * 4 + 1] * inv0);
        }
        if (m0 + row1 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row1 * D + col) =
                Ops<T>::pack(acc_o[dt * 4 + 2] * inv1, acc_o[dt * 4 + 3] * inv1);
        }
    }
}

}  // namespace headroom_wg

// Entry points: attn_fused_prefill_wgmma_d{64,128,256}_{f16,bf16}. Launch:
// grid (ceil(q_len / BLOCK_M), q_heads), block THREADS, dynamic shared memory
// (BLOCK_M + 2 * BLOCK_N) * D * 2 + 1024 bytes.
#define WGMMA_ENTRY(D, NAME, T)                                                            \
    extern "C" __global__ void __launch_bounds__(headroom_wg::THREADS, headroom_wg::MIN_BLOCKS)     \
    attn_fused_prefill_wgmma_d##D##_##NAME(const T* q, const T* k, const T* v, T* out, int q_len,   \
                                           int kv_len, int q_heads, int kv_heads, float scale_log2, \
                                           long long kv_stride, int q_period, int splits,           \
                                           float* part_o, float* part_lse) {                        \
        headroom_wg::attn_fused_prefill<D, T>(q, k, v, out, q_len, kv_len, q_heads, kv_heads,       \
                                              scale_log2, kv_stride, q_period, splits, part_o,      \
                                              part_lse);                                            \
    }

// Split-KV combine: grid (q_heads * q_len rows, d / (4 * COMBINE_QUADS)), block COMBINE_THREADS threads;
// part_o [splits][rows][d] f32, part_lse [splits][rows] f32, out [rows][d].
extern "C" __global__ void attn_split_combine_bf16(const float* part_o, const float* part_lse,
                                                   __nv_bfloat16* out, int rows, int d, int splits) {
    headroom_wg::split_combine<__nv_bfloat16>(part_o, part_lse, out, nullptr, rows, d, splits);
}
extern "C" __global__ void attn_split_combine_f16(const float* part_o, const float* part_lse, __half* out,
                                                  int rows, int d, int splits) {
    headroom_wg::split_combine<__half>(part_o, part_lse, out, nullptr, rows, d, splits);
}

WGMMA_ENTRY(256, bf16, __nv_bfloat16)
WGMMA_ENTRY(256, f16, __half)
WGMMA_ENTRY(128, bf16, __nv_bfloat16)
WGMMA_ENTRY(128, f16, __half)
WGMMA_ENTRY(64, bf16, __nv_bfloat16)
WGMMA_ENTRY(64, f16, __half)
