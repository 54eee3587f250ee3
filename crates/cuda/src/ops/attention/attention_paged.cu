// Varlen attention over the KV block pool on Hopper warpgroup MMA (sm_90a):
// every sequence of a batch in one launch (plus the split combine).
//
// The tile loop, masking and online softmax are attention_tiles.cuh's, shared
// with attention_fused_wgmma.cu;
// what differs is where the tiles come from and where the output goes:
//  - Q and O are token-major [rows][q_heads][D] (row r of query head hh of
//    sequence i at ((cu[i] + r) * q_heads + hh) * D): no staging transposes.
//  - K/V live in the pool [blocks][kv_heads][KV_ROWS][D]: key tile j of a
//    sequence's KV head h is the contiguous KV_ROWS x D at
//    ((table[j] * kv_heads + h) * KV_ROWS) * D (BLOCK_N == KV_ROWS).
//  - Each sequence has its own history (kv_len - q_len): lower-right causal.
//  - Optional gate (token-major like O): O * sigmoid(gate) in the epilogue
//    (and in the combine when the keys are split).
//
// Grid: x over work items, y the KV heads, z the key splits. A work item
// (items[4 x]: seq, first head, heads, m0) is one 64-row tile of the
// sequence's "virtual rows": `heads` query heads of the KV head's group
// stacked, each q_len rows (heads == group packs a short chunk's GQA group
// into one tile; heads == 1 is one query head), starting at query head
// kv_head * group + first head. Virtual row v is token row v % q_len of
// query head first + v / q_len. The host orders the items (paged.rs, ItemOrder).
// seq: [cu (n + 1)][kv_len (n)]; bt: [starts (n + 1)][block ids].
// With splits > 1 each CTA writes its partial of output row o (o = token row
// * q_heads + query head) at part_o[(split * R + o) * D], part_lse[split * R +
// o], R = cu[n] * q_heads, and split_combine makes the output.

namespace headroom_wg {

constexpr int KV_ROWS = 64;  // token rows per KV block (headroom_core::ops::KV_BLOCK_ROWS)
static_assert(KV_ROWS == BLOCK_N, "a key tile is one block");

template <int D, typename T>
__device__ __forceinline__ void attn_paged(const T* __restrict__ q, const T* __restrict__ kc,
                                           const T* __restrict__ vc, T* __restrict__ out,
                                           const T* __restrict__ gate, const int* __restrict__ items,
                                           const int* __restrict__ seq, const int* __restrict__ bt, int n,
                                           int q_heads, int kv_heads, float scale_log2, int splits,
                                           float* __restrict__ part_o, float* __restrict__ part_lse) {
    static_assert(D == 64 || D == 128 || D == 256, "wgmma N is the head dim");

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;
    const unsigned sK = sQ + Smem<D>::Q_BYTES;
    const unsigned sV = sK + Smem<D>::KV_BYTES;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;
    const int t4 = lane % 4;

    const int s = items[4 * blockIdx.x + 0];
    const int first_head = items[4 * blockIdx.x + 1];
    const int item_heads = items[4 * blockIdx.x + 2];
    const int m0 = items[4 * blockIdx.x + 3];
    const int kv_head = blockIdx.y;
    const int split = blockIdx.z;
    const int group = q_heads / kv_heads;
    const int head0 = kv_head * group + first_head;
    const int tok0 = seq[s];
    const int q_len = seq[s + 1] - tok0;  // the period of the virtual rows
    const int kv_len = seq[n + 1 + s];
    const int history = kv_len - q_len;
    const int vrows = item_heads * q_len;
    const int* table = bt + n + 1 + bt[s];
    const size_t block_elems = (size_t)kv_heads * KV_ROWS * D;
    const T* gK = kc + (size_t)kv_head * KV_ROWS * D;
    const T* gV = vc + (size_t)kv_head * KV_ROWS * D;
    const size_t R = (size_t)seq[n] * q_heads;  // output rows of the launch
    // Output row (token row * q_heads + query head) of virtual row v.
    auto out_row = [&](int v) -> size_t {
        return (size_t)(tok0 + v % q_len) * q_heads + head0 + v / q_len;
    };

    const int last_row = min(m0 + BLOCK_M, vrows) - 1;
    ATTN_SPLIT_KEY_TILES(q_len);
    if (n_lo >= n_blocks) {
        // No keys for this split: an empty partial (zero output, log-sum -inf).
        const int rows = last_row - m0 + 1;
        for (int i = threadIdx.x; i < rows * D; i += THREADS)
            part_o[((size_t)split * R + out_row(m0 + i / D)) * D + i % D] = 0.f;
        for (int i = threadIdx.x; i < rows; i += THREADS)
            part_lse[(size_t)split * R + out_row(m0 + i)] = -INFINITY;
        return;
    }

    load_q_rows<D, T>(sQ, q, m0, vrows, q_len, tok0, head0, q_heads, tid);

    const int warp_row0 = warp * 16;
    const int pos0 = history + (m0 + warp_row0 + g) % q_len;
    const int pos1 = history + (m0 + warp_row0 + g + 8) % q_len;

    float acc_o[D / 2];
    float row_max[2], row_sum[2];
    attend_key_tiles<D, T>(sQ, sK, sV, gK, gV, [&](int nb) { return (size_t)table[nb] * block_elems; },
                           n_lo, n_blocks, n_unmasked, kv_len, pos0, pos1, scale_log2, acc_o, row_max,
                           row_sum);

    if (splits > 1) {
        const int v0 = m0 + warp_row0 + g;
        const int v1 = v0 + 8;
        const bool ok0 = v0 < vrows, ok1 = v1 < vrows;
        const size_t o0 = ok0 ? out_row(v0) : 0, o1 = ok1 ? out_row(v1) : 0;
        store_split_partial<D>(acc_o, row_max, row_sum, scale_log2, ok0, ok1, (size_t)split * R + o0,
                               (size_t)split * R + o1, part_o, part_lse);
        return;
    }
    const float inv0 = 1.f / row_sum[0];
    const float inv1 = 1.f / row_sum[1];
    store_out_staged<D, T>(acc_o, inv0, inv1, reinterpret_cast<float*>(smem_raw + (sQ - smem_u32(smem_raw))),
                           warp_row0, g, t4, last_row - m0 + 1, [&](int r) { return out_row(m0 + r); }, out,
                           gate, tid);
}

// The split combine for many rows and few splits (what a chunk of query rows
// over a long history runs): one warp per output row, each lane D / 32
// consecutive columns of every split's partial (so a warp reads a row's
// partial in one coalesced pass). The same sum as split_combine: out = sum_s
// 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), M = max_s lse_s, NaN when any
// lse is NaN, empty splits (lse -inf) weigh 0, times sigmoid(gate) when gate
// is not null. Grid ceil(rows / COMBINE_ROW_WARPS), block COMBINE_ROW_WARPS * 32;
// part_o [splits][rows][D] f32, part_lse [splits][rows] f32, out and gate [rows][D].
constexpr int COMBINE_ROW_WARPS = 8;
template <int D, typename T>
__device__ __forceinline__ void split_combine_rows(const float* __restrict__ part_o,
                                                   const float* __restrict__ part_lse, T* __restrict__ out,
                                                   const T* __restrict__ gate, int rows, int splits) {
    constexpr int COLS = D / 32;  // 2, 4 or 8 per lane
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * COMBINE_ROW_WARPS + threadIdx.x / 32;
    if (row >= rows) return;
    int nan;
    const float m = warp_lse_max(part_lse, rows, row, splits, lane, 32, nan);
    float den = 0.f;
    for (int s = lane; s < splits; s += 32) {
        const float l = part_lse[(size_t)s * rows + row];
        den += l == -INFINITY ? 0.f : exp2f(l - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    float acc[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) acc[j] = 0.f;
    const int c0 = lane * COLS;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
        const float l = part_lse[(size_t)s * rows + row];
        const float w = l == -INFINITY ? 0.f : exp2f(l - m);
        const float* src = part_o + ((size_t)s * rows + row) * D + c0;
        float v[COLS];
        if constexpr (COLS == 2) {
            const float2 a = *reinterpret_cast<const float2*>(src);
            v[0] = a.x;
            v[1] = a.y;
        } else {
#pragma unroll
            for (int q = 0; q < COLS / 4; ++q) {
                const float4 a = reinterpret_cast<const float4*>(src)[q];
                v[4 * q + 0] = a.x;
                v[4 * q + 1] = a.y;
                v[4 * q + 2] = a.z;
                v[4 * q + 3] = a.w;
            }
        }
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[j] += w * v[j];
    }
    const size_t at = (size_t)row * D + c0;
    float r[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
        r[j] = nan ? __int_as_float(0x7fffffff) : acc[j] / den;
        if (gate) r[j] *= sigmoid_(static_cast<float>(gate[at + j]));
    }
#pragma unroll
    for (int j = 0; j < COLS; j += 2) *reinterpret_cast<unsigned*>(out + at + j) = Ops<T>::pack(r[j], r[j + 1]);
}

}  // namespace headroom_wg

// Every entry below is launched programmatically (paged.rs) and waits for
// the previous kernel before anything else, then lets the next kernel's CTAs
// start (their weights load while this grid runs).
// Entry points: attn_paged_wgmma_d{64,128,256}_{f16,bf16}. Launch: grid
// (work items, kv_heads, splits), block THREADS, dynamic shared memory
// (BLOCK_M + 2 * BLOCK_N) * D * 2 + 1024 bytes.
#define PAGED_ENTRY(D, NAME, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(headroom_wg::THREADS, headroom_wg::MIN_BLOCKS)    \
    attn_paged_wgmma_d##D##_##NAME(const T* q, const T* kc, const T* vc, T* out, const T* gate,    \
                                   const int* items, const int* seq, const int* bt, int n,         \
                                   int q_heads, int kv_heads, float scale_log2, int splits,        \
                                   float* part_o, float* part_lse) {                               \
        wait_prior_then_release_next();                                                           \
        headroom_wg::attn_paged<D, T>(q, kc, vc, out, gate, items, seq, bt, n, q_heads, kv_heads,  \
                                      scale_log2, splits, part_o, part_lse);                       \
    }

// The combine of the paged kernel's split partials, gated when gate is not
// null: grid (rows, d / (4 * COMBINE_QUADS)), block COMBINE_THREADS;
// part_o [splits][rows][d] f32, part_lse [splits][rows] f32, out and gate [rows][d].
extern "C" __global__ void attn_paged_combine_bf16(const float* part_o, const float* part_lse,
                                                   __nv_bfloat16* out, const __nv_bfloat16* gate,
                                                   int rows, int d, int splits) {
    wait_prior_then_release_next();
    headroom_wg::split_combine<__nv_bfloat16>(part_o, part_lse, out, gate, rows, d, splits);
}
extern "C" __global__ void attn_paged_combine_f16(const float* part_o, const float* part_lse, __half* out,
                                                  const __half* gate, int rows, int d, int splits) {
    wait_prior_then_release_next();
    headroom_wg::split_combine<__half>(part_o, part_lse, out, gate, rows, d, splits);
}

// attn_paged_combine_rows_d{64,128,256}_{f16,bf16}: split_combine_rows.
#define COMBINE_ROWS_ENTRY(D, NAME, T)                                                            \
    extern "C" __global__ void __launch_bounds__(headroom_wg::COMBINE_ROW_WARPS * 32)              \
    attn_paged_combine_rows_d##D##_##NAME(const float* part_o, const float* part_lse, T* out,      \
                                          const T* gate, int rows, int splits) {                   \
        wait_prior_then_release_next();                                                           \
        headroom_wg::split_combine_rows<D, T>(part_o, part_lse, out, gate, rows, splits);          \
    }
COMBINE_ROWS_ENTRY(256, bf16, __nv_bfloat16)
COMBINE_ROWS_ENTRY(256, f16, __half)
COMBINE_ROWS_ENTRY(128, bf16, __nv_bfloat16)
COMBINE_ROWS_ENTRY(128, f16, __half)
COMBINE_ROWS_ENTRY(64, bf16, __nv_bfloat16)
COMBINE_ROWS_ENTRY(64, f16, __half)

PAGED_ENTRY(256, bf16, __nv_bfloat16)
PAGED_ENTRY(256, f16, __half)
PAGED_ENTRY(128, bf16, __nv_bfloat16)
PAGED_ENTRY(128, f16, __half)
PAGED_ENTRY(64, bf16, __nv_bfloat16)
PAGED_ENTRY(64, f16, __half)
