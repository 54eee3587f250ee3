// The pieces shared by the Hopper (sm_90a) attention kernels
// (attention_fused_wgmma.cu over plain tensors, attention_paged.cu over the KV
// block pool): tile constants, shared-memory layout, the cp.async and wgmma
// wrappers beyond kernels/async_copy.cuh's, the SW128 tile loader, the Q.K^T tile and the split-KV combine.
// Each kernel source is compiled with this text in front of it.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_wg {

// One warpgroup per CTA (64 query rows), two CTAs per SM whose softmax and
// GEMM phases interleave; one K/V stage in shared memory (the two CTAs of an
// SM share it). The CTA order runs over the whole grid longest-first (heads
// innermost); the row max is taken on raw scores, the softmax scale folded
// into the exponent's FFMA; O is rescaled only in warps where a row max grew
// (exact: an unchanged max means a factor of 1).
constexpr int WG_ROWS = 64;             // query rows per warpgroup (the wgmma M)
constexpr int NUM_WG = 1;               // warpgroups per CTA
constexpr int MIN_BLOCKS = 2;           // CTAs per SM the registers are sized for
constexpr int BLOCK_M = WG_ROWS * NUM_WG;  // query rows per CTA
constexpr int BLOCK_N = 64;             // keys per K/V tile
constexpr int THREADS = NUM_WG * 128;
constexpr int CHUNK = 8;                // 16-byte chunk = 8 half/bf16 elements
constexpr int ATOM_COLS = 64;           // elements per 128-byte swizzle row

template <int D>
struct Smem {
    static constexpr int Q_BYTES = BLOCK_M * D * 2;
    static constexpr int KV_BYTES = BLOCK_N * D * 2;
    // +1024: the tiles are placed at the first 1024-byte boundary (the swizzle period).
    static constexpr int BYTES = Q_BYTES + 2 * KV_BYTES + 1024;
};

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

using headroom_async::desc_sw128;  // kernels/wgmma_sync.cuh

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows in the SW128 layout.
template <int ROWS>
__device__ __forceinline__ unsigned sw128(int r, int c) {
    return (unsigned)((c / 8) * ROWS * 128 + r * 128 + (((c % 8) ^ (r & 7)) * 16));
}

// Copies ROWS x D elements (row stride D) into a SW128 tile; rows at or past
// valid_rows are zero-filled.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void load_tile(unsigned dst, const T* src, int valid_rows, int tid) {
    constexpr int CHUNKS_PER_ROW = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS_PER_ROW;
    static_assert(THREADS % CHUNKS_PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0, "tile split");
    const int r0 = tid / CHUNKS_PER_ROW;
    const int c = tid % CHUNKS_PER_ROW;
    const T* g_base = src + (size_t)r0 * D + c * CHUNK;
    // Rows r0 + i * ROWS_PER_PASS; their swizzle (row mod 8) repeats every 8 / ROWS_PER_PASS passes.
    if (valid_rows >= ROWS) {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i)
            cp_async_16(dst + sw128<ROWS>(r0 + i * ROWS_PER_PASS, c), g_base + (size_t)i * ROWS_PER_PASS * D, true);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / ROWS_PER_PASS; ++i) {
            const bool valid = r0 + i * ROWS_PER_PASS < valid_rows;
            cp_async_16(dst + sw128<ROWS>(r0 + i * ROWS_PER_PASS, c),
                        valid ? g_base + (size_t)i * ROWS_PER_PASS * D : src, valid);
        }
    }
}

// ---- wgmma wrappers (generated: one per shape, the dtype TY = bf16 or f16 pasted into the name and the instruction) ----
#define ATTN_WGMMA_WRAPPERS(TY) \
__device__ __forceinline__ void wgmma_ss_m64n64k16_##TY(float (&d)[32], unsigned long long da, unsigned long long db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TY "." #TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "l"(da), "l"(db), "r"(1)); \
} \
 \
__device__ __forceinline__ void wgmma_rs_m64n64k16_##TY##_tb(float (&d)[32], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TY "." #TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1)); \
} \
 \
__device__ __forceinline__ void wgmma_rs_m64n128k16_##TY##_tb(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." #TY "." #TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1)); \
} \
 \
__device__ __forceinline__ void wgmma_rs_m64n256k16_##TY##_tb(float (&d)[128], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long db) { \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TY "." #TY " " \
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n" \
        "}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1)); \
}

ATTN_WGMMA_WRAPPERS(bf16)
ATTN_WGMMA_WRAPPERS(f16)
#undef ATTN_WGMMA_WRAPPERS

// ---- end of generated wrappers ----

template <typename T> struct Ops;
template <> struct Ops<__nv_bfloat16> {
    __device__ __forceinline__ static void qk(float (&d)[32], unsigned long long a, unsigned long long b) {
        wgmma_ss_m64n64k16_bf16(d, a, b);
    }
    template <int N>
    __device__ __forceinline__ static void pv(float (&d)[N / 2], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long b) {
        if constexpr (N == 256) wgmma_rs_m64n256k16_bf16_tb(d, a0, a1, a2, a3, b);
        else if constexpr (N == 128) wgmma_rs_m64n128k16_bf16_tb(d, a0, a1, a2, a3, b);
        else wgmma_rs_m64n64k16_bf16_tb(d, a0, a1, a2, a3, b);
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};
template <> struct Ops<__half> {
    __device__ __forceinline__ static void qk(float (&d)[32], unsigned long long a, unsigned long long b) {
        wgmma_ss_m64n64k16_f16(d, a, b);
    }
    template <int N>
    __device__ __forceinline__ static void pv(float (&d)[N / 2], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long b) {
        if constexpr (N == 256) wgmma_rs_m64n256k16_f16_tb(d, a0, a1, a2, a3, b);
        else if constexpr (N == 128) wgmma_rs_m64n128k16_f16_tb(d, a0, a1, a2, a3, b);
        else wgmma_rs_m64n64k16_f16_tb(d, a0, a1, a2, a3, b);
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};

// S = Q.K^T for one 64-key tile: D/16 wgmma m64n64k16 over the SW128 tiles.
template <int D, typename T>
__device__ __forceinline__ void qk_tile(float (&acc_s)[32], unsigned q_wg, unsigned sK) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        // Column block of 64 elements, then 16-element (32-byte) step inside its swizzle row.
        const unsigned blk = ks * 16 / ATOM_COLS;
        const unsigned col = (ks % (ATOM_COLS / 16)) * 32;
        const unsigned qa = q_wg + blk * (BLOCK_M * 128) + col;
        const unsigned ka = sK + blk * (BLOCK_N * 128) + col;
        Ops<T>::qk(acc_s, desc_sw128(qa, 16, SBO), desc_sw128(ka, 16, SBO));
    }
}


// The output gate's sigmoid, 1 / (1 + e^-x), with the reciprocal as rcp.rn:
// correctly rounded, so the same bits as the IEEE division `1.0f / y`,
// without the general division's sequence and slow-path branch (y >= 1 or
// inf or NaN here). The paged kernel's epilogue and both split combines.
__device__ __forceinline__ float sigmoid_(float x) { return __frcp_rn(1.0f + expf(-x)); }

// Combines the splits' partials of one output row (blockIdx.x over the rows):
// out = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), M = max_s lse_s, times
// sigmoid(gate) at the same element when gate is not null.
// A NaN partial makes the row NaN, as the unsplit kernel does; empty splits
// (lse -inf) weigh 0.
// One CTA (COMBINE_THREADS) per (row, COMBINE_QUADS float4 column quads):
// the splits' log2-sum-exps reduced in parallel (max, NaN flag, then each
// split's weight in shared memory), then each quad's splits shared by
// COMBINE_THREADS / COMBINE_QUADS threads whose partial sums meet in shared
// memory. d % (4 * COMBINE_QUADS) == 0; grid (rows, d / (4 * COMBINE_QUADS)).
// The warp's max of the splits' log2-sum-exps part_lse[s * rows + row] over
// s = first, first + step, ... below splits (its lanes' firsts differing), and
// in `nan` whether any of them is NaN (both the same in every lane).
__device__ __forceinline__ float warp_lse_max(const float* __restrict__ part_lse, int rows, int row,
                                              int splits, int first, int step, int& nan) {
    float m = -INFINITY;
    int bad = 0;
    for (int s = first; s < splits; s += step) {
        const float l = part_lse[(size_t)s * rows + row];
        bad |= l != l;
        m = fmaxf(m, l);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    nan = __any_sync(0xffffffffu, bad);
    return m;
}

constexpr int COMBINE_THREADS = 256;
constexpr int COMBINE_QUADS = 16;
constexpr int COMBINE_MAX_SPLITS = 1024;
template <typename T>
__device__ __forceinline__ void split_combine(const float* __restrict__ part_o,
                                              const float* __restrict__ part_lse, T* __restrict__ out,
                                              const T* __restrict__ gate, int rows, int d, int splits) {
    __shared__ float wsplit[COMBINE_MAX_SPLITS];
    __shared__ float red[COMBINE_THREADS / 32];
    __shared__ float4 acc[COMBINE_THREADS];
    __shared__ float row_max, row_den;
    __shared__ int row_nan;
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Max of the log2-sum-exps, and whether any is NaN.
    int nan;
    float m = warp_lse_max(part_lse, rows, row, splits, tid, COMBINE_THREADS, nan);
    if (tid == 0) row_nan = 0;
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (nan) row_nan = 1;
    if (tid == 0) {
        float mm = red[0];
        for (int w = 1; w < COMBINE_THREADS / 32; ++w) mm = fmaxf(mm, red[w]);
        row_max = mm;
    }
    __syncthreads();
    // Each split's weight (0 for an empty split) and their sum.
    float den = 0.f;
    for (int s = tid; s < splits; s += COMBINE_THREADS) {
        const float l = part_lse[(size_t)s * rows + row];
        const float w = l == -INFINITY ? 0.f : exp2f(l - row_max);
        wsplit[s] = w;
        den += w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    __syncthreads();
    if (lane == 0) red[warp] = den;
    __syncthreads();
    if (tid == 0) {
        float dd = 0.f;
        for (int w = 0; w < COMBINE_THREADS / 32; ++w) dd += red[w];
        row_den = dd;
    }
    // Columns: this CTA's quad q = tid % COMBINE_QUADS, splits s = g (mod groups).
    const int quads = d >> 2;
    constexpr int groups = COMBINE_THREADS / COMBINE_QUADS;
    const int q = blockIdx.y * COMBINE_QUADS + tid % COMBINE_QUADS, g = tid / COMBINE_QUADS;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* po = reinterpret_cast<const float4*>(part_o);
#pragma unroll 4
    for (int s = g; s < splits; s += groups) {
        const float w = wsplit[s];
        const float4 v = po[((size_t)s * rows + row) * quads + q];
        sum.x += w * v.x;
        sum.y += w * v.y;
        sum.z += w * v.z;
        sum.w += w * v.w;
    }
    acc[tid] = sum;
    __syncthreads();
    if (tid < COMBINE_QUADS) {
        float4 t = acc[tid];
        for (int k = 1; k < groups; ++k) {
            const float4 v = acc[k * COMBINE_QUADS + tid];
            t.x += v.x;
            t.y += v.y;
            t.z += v.z;
            t.w += v.w;
        }
        const float inv_nan = __int_as_float(0x7fffffff);
        const bool bad = row_nan != 0;
        const float dn = row_den;
        const size_t at = (size_t)row * d + 4 * (blockIdx.y * COMBINE_QUADS + tid);
        float r[4] = {bad ? inv_nan : t.x / dn, bad ? inv_nan : t.y / dn, bad ? inv_nan : t.z / dn,
                      bad ? inv_nan : t.w / dn};
        if (gate) {
#pragma unroll
            for (int j = 0; j < 4; ++j) r[j] *= sigmoid_(static_cast<float>(gate[at + j]));
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) out[at + j] = static_cast<T>(r[j]);
    }
}


}  // namespace headroom_wg
