// The key-tile loop shared by the wgmma attention kernels (attention_fused_wgmma.cu
// over contiguous K/V, attention_paged.cu over the KV block pool): for one
// warpgroup's 64 query rows already in shared memory, it streams the key
// tiles [n_lo, n_blocks) last to first through sK / sV (cp.async, one tile
// ahead), computes S = Q.K^T on wgmma, masks (lower-right causal with the
// rows' positions pos0 / pos1, and keys at or past kv_len), runs the f32
// online softmax in the exp2 domain and accumulates O += P.V. Where key tile
// nb's rows are is the caller's: `tile(nb)` returns the element offset of its
// first row from gK / gV (nb * BLOCK_N * D when contiguous; a pool block's
// offset when paged). The caller has queued the Q tile's cp.async (it is
// committed with the first K tile here). On return row_sum is reduced over
// the four threads of each row; acc_o / row_max / row_sum hold the unnormalised
// output, the row maxima (score units) and sums. ATTN_SPLIT_KEY_TILES picks a
// split's key tiles for both kernels.

namespace headroom_wg {

// Declares this split's key tiles [n_lo, n_blocks) of a query tile (rows m0
// ..last_row, in periods of PERIOD rows whose positions start at history;
// keys below kv_len; an even share of the tile's keys over `splits`, empty
// when n_lo >= n_blocks) and n_unmasked, the first tile any of its rows
// masks. A macro over the caller's locals, not a function: inlining a
// function here reorders a few of the kernels' instructions.
#define ATTN_SPLIT_KEY_TILES(PERIOD)                                                      \
    /* Positions of the tile's rows: contiguous unless the tile crosses a period. */      \
    const bool wraps = m0 / PERIOD != last_row / PERIOD;                                  \
    const int first_pos = history + (wraps ? 0 : m0 % PERIOD);                            \
    const int last_pos = history + (wraps ? PERIOD - 1 : last_row % PERIOD);              \
    const int n_limit = min(kv_len, last_pos + 1);                                        \
    const int n_total = (n_limit + BLOCK_N - 1) / BLOCK_N;                                \
    const int n_unmasked = (first_pos + 1) / BLOCK_N;                                     \
    const int per_split = (n_total + splits - 1) / splits;                                \
    const int n_lo = min(n_total, split * per_split);                                     \
    const int n_blocks = min(n_total, n_lo + per_split)

// A key tile's scores, step 1 (every wgmma attention loop): masks them
// (the scale is applied in the exponent), takes the rows' new maxima into
// row_max and returns in sub / alpha the exp2-domain offsets and the old
// sums' factors, in grew whether a row max of this thread changed.
template <int N_TILES>
__device__ __forceinline__ bool tile_max(float (&acc_s)[N_TILES * 4], float (&row_max)[2], float scale_log2,
                                         bool masked, int n0, int t4, int pos0, int pos1, int kv_len,
                                         float (&sub)[2], float (&alpha)[2]) {
    attn_rows::scale_mask<N_TILES, false>(acc_s, scale_log2, masked, n0, t4, pos0, pos1, kv_len);

    float new_max[2];
    attn_rows::new_row_max<N_TILES>(acc_s, row_max, new_max);
    bool grew = false;  // a row max of this thread changed
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        // sub and alpha in the exp2 domain (scores * scale_log2).
        const float m_new = new_max[r] * scale_log2;  // scale > 0: the max commutes with it
        const float m_old = row_max[r] * scale_log2;
        sub[r] = (new_max[r] == -INFINITY) ? 0.f : m_new;
        const bool changed = new_max[r] != row_max[r];
        alpha[r] = changed ? fast_exp2(m_old - sub[r]) : 1.f;
        grew = grew || changed;
        row_max[r] = new_max[r];
    }
    return grew;
}

// Step 2a: the probabilities exp2(s * scale - sub) in place, their sums
// into row_sum (the old sums times alpha).
template <int N_TILES>
__device__ __forceinline__ void tile_exp(float (&acc_s)[N_TILES * 4], float (&row_sum)[2], float scale_log2,
                                         const float (&sub)[2], const float (&alpha)[2]) {
    float tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
        acc_s[nt * 4 + 0] = fast_exp2(fmaf(acc_s[nt * 4 + 0], scale_log2, -sub[0]));
        acc_s[nt * 4 + 1] = fast_exp2(fmaf(acc_s[nt * 4 + 1], scale_log2, -sub[0]));
        acc_s[nt * 4 + 2] = fast_exp2(fmaf(acc_s[nt * 4 + 2], scale_log2, -sub[1]));
        acc_s[nt * 4 + 3] = fast_exp2(fmaf(acc_s[nt * 4 + 3], scale_log2, -sub[1]));
        tile_sum[0] += acc_s[nt * 4 + 0] + acc_s[nt * 4 + 1];
        tile_sum[1] += acc_s[nt * 4 + 2] + acc_s[nt * 4 + 3];
    }
    row_sum[0] = row_sum[0] * alpha[0] + tile_sum[0];
    row_sum[1] = row_sum[1] * alpha[1] + tile_sum[1];
}

// Step 2b: acc_o rescaled by alpha where a row max grew in the warp.
template <int D>
__device__ __forceinline__ void rescale_o(float (&acc_o)[D / 2], const float (&alpha)[2], bool grew) {
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            acc_o[dt * 4 + 0] *= alpha[0];
            acc_o[dt * 4 + 1] *= alpha[0];
            acc_o[dt * 4 + 2] *= alpha[1];
            acc_o[dt * 4 + 3] *= alpha[1];
        }
    }
}

// Step 2c: P packed as P.V's A fragments.
template <typename T, int N_TILES>
__device__ __forceinline__ void pack_p(const float (&acc_s)[N_TILES * 4], unsigned (&p)[N_TILES / 2][4]) {
#pragma unroll
    for (int kk = 0; kk < N_TILES / 2; ++kk) {
        p[kk][0] = Ops<T>::pack(acc_s[(2 * kk) * 4 + 0], acc_s[(2 * kk) * 4 + 1]);
        p[kk][1] = Ops<T>::pack(acc_s[(2 * kk) * 4 + 2], acc_s[(2 * kk) * 4 + 3]);
        p[kk][2] = Ops<T>::pack(acc_s[(2 * kk + 1) * 4 + 0], acc_s[(2 * kk + 1) * 4 + 1]);
        p[kk][3] = Ops<T>::pack(acc_s[(2 * kk + 1) * 4 + 2], acc_s[(2 * kk + 1) * 4 + 3]);
    }
}

// Step 2 whole (2a, 2b, 2c in order).
template <int D, typename T, int N_TILES>
__device__ __forceinline__ void tile_exp_pack(float (&acc_s)[N_TILES * 4], float (&acc_o)[D / 2],
                                              float (&row_sum)[2], float scale_log2, const float (&sub)[2],
                                              const float (&alpha)[2], bool grew,
                                              unsigned (&p)[N_TILES / 2][4]) {
    tile_exp<N_TILES>(acc_s, row_sum, scale_log2, sub, alpha);
    rescale_o<D>(acc_o, alpha, grew);
    pack_p<T, N_TILES>(acc_s, p);
}

template <int D, typename T, typename TileOffset>
__device__ __forceinline__ void attend_key_tiles(unsigned sQ, unsigned sK, unsigned sV, const T* gK,
                                                 const T* gV, TileOffset tile, int n_lo, int n_blocks,
                                                 int n_unmasked, int kv_len, int pos0, int pos1,
                                                 float scale_log2, float (&acc_o)[D / 2],
                                                 float (&row_max)[2], float (&row_sum)[2]) {
    constexpr int N_TILES = BLOCK_N / 8;   // n8 blocks of S per thread
    const int tid = threadIdx.x;
    const int wg = tid / 128;
    const int t4 = tid % 4;

    {
        const int n0 = (n_blocks - 1) * BLOCK_N;
        load_tile<D, BLOCK_N>(sK, gK + tile(n_blocks - 1), kv_len - n0, tid);
    }
    cp_async_commit();

#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;

    // Descriptor bases: Q rows of this warpgroup; K and V whole tiles.
    const unsigned q_wg = sQ + wg * WG_ROWS * 128;
    constexpr unsigned SBO = 8 * 128;          // 8 rows of 128 bytes
    constexpr unsigned V_LBO = BLOCK_N * 128;  // next 64 columns of V

    float acc_s[N_TILES * 4];

    for (int nb = n_blocks - 1; nb >= n_lo; --nb) {
        const int n0 = nb * BLOCK_N;
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        load_tile<D, BLOCK_N>(sV, gV + tile(nb), kv_len - n0, tid);
        cp_async_commit();

#pragma unroll
        for (int i = 0; i < N_TILES * 4; ++i) acc_s[i] = 0.f;
        wgmma_fence();
        qk_tile<D, T>(acc_s, q_wg, sK);
        wgmma_commit();
        wgmma_wait_all();

        float sub[2];
        float alpha[2];
        const bool grew = tile_max<N_TILES>(acc_s, row_max, scale_log2, nb >= n_unmasked, n0, t4, pos0, pos1, kv_len,
                                            sub, alpha);

        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        if (nb > n_lo) {
            const int np = (nb - 1) * BLOCK_N;
            load_tile<D, BLOCK_N>(sK, gK + tile(nb - 1), kv_len - np, tid);
            cp_async_commit();
        }

        unsigned p[BLOCK_N / 16][4];
        tile_exp_pack<D, T, N_TILES>(acc_s, acc_o, row_sum, scale_log2, sub, alpha, grew, p);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            Ops<T>::template pv<D>(acc_o, p[kk][0], p[kk][1], p[kk][2], p[kk][3],
                                   desc_sw128(sV + kk * 16 * 128, V_LBO, SBO));
        }
        wgmma_commit();
        wgmma_wait_all();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    }
}

// The split partial of one thread's two rows (splits > 1): O / its own sum at
// part_o + p0 * D / p1 * D and log2(sum) + max in the exp2 domain at
// part_lse[p0 / p1] (a row with no visible key: zero and -inf; NaN stays NaN).
template <int D>
__device__ __forceinline__ void store_split_partial(const float (&acc_o)[D / 2], const float (&row_max)[2],
                                                    const float (&row_sum)[2], float scale_log2, bool ok0,
                                                    bool ok1, size_t p0, size_t p1, float* part_o,
                                                    float* part_lse) {
    constexpr int D_TILES = D / 8;
    const int t4 = threadIdx.x % 4;
    const float inv0 = row_sum[0] == 0.f ? 0.f : 1.f / row_sum[0];
    const float inv1 = row_sum[1] == 0.f ? 0.f : 1.f / row_sum[1];
    const float mx0 = row_max[0] * scale_log2, mx1 = row_max[1] * scale_log2;
    const float lse0 = row_sum[0] == 0.f ? -INFINITY : mx0 + __log2f(row_sum[0]);
    const float lse1 = row_sum[1] == 0.f ? -INFINITY : mx1 + __log2f(row_sum[1]);
    if (t4 == 0) {
        if (ok0) part_lse[p0] = lse0;
        if (ok1) part_lse[p1] = lse1;
    }
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt) {
        const int col = dt * 8 + t4 * 2;
        if (ok0)
            *reinterpret_cast<float2*>(part_o + p0 * D + col) =
                make_float2(acc_o[dt * 4 + 0] * inv0, acc_o[dt * 4 + 1] * inv0);
        if (ok1)
            *reinterpret_cast<float2*>(part_o + p1 * D + col) =
                make_float2(acc_o[dt * 4 + 2] * inv1, acc_o[dt * 4 + 3] * inv1);
    }
}

}  // namespace headroom_wg
