// The paged attention kernels' Q gather and staged output (attention_paged.cu,
// one warpgroup a CTA; attention_paged_pairs.cu, two MMA warpgroups a CTA):
// put after wgmma_common.cuh. The store takes the barrier its warpgroup
// synchronises with (the whole CTA, or the warpgroup's named barrier).

namespace headroom_wg {

// The Q tile of a work item: 64 virtual rows gathered from token-major q
// (rows at or past vrows zero-filled).
template <int D, typename T>
__device__ __forceinline__ void load_q_rows(unsigned dst, const T* q, int m0, int vrows, int q_len,
                                            int tok0, int head0, int q_heads, int tid) {
    constexpr int CHUNKS_PER_ROW = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    const int r0 = tid / CHUNKS_PER_ROW;
    const int c = tid % CHUNKS_PER_ROW;
#pragma unroll
    for (int i = 0; i < BLOCK_M / ROWS_PER_PASS; ++i) {
        const int r = r0 + i * ROWS_PER_PASS;
        const int v = m0 + r;
        const bool valid = v < vrows;
        const T* src = valid ? q + ((size_t)(tok0 + v % q_len) * q_heads + head0 + v / q_len) * D + c * CHUNK
                             : q;
        cp_async_16(dst + sw128<BLOCK_M>(r, c), src, valid);
    }
}

// The output tile goes out through shared memory (the Q/K/V tiles' space,
// free after the key loop): each thread writes its fragment rows' normalised
// f32 O (row pitch D + STAGE_PAD floats), then consecutive threads take
// consecutive 16-byte chunks of a row, load the gate's matching 16 bytes
// (a batch of loads in flight a thread) and store 16 bytes of output. The
// arithmetic is the fragment epilogue's — O · (1 / row sum), times
// sigmoid(gate) in f32, one rounding to T — on coalesced rows; the fragment
// epilogue's 2-byte gate loads and 4-byte stores, a round trip per few
// loads, were most of a short prompt's time (ncu, session 15). Each row's
// output offset (two integer divisions by q_len) is computed once, by one
// thread, into shared memory.
constexpr int STAGE_PAD = 8;
template <int D>
struct Stage {
    static constexpr int PITCH = D + STAGE_PAD;  // floats a staged row
    static constexpr int BYTES = BLOCK_M * PITCH * 4;
    // + each row's output offset (out_row · D), computed once a row.
    static constexpr int WITH_ROWS = BYTES + BLOCK_M * 8;
};
static_assert(Stage<256>::WITH_ROWS <= Smem<256>::Q_BYTES + 2 * Smem<256>::KV_BYTES, "stage fits the tiles");
static_assert(Stage<128>::WITH_ROWS <= Smem<128>::Q_BYTES + 2 * Smem<128>::KV_BYTES, "stage fits the tiles");
static_assert(Stage<64>::WITH_ROWS <= Smem<64>::Q_BYTES + 2 * Smem<64>::KV_BYTES, "stage fits the tiles");

// The barrier of a whole CTA (one warpgroup a CTA).
struct CtaSync {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

template <int D, typename T, typename OutRow, typename Sync = CtaSync>
__device__ __forceinline__ void store_out_staged(const float (&acc_o)[D / 2], float inv0, float inv1,
                                                 float* stage, int warp_row0, int g, int t4, int rows,
                                                 OutRow out_row, T* __restrict__ out,
                                                 const T* __restrict__ gate, int tid, Sync sync = Sync{}) {
    constexpr int PITCH = Stage<D>::PITCH;
    constexpr int CPR = D / CHUNK;                // 16-byte chunks a row
    constexpr int PER = BLOCK_M * CPR / THREADS;  // chunks a thread: 16 / 8 / 4
    constexpr int BATCH = PER < 8 ? PER : 8;      // gate loads in flight a thread
    static_assert(PER % BATCH == 0, "whole batches");
    sync();  // every warp's last P.V has read the V tile
    long long* row_off = reinterpret_cast<long long*>(stage + BLOCK_M * PITCH);
    if (tid < rows) row_off[tid] = (long long)out_row(tid) * D;
    float* r0 = stage + (warp_row0 + g) * PITCH + t4 * 2;
    float* r1 = r0 + 8 * PITCH;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<float2*>(r0 + dt * 8) = make_float2(acc_o[dt * 4 + 0] * inv0, acc_o[dt * 4 + 1] * inv0);
        *reinterpret_cast<float2*>(r1 + dt * 8) = make_float2(acc_o[dt * 4 + 2] * inv1, acc_o[dt * 4 + 3] * inv1);
    }
    sync();
#pragma unroll
    for (int b0 = 0; b0 < PER; b0 += BATCH) {
        uint4 gv[BATCH];
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int c = (b0 + j) * THREADS + tid;
            const int r = c / CPR;
            gv[j] = make_uint4(0, 0, 0, 0);
            if (gate && r < rows) gv[j] = *reinterpret_cast<const uint4*>(gate + row_off[r] + (c % CPR) * CHUNK);
        }
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int c = (b0 + j) * THREADS + tid;
            const int r = c / CPR;
            if (r >= rows) continue;
            const int col = (c % CPR) * CHUNK;
            const float4 lo = *reinterpret_cast<const float4*>(stage + r * PITCH + col);
            const float4 hi = *reinterpret_cast<const float4*>(stage + r * PITCH + col + 4);
            float v[CHUNK] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            if (gate) {
                const T* gt = reinterpret_cast<const T*>(&gv[j]);
#pragma unroll
                for (int k = 0; k < CHUNK; ++k) v[k] *= sigmoid_(static_cast<float>(gt[k]));
            }
            uint4 o;
            o.x = Ops<T>::pack(v[0], v[1]);
            o.y = Ops<T>::pack(v[2], v[3]);
            o.z = Ops<T>::pack(v[4], v[5]);
            o.w = Ops<T>::pack(v[6], v[7]);
            *reinterpret_cast<uint4*>(out + row_off[r] + col) = o;
        }
    }
}

}  // namespace headroom_wg
