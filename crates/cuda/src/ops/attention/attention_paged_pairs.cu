// Paged attention for long prompts on Hopper (sm_90a), two query heads of one
// KV group a CTA sharing every K/V tile: a producer warpgroup streams the key
// tiles of the pair's (shared) KV head through a two-stage ring, two MMA
// warpgroups each run one head's 64 rows over them.
//
// Against attention_paged.cu (one warpgroup, one head, two CTAs an SM, each
// loading its own tiles) the K/V bytes from L2 and into shared memory halve
// for the same work; the MMA warpgroups wait on mbarriers instead of
// __syncthreads, so they drift apart as that kernel's two CTAs did.
// The arithmetic of a row is that kernel's, step for step (the same wgmma
// shapes, masking, online softmax and epilogue): the outputs are the same bits.
//
// Work items are attention_paged.cu's (seq, first head, heads == 1, m0) with
// an even first head: MMA warpgroup w takes query head first_head + w of the
// group. No key splits (the launches that use it fill the GPU without them).
// Warpgroup 0 is the producer (setmaxnreg 24), 1 and 2 the MMA warpgroups
// (240). Shared memory: Q0, Q1, then the ring K0, V0, K1, V1 (32 KiB each for
// D = 256), then the mbarriers: fullK[2], fullV[2] (128 producer arrivals,
// cp.async .noinc), emptyK[2], emptyV[2] (one arrival per MMA warp: 8; a K
// is released once its scores are in, before that step's P.V, so the
// producer refills it while the MMA warpgroups still run on the stage's V).

namespace headroom_wg_pairs {

using namespace headroom_wg;
using headroom_tma::cp_async_arrive_noinc;
using headroom_tma::mbar_arrive;
using headroom_tma::mbar_init;
using headroom_tma::mbar_init_fence;
using headroom_tma::mbar_wait;
using headroom_async::fence_operands;
using headroom_async::wgmma_wait;

constexpr int KV_ROWS = 64;  // token rows per KV block (headroom_core::ops::KV_BLOCK_ROWS)
static_assert(KV_ROWS == BLOCK_N, "a key tile is one block");
constexpr int PAIR_THREADS = 384;  // a producer and two MMA warpgroups
constexpr int STAGES = 2;
constexpr int PRODUCER_REGS = 24;  // setmaxnreg: 128 x 24 + 256 x 240 = 168 x 384
constexpr int MMA_REGS = 240;
static_assert(128 * PRODUCER_REGS + 256 * MMA_REGS <= headroom_async::cta_registers(PAIR_THREADS),
              "setmaxnreg's split fits the CTA's registers");

template <int D>
struct PairSmem {
    static constexpr int Q_BYTES = Smem<D>::Q_BYTES;    // one head's 64 rows
    static constexpr int KV_BYTES = Smem<D>::KV_BYTES;  // one key tile of K (or V)
    static constexpr int RING = 2 * Q_BYTES;            // the ring after both Q tiles
    static constexpr int BARS = RING + STAGES * 2 * KV_BYTES;
    static constexpr int BYTES = BARS + 4 * STAGES * 8 + 1024;  // +1024: the 1024-byte alignment
    // Each MMA warpgroup stages its output in its half of the tiles' space.
    static constexpr int STAGE_AT = BARS / 2;
};
static_assert(Stage<256>::WITH_ROWS <= PairSmem<256>::STAGE_AT, "a warpgroup's stage fits its half");

// MMA warpgroup w's own barrier (ids 1 and 2; 0 is __syncthreads').
struct WgSync {
    int id;
    __device__ __forceinline__ void operator()() const { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
};
// Both MMA warpgroups (id 3, 256 threads).
__device__ __forceinline__ void mma_barrier() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }

// One key tile (BLOCK_N rows of D, row stride D) into a SW128 tile by the
// producer's 128 threads, rows at or past valid_rows zero-filled: load_tile's
// layout, its rows walked by one pointer (the producer runs on few registers).
template <int D, typename T>
__device__ __forceinline__ void producer_tile(unsigned dst, const T* src, int valid_rows, int pt) {
    constexpr int CPR = D / CHUNK;  // 16-byte chunks a row
    constexpr int RPP = 128 / CPR;  // rows a pass
    static_assert(128 % CPR == 0 && BLOCK_N % RPP == 0, "tile split");
    const int c = pt % CPR;
    const T* p = src + (size_t)(pt / CPR) * D + c * CHUNK;
#pragma unroll 1
    for (int r = pt / CPR; r < BLOCK_N; r += RPP, p += RPP * D)
        cp_async_16(dst + sw128<BLOCK_N>(r, c), r < valid_rows ? p : src, r < valid_rows);
}

// The producer: key tiles n_blocks - 1 down to n_lo (as the MMA warpgroups
// take them) into the ring, K and V each completing its own barrier; a
// stage's K (V) is refilled once the 8 MMA warps released that K (V).
template <int D, typename T, typename TileOffset>
__device__ __forceinline__ void produce_tiles(unsigned ring, unsigned bars, const T* gK, const T* gV,
                                              TileOffset tile, int n_lo, int n_blocks, int kv_len, int pt) {
    constexpr int KVB = PairSmem<D>::KV_BYTES;
    int s = 0;
    for (int nb = n_blocks - 1; nb >= n_lo; --nb, ++s) {
        const int st = s % STAGES;
        const unsigned sK = ring + st * 2 * KVB;
        const size_t off = tile(nb);
        const int valid = kv_len - nb * BLOCK_N;
        const unsigned parity = (unsigned)(s / STAGES - 1) & 1u;
        if (s >= STAGES) mbar_wait(bars + (2 * STAGES + st) * 8, parity);  // K of step s - STAGES read
        producer_tile<D, T>(sK, gK + off, valid, pt);
        cp_async_arrive_noinc(bars + st * 8);
        if (s >= STAGES) mbar_wait(bars + (3 * STAGES + st) * 8, parity);  // V of step s - STAGES read
        producer_tile<D, T>(sK + KVB, gV + off, valid, pt);
        cp_async_arrive_noinc(bars + (STAGES + st) * 8);
    }
    cp_async_wait_all();
}

// Keeps P.V's A fragments live (and in their registers) up to this point:
// the wgmma that reads them runs on after its issue.
template <int N>
__device__ __forceinline__ void fence_fragments(unsigned (&p)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(p[i][0]), "+r"(p[i][1]), "+r"(p[i][2]), "+r"(p[i][3])::"memory");
}

// One MMA warpgroup's key-tile loop: attend_key_tiles' steps (tile_max,
// tile_exp, rescale_o, pack_p) with the tiles taken from the ring, and
// tile j + 1's Q.K^T and softmax overlapping tile j's P.V (FA3's
// intra-warpgroup overlap): issue S(j+1) = Q.K(j+1)^T, issue O += P(j).V(j),
// wait for S(j+1) and run its max and exponentials while P.V runs, wait for
// P.V, release stage j, then rescale O by tile j + 1's alpha and pack P(j+1).
// O sees the same operations in the same order as in attend_key_tiles
// (... x alpha(j), + P(j).V(j), x alpha(j+1), ...): the same bits.
template <int D, typename T>
__device__ __forceinline__ void attend_ring(unsigned q_wg, unsigned ring, unsigned bars, int n_lo, int n_blocks,
                                            int n_unmasked, int kv_len, int pos0, int pos1, float scale_log2,
                                            float (&acc_o)[D / 2], float (&row_max)[2], float (&row_sum)[2]) {
    constexpr int N_TILES = BLOCK_N / 8;
    constexpr int KVB = PairSmem<D>::KV_BYTES;
    constexpr unsigned SBO = 8 * 128;
    constexpr unsigned V_LBO = BLOCK_N * 128;
    const int t4 = threadIdx.x % 4;
    const bool warp_leader = threadIdx.x % 32 == 0;

#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    float acc_s[N_TILES * 4];
    unsigned p[BLOCK_N / 16][4];
    float sub[2], alpha[2];

    // S = Q.K^T of the tile in ring step s (waits for its K), issued, not waited for.
    auto issue_qk = [&](int s) {
        const int st = s % STAGES;
        mbar_wait(bars + st * 8, (unsigned)(s / STAGES) & 1u);
        fence_proxy_async();
#pragma unroll
        for (int i = 0; i < N_TILES * 4; ++i) acc_s[i] = 0.f;
        wgmma_fence();
        qk_tile<D, T>(acc_s, q_wg, ring + st * 2 * KVB);
        wgmma_commit();
    };
    // The scores of step s (tile nb) to probabilities; O's factor in alpha.
    auto softmax = [&](int nb) {
        const bool grew = tile_max<N_TILES>(acc_s, row_max, scale_log2, nb >= n_unmasked, nb * BLOCK_N, t4, pos0,
                                            pos1, kv_len, sub, alpha);
        tile_exp<N_TILES>(acc_s, row_sum, scale_log2, sub, alpha);
        return grew;
    };

    const int steps = n_blocks - n_lo;
    // This warp has read step s's K (V).
    auto release_k = [&](int s) {
        if (warp_leader) mbar_arrive(bars + (2 * STAGES + s % STAGES) * 8);
    };
    auto release_v = [&](int s) {
        if (warp_leader) mbar_arrive(bars + (3 * STAGES + s % STAGES) * 8);
    };

    issue_qk(0);
    wgmma_wait<0>();
    fence_operands(acc_s);
    release_k(0);
    rescale_o<D>(acc_o, alpha, softmax(n_blocks - 1));
    pack_p<T, N_TILES>(acc_s, p);
    // O += P(s).V(s), issued (waits for the V of step s).
    auto issue_pv = [&](int s) {
        const int st = s % STAGES;
        mbar_wait(bars + (STAGES + st) * 8, (unsigned)(s / STAGES) & 1u);
        fence_proxy_async();
        wgmma_fence();
        const unsigned sV = ring + st * 2 * KVB + KVB;
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            Ops<T>::template pv<D>(acc_o, p[kk][0], p[kk][1], p[kk][2], p[kk][3],
                                   desc_sw128(sV + kk * 16 * 128, V_LBO, SBO));
        }
        wgmma_commit();
    };
    // Every step but the last overlaps the next one's scores (no branch
    // between a wgmma and its wait: ptxas serialises the wgmma otherwise).
    for (int s = 0; s + 1 < steps; ++s) {
        issue_qk(s + 1);
        issue_pv(s);
        wgmma_wait<1>();  // S of step s + 1 (P.V of step s may still run)
        fence_operands(acc_s);
        release_k(s + 1);
        const bool grew = softmax(n_blocks - 2 - s);
        wgmma_wait<0>();
        fence_operands(acc_o);
        fence_fragments(p);
        release_v(s);
        rescale_o<D>(acc_o, alpha, grew);
        pack_p<T, N_TILES>(acc_s, p);
    }
    issue_pv(steps - 1);
    wgmma_wait<0>();
    fence_operands(acc_o);
    release_v(steps - 1);

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    }
}

template <int D, typename T>
__device__ __forceinline__ void attn_paged_pairs(const T* __restrict__ q, const T* __restrict__ kc,
                                                 const T* __restrict__ vc, T* __restrict__ out,
                                                 const T* __restrict__ gate, const int* __restrict__ items,
                                                 const int* __restrict__ seq, const int* __restrict__ bt, int n,
                                                 int q_heads, int kv_heads, float scale_log2) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw0 = smem_u32(smem_raw);
    const unsigned base = (raw0 + 1023u) & ~1023u;
    const unsigned ring = base + PairSmem<D>::RING;
    const unsigned bars = base + PairSmem<D>::BARS;

    const int tid = threadIdx.x;
    // The warpgroup, warp-uniform as the compiler sees it (setmaxnreg's
    // branches must be).
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);

    const int s = items[4 * blockIdx.x + 0];
    const int first_head = items[4 * blockIdx.x + 1];
    const int m0 = items[4 * blockIdx.x + 3];
    const int kv_head = blockIdx.y;
    const int group = q_heads / kv_heads;
    const int tok0 = seq[s];
    const int q_len = seq[s + 1] - tok0;
    const int kv_len = seq[n + 1 + s];
    const int history = kv_len - q_len;
    const int* table = bt + n + 1 + bt[s];
    const size_t block_elems = (size_t)kv_heads * KV_ROWS * D;

    // One head's rows: no period wraps inside a tile (vrows == q_len).
    const int last_row = min(m0 + BLOCK_M, q_len) - 1;
    const int first_pos = history + m0;
    const int n_limit = min(kv_len, history + last_row + 1);
    const int n_blocks = (n_limit + BLOCK_N - 1) / BLOCK_N;
    const int n_unmasked = (first_pos + 1) / BLOCK_N;
    const int n_lo = 0;

    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(bars + st * 8, 128);                 // fullK: the producer's cp.async arrivals
            mbar_init(bars + (STAGES + st) * 8, 128);      // fullV
            mbar_init(bars + (2 * STAGES + st) * 8, 8);    // emptyK: one arrival an MMA warp
            mbar_init(bars + (3 * STAGES + st) * 8, 8);    // emptyV
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        const T* gK = kc + (size_t)kv_head * KV_ROWS * D;
        const T* gV = vc + (size_t)kv_head * KV_ROWS * D;
        produce_tiles<D, T>(ring, bars, gK, gV, [&](int nb) { return (size_t)table[nb] * block_elems; }, n_lo,
                            n_blocks, kv_len, tid);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(MMA_REGS));
    const int w = wg - 1;
    const int wt = tid - 128 * wg;  // the thread's index in its warpgroup
    const int head = kv_head * group + first_head + w;
    const unsigned sQ = base + w * PairSmem<D>::Q_BYTES;
    load_q_rows<D, T>(sQ, q, m0, q_len, q_len, tok0, head, q_heads, wt);
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();
    const WgSync wg_sync{w + 1};
    wg_sync();

    const int warp_row0 = (wt / 32) * 16;
    const int g = (wt % 32) / 4;
    const int t4 = wt % 4;
    const int pos0 = history + (m0 + warp_row0 + g) % q_len;
    const int pos1 = history + (m0 + warp_row0 + g + 8) % q_len;

    float acc_o[D / 2];
    float row_max[2], row_sum[2];
    attend_ring<D, T>(sQ, ring, bars, n_lo, n_blocks, n_unmasked, kv_len, pos0, pos1, scale_log2, acc_o, row_max,
                      row_sum);

    const float inv0 = 1.f / row_sum[0];
    const float inv1 = 1.f / row_sum[1];
    mma_barrier();  // both warpgroups are done with the Q tiles and the ring
    float* stage = reinterpret_cast<float*>(smem_raw + (base - raw0) + w * PairSmem<D>::STAGE_AT);
    store_out_staged<D, T>(acc_o, inv0, inv1, stage, warp_row0, g, t4, last_row - m0 + 1,
                           [&](int r) { return (size_t)(tok0 + m0 + r) * q_heads + head; }, out, gate, wt,
                           wg_sync);
}

}  // namespace headroom_wg_pairs

// attn_paged_pairs_d256_{bf16,f16}: grid (pair items, kv_heads), block 384,
// dynamic shared memory PairSmem<256>::BYTES; launched programmatically.
#define PAIRS_ENTRY(D, NAME, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(headroom_wg_pairs::PAIR_THREADS, 1)                        \
    attn_paged_pairs_d##D##_##NAME(const T* q, const T* kc, const T* vc, T* out, const T* gate,             \
                                   const int* items, const int* seq, const int* bt, int n, int q_heads,     \
                                   int kv_heads, float scale_log2) {                                        \
        wait_prior_then_release_next();                                                                    \
        headroom_wg_pairs::attn_paged_pairs<D, T>(q, kc, vc, out, gate, items, seq, bt, n, q_heads, kv_heads, \
                                                  scale_log2);                                             \
    }
PAIRS_ENTRY(256, bf16, __nv_bfloat16)
PAIRS_ENTRY(256, f16, __half)
