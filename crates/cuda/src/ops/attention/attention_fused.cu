// Fused prefill attention (flash-attention 2 style) on tensor cores.
//
// Semantics (shared with every Headroom backend): head-major contiguous
// q/out [q_heads][q_len][D], k/v [kv_heads][kv_len][D]; the queries are the
// last q_len rows of the kv_len sequence (lower-right causal: query i attends
// to keys 0 ..= kv_len - q_len + i); query head h reads KV head h / group;
// f32 accumulation and online softmax; a NaN in any input that a row reads
// reaches that row's output.
//
// Structure: one CTA per (BLOCK_M query rows, query head); each warp owns 16
// query rows. S = Q.K^T and O += P.V use mma.sync m16n8k16 (f16/bf16 in, f32
// accumulate) with operands read through ldmatrix from XOR-swizzled shared
// memory. Q stays in shared memory (re-read per tile: a 16 x 256 register
// copy would not fit next to the 16 x 256 f32 accumulator). K and V tiles are
// loaded with cp.async: V(j) streams in while S = Q.K(j)^T runs, K(j-1)
// streams in while softmax and P.V(j) run. Tiles are visited from the last
// (diagonal, masked) to the first; tiles wholly above the diagonal are skipped.
// No global workspace: transient memory is zero whatever kv_len.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom {

// Tile shapes (named constants; every instantiation uses these).
constexpr int WARP_ROWS = 16;          // query rows per warp (the MMA M)
constexpr int NUM_WARPS = 8;           // warps per CTA
constexpr int BLOCK_M = WARP_ROWS * NUM_WARPS;  // 128 query rows per CTA
constexpr int BLOCK_N_MAX = 64;        // keys per K/V tile (head dims <= 128)
// Head dim 256 holds a 16 x 256 f32 accumulator per warp (128 registers per
// thread); its 64-key tiles fit in 244 registers without spills.
template <int D>
struct BlockN {
    static constexpr int value = D == 256 ? 64 : BLOCK_N_MAX;
    static_assert(value % 16 == 0 && value <= BLOCK_N_MAX, "BLOCK_N must be a multiple of 16, at most BLOCK_N_MAX");
};
constexpr int THREADS = NUM_WARPS * 32;
constexpr int CHUNK = 8;               // 16-byte chunk = 8 half/bf16 elements

// CTAs per SM the register budget is sized for: head dim 256 needs up to 255
// registers per thread (one CTA), head dim 128 takes one CTA, head dim 64 two
// (128 registers, a few bytes of spill).
template <int D>
struct MinBlocks {
    static constexpr int value = D == 256 ? 1 : (D == 128 ? 1 : 2);
};

template <int D>
struct Smem {
    static constexpr int Q_ELEMS = BLOCK_M * D;
    static constexpr int KV_ELEMS = BlockN<D>::value * D;
    // The launcher reserves (BLOCK_M + 2 BLOCK_N_MAX) * D * 2 bytes, an upper bound of this.
    static constexpr int BYTES = (Q_ELEMS + 2 * KV_ELEMS) * 2;
};

// Offset (in elements) of 16-byte chunk `c` of row `r` in a swizzled tile of
// D columns: chunk index XOR (row mod 8) spreads ldmatrix rows over all banks.
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
    return r * D + ((c ^ (r & 7)) * CHUNK);
}

// exp2 on the special-function unit (ex2.approx: ~2 ulp; exp2(-inf) = 0, NaN stays NaN).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Per-thread swizzled column offsets. Every ldmatrix row a thread addresses has
// the same (row mod 8) = x, and its chunk index is an even base (a compile-time
// constant once loops unroll) plus a per-thread bit b. The swizzled chunk is
// then (base / 8) * 8 + ((base % 8 + b) ^ x): four per-thread values plus an
// immediate, instead of one register per address.
struct SwzCols {
    unsigned off[4];  // bytes of chunk ((2 j + b) ^ x)
    __device__ __forceinline__ SwzCols(int x, int b) {
#pragma unroll
        for (int j = 0; j < 4; ++j) off[j] = (unsigned)(((2 * j + b) ^ x) * CHUNK * 2);
    }
    // Byte offset of logical chunk `base` (even) within a row.
    __device__ __forceinline__ unsigned at(int base) const {
        return (unsigned)((base / 8) * 8 * CHUNK * 2) + off[(base % 8) / 2];
    }
};

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

template <typename T> struct Mma;

// Mma<T>::run: c += a.b on one m16n8k16 mma.sync (f32 accumulators);
// Mma<T>::pack: two floats rounded to a T pair in one register.
#define ATTN_MMA(T, TY, T2, PACK2)                                                                     \
    template <> struct Mma<T> {                                                                        \
        __device__ __forceinline__ static void run(float* c, unsigned a0, unsigned a1, unsigned a2,   \
                                                   unsigned a3, unsigned b0, unsigned b1) {           \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." #TY "." #TY                        \
                         ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"               \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                            \
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                    \
        }                                                                                              \
        __device__ __forceinline__ static unsigned pack(float lo, float hi) {                         \
            T2 v = PACK2(lo, hi);                                                                      \
            return *reinterpret_cast<unsigned*>(&v);                                                   \
        }                                                                                              \
    };

ATTN_MMA(__nv_bfloat16, bf16, __nv_bfloat162, __floats2bfloat162_rn)
ATTN_MMA(__half, f16, __half2, __floats2half2_rn)
#undef ATTN_MMA

// Zeroes N m16n8 accumulator tiles (4 f32 per thread each).
template <int N>
__device__ __forceinline__ void zero_tiles(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
}

// Copies `rows` x D elements (row stride D) from global `src` into a swizzled
// tile; rows at or past `valid_rows` are zero-filled.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int valid_rows, int tid) {
    constexpr int CHUNKS_PER_ROW = D / CHUNK;
    static_assert(THREADS % CHUNKS_PER_ROW == 0 || CHUNKS_PER_ROW % THREADS == 0, "bad tile split");
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;  // rows one pass of the CTA covers
    static_assert(ROWS % ROWS_PER_PASS == 0, "tile rows must divide evenly over the CTA");
    // Each thread copies one fixed chunk column c of rows r0, r0 + ROWS_PER_PASS, ...:
    // one base address each side plus compile-time offsets. ROWS_PER_PASS is a
    // multiple of 8, so every row keeps the same swizzle (r mod 8).
    const int r0 = tid / CHUNKS_PER_ROW;
    const int c = tid % CHUNKS_PER_ROW;
    const unsigned s_base = smem_u32(dst + swz<D>(r0, c));
    const T* g_base = src + (size_t)r0 * D + c * CHUNK;
    if (valid_rows >= ROWS) {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i)
            cp_async_16(s_base + i * ROWS_PER_PASS * D * 2, g_base + (size_t)i * ROWS_PER_PASS * D, true);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i) {
            const bool valid = r0 + i * ROWS_PER_PASS < valid_rows;
            cp_async_16(s_base + i * ROWS_PER_PASS * D * 2, valid ? g_base + (size_t)i * ROWS_PER_PASS * D : src, valid);
        }
    }
}

template <int D, typename T>
__device__ __forceinline__ void attn_fused_prefill(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
    int q_len, int kv_len, int q_heads, int kv_heads, float scale_log2) {
    static_assert(D % 16 == 0 && D >= 64, "head_dim must be a multiple of 16");
    constexpr int BLOCK_N = BlockN<D>::value;
    constexpr int N_TILES = BLOCK_N / 8;   // n8 tiles of S per warp
    constexpr int D_TILES = D / 8;         // n8 tiles of O per warp
    constexpr int K_STEPS = D / 16;        // k16 steps of Q.K^T

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);
    T* sK = sQ + Smem<D>::Q_ELEMS;
    T* sV = sK + Smem<D>::KV_ELEMS;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int g = lane / 4;          // MMA group id: row within the 8-row half
    const int t4 = lane % 4;         // thread in group: column pair

    // Heaviest (last, longest causal rows) blocks first.
    const int num_m_blocks = (q_len + BLOCK_M - 1) / BLOCK_M;
    const int m_block = num_m_blocks - 1 - blockIdx.x;
    const int head = blockIdx.y;
    const int kv_head = head / (q_heads / kv_heads);
    const int history = kv_len - q_len;
    const int m0 = m_block * BLOCK_M;

    const T* gQ = q + ((size_t)head * q_len + m0) * D;
    const T* gK = k + (size_t)kv_head * kv_len * D;
    const T* gV = v + (size_t)kv_head * kv_len * D;
    T* gO = out + ((size_t)head * q_len + m0) * D;

    // Keys this block can see: up to the last row's causal limit.
    const int last_row = min(m0 + BLOCK_M, q_len) - 1;
    const int n_limit = min(kv_len, history + last_row + 1);
    const int n_blocks = (n_limit + BLOCK_N - 1) / BLOCK_N;
    // Tiles below this index hold only keys every row of the block may see.
    const int n_unmasked = (history + m0 + 1) / BLOCK_N;

    load_tile<D, BLOCK_M>(sQ, gQ, q_len - m0, tid);
    {
        const int n0 = (n_blocks - 1) * BLOCK_N;
        load_tile<D, BLOCK_N>(sK, gK + (size_t)n0 * D, kv_len - n0, tid);
    }
    cp_async_commit();

    float acc_o[D_TILES][4];
    zero_tiles(acc_o);
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};

    const int warp_row0 = warp * WARP_ROWS;
    // Absolute key position limit of this thread's two rows (g and g + 8).
    const int pos0 = history + m0 + warp_row0 + g;
    const int pos1 = pos0 + 8;

    // ldmatrix row addresses (bytes) and swizzled column offsets of this thread.
    const int x = lane % 8;
    const unsigned q_row_addr = smem_u32(sQ) + (warp_row0 + x + ((lane / 8) % 2) * 8) * D * 2;
    const SwzCols q_cols(x, lane / 16);
    const unsigned k_row_addr = smem_u32(sK) + (x + (lane / 16) * 8) * D * 2;
    const SwzCols k_cols(x, (lane / 8) % 2);
    const unsigned v_row_addr = smem_u32(sV) + (x + ((lane / 8) % 2) * 8) * D * 2;
    const SwzCols v_cols(x, lane / 16);

    for (int nb = n_blocks - 1; nb >= 0; --nb) {
        const int n0 = nb * BLOCK_N;
        cp_async_wait_all();
        __syncthreads();
        load_tile<D, BLOCK_N>(sV, gV + (size_t)n0 * D, kv_len - n0, tid);
        cp_async_commit();

        // S = Q . K^T for this warp's 16 rows and BLOCK_N keys.
        float acc_s[N_TILES][4];
        zero_tiles(acc_s);
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ++ks) {
            unsigned a0, a1, a2, a3;
            ldmatrix_x4(a0, a1, a2, a3, q_row_addr + q_cols.at(ks * 2));
#pragma unroll
            for (int nt = 0; nt < N_TILES; nt += 2) {
                unsigned b0, b1, b2, b3;
                ldmatrix_x4(b0, b1, b2, b3, k_row_addr + nt * 8 * D * 2 + k_cols.at(ks * 2));
                Mma<T>::run(acc_s[nt], a0, a1, a2, a3, b0, b1);
                Mma<T>::run(acc_s[nt + 1], a0, a1, a2, a3, b2, b3);
            }
        }

        // Scale into the log2 domain and mask (causal, and keys past kv_len).
        attn_rows::scale_mask<N_TILES, true>(&acc_s[0][0], scale_log2, nb >= n_unmasked, n0, t4, pos0,
                                             pos1, kv_len);

        // Online softmax: new row maxima (reduced over the 4 threads of a row).
        float new_max[2];
        attn_rows::new_row_max<N_TILES>(&acc_s[0][0], row_max, new_max);
        float alpha[2];
        float sub[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // A row with every key masked so far keeps max -inf: subtract 0, not -inf.
            sub[r] = (new_max[r] == -INFINITY) ? 0.f : new_max[r];
            alpha[r] = fast_exp2(row_max[r] - sub[r]);
            row_max[r] = new_max[r];
        }

        // V(nb) must be in shared memory before P.V; then prefetch K(nb - 1).
        cp_async_wait_all();
        __syncthreads();
        if (nb > 0) {
            const int np = (nb - 1) * BLOCK_N;
            load_tile<D, BLOCK_N>(sK, gK + (size_t)np * D, kv_len - np, tid);
            cp_async_commit();
        }

        float tile_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt) {
            acc_s[nt][0] = fast_exp2(acc_s[nt][0] - sub[0]);
            acc_s[nt][1] = fast_exp2(acc_s[nt][1] - sub[0]);
            acc_s[nt][2] = fast_exp2(acc_s[nt][2] - sub[1]);
            acc_s[nt][3] = fast_exp2(acc_s[nt][3] - sub[1]);
            tile_sum[0] += acc_s[nt][0] + acc_s[nt][1];
            tile_sum[1] += acc_s[nt][2] + acc_s[nt][3];
        }
        // Per-thread partial sums; the 4-thread reduction happens once at the end.
        row_sum[0] = row_sum[0] * alpha[0] + tile_sum[0];
        row_sum[1] = row_sum[1] * alpha[1] + tile_sum[1];
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt) {
            acc_o[dt][0] *= alpha[0];
            acc_o[dt][1] *= alpha[0];
            acc_o[dt][2] *= alpha[1];
            acc_o[dt][3] *= alpha[1];
        }

        // O += P . V: P's accumulator layout is the A-operand layout of the next MMA.
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            const unsigned p0 = Mma<T>::pack(acc_s[2 * kk][0], acc_s[2 * kk][1]);
            const unsigned p1 = Mma<T>::pack(acc_s[2 * kk][2], acc_s[2 * kk][3]);
            const unsigned p2 = Mma<T>::pack(acc_s[2 * kk + 1][0], acc_s[2 * kk + 1][1]);
            const unsigned p3 = Mma<T>::pack(acc_s[2 * kk + 1][2], acc_s[2 * kk + 1][3]);
#pragma unroll
            for (int dt = 0; dt < D_TILES; dt += 2) {
                unsigned b0, b1, b2, b3;
                ldmatrix_x4_trans(b0, b1, b2, b3, v_row_addr + kk * 16 * D * 2 + v_cols.at(dt));
                Mma<T>::run(acc_o[dt], p0, p1, p2, p3, b0, b1);
                Mma<T>::run(acc_o[dt + 1], p0, p1, p2, p3, b2, b3);
            }
        }
    }

    // Finish the row sums across the 4 threads of each row, normalise, store.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    }
    const float inv0 = 1.f / row_sum[0];
    const float inv1 = 1.f / row_sum[1];
    const int row0 = warp_row0 + g;
    const int row1 = row0 + 8;
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt) {
        const int col = dt * 8 + t4 * 2;
        if (m0 + row0 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row0 * D + col) =
                Mma<T>::pack(acc_o[dt][0] * inv0, acc_o[dt][1] * inv0);
        }
        if (m0 + row1 < q_len) {
            *reinterpret_cast<unsigned*>(gO + (size_t)row1 * D + col) =
                Mma<T>::pack(acc_o[dt][2] * inv1, acc_o[dt][3] * inv1);
        }
    }
}

}  // namespace headroom

// Stable entry points: attn_fused_prefill_d{64,128,256}_{f16,bf16}.
// Launch: grid (ceil(q_len / BLOCK_M), q_heads), block THREADS, dynamic shared
// memory Smem<D>::BYTES. scale_log2 = softmax scale * log2(e).
#define FUSED_ENTRY(D, NAME, T)                                                      \
    extern "C" __global__ void __launch_bounds__(headroom::THREADS, headroom::MinBlocks<D>::value) \
    attn_fused_prefill_d##D##_##NAME(const T* q, const T* k, const T* v, T* out, int q_len,   \
                                     int kv_len, int q_heads, int kv_heads, float scale_log2) { \
        headroom::attn_fused_prefill<D, T>(q, k, v, out, q_len, kv_len, q_heads, kv_heads,    \
                                           scale_log2);                                       \
    }

FUSED_ENTRY(256, bf16, __nv_bfloat16)
FUSED_ENTRY(256, f16, __half)
FUSED_ENTRY(128, bf16, __nv_bfloat16)
FUSED_ENTRY(128, f16, __half)
FUSED_ENTRY(64, bf16, __nv_bfloat16)
FUSED_ENTRY(64, f16, __half)
