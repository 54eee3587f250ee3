// Gated delta rule, chunked (WY / UT-transform) form for prefill.
//
// Semantics (transformers' torch_recurrent_gated_delta_rule with
// use_qk_l2norm_in_kernel=True): per value head h (key head h / (hv/hk)),
// q and k L2-normalised (x * rsqrt(sum x^2 + 1e-6)), q scaled by 1/sqrt(DK);
// per token: S *= exp(g); delta = (v - S^T k) * beta; S += k (x) delta;
// o = S^T q. f32 state and accumulation, bf16 inputs and output.
//
// Within a chunk of BT rows with G = inclusive cumsum of g (chunk-local):
//   A[i][j] = beta_i exp(G_i - G_j) k_i.k_j  (j < i),  T = (I + A)^-1
//   W = T (beta exp(G) K),  U = T (beta V)
//   delta = U - W S0                           (S0: state at chunk start)
//   o_i = exp(G_i) S0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i.k_j) delta_j
//   S1 = exp(G_L) S0 + sum_j exp(G_L - G_j) k_j delta_j^T
//
// Two kernels:
// * gdn_chunk_prep_bf16, one CTA per (chunk, value head), all in parallel:
//   normalises q/k, builds A and P (the masked, decayed q.k^T), inverts
//   (I + A) by blocked forward substitution (16x16 diagonal blocks, then the
//   off-diagonal blocks diagonal by diagonal), and writes W, U, P (bf16) and
//   per-row factors (f32) to a scratch buffer.
// * gdn_chunk_scan_bf16 / _bv64_bf16, one CTA per (32 or 64 value columns,
//   value head, sequence):
//   walks the chunks of its sequence in order with its 128 x BV slice of the
//   state in f32 registers; per chunk three tensor-core products
//   (delta = U - W S0 and Q S0; o += P delta; S += K^T delta). The next
//   chunk's tiles stream in with cp.async while the current one computes.
//   Eight warps: each owns a 16 x 16 piece of the chunk's delta and output
//   and 16 key rows of the state slice.
// Chunks never straddle sequences; rows past a sequence's end are zeros.
// All matmuls use mma.sync m16n8k16 (bf16 in, f32 accumulate).

#include <cuda_bf16.h>

namespace gdn {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;

constexpr int DK = 128;          // key head dim
constexpr int DV = 128;          // value head dim
constexpr int BT = 64;           // chunk rows
constexpr int BV_NARROW = 32;    // value columns per scan CTA: 4 CTAs per head
constexpr int BV_WIDE = 64;      // or 2 CTAs per head (half the tile traffic)
constexpr int PREP_THREADS = 128;
constexpr int SCAN_WARPS = 8;
constexpr int SCAN_THREADS = SCAN_WARPS * 32;
constexpr int MAX_SEQS = 128;    // sequences per launch (kernel parameter table)
constexpr int FAC = 132;         // floats per (chunk, head): qf[64], kf[64], exp(G_L), pad
constexpr float L2_EPS = 1e-6f;

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

__device__ __forceinline__ unsigned ld32(const bf16* p) { return *reinterpret_cast<const unsigned*>(p); }

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Fragments by ldmatrix (one instruction for 4 or 2 8x8 pieces) unless
// built with -DGDN_LDMATRIX=0 (four / two 32-bit shared loads).
#ifndef GDN_LDMATRIX
#define GDN_LDMATRIX 1
#endif

// A fragment (16 x 16) of a row-major [m][k] tile with row stride ld
// (ldmatrix: rows 16-byte aligned, ld * 2 a multiple of 16).
__device__ __forceinline__ void frag_a(unsigned* a, const bf16* s, int ld, int m0, int k0, int lane) {
#if GDN_LDMATRIX
    const bf16* p = s + (m0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_addr(p)));
#else
    const int g = lane >> 2, t = lane & 3;
    const bf16* p = s + (m0 + g) * ld + k0 + 2 * t;
    a[0] = ld32(p);
    a[1] = ld32(p + 8 * ld);
    a[2] = ld32(p + 8);
    a[3] = ld32(p + 8 * ld + 8);
#endif
}

// B fragment (16 x 8) of a tile stored [n][k] (k contiguous) with row stride ld.
__device__ __forceinline__ void frag_b(unsigned* b, const bf16* s, int ld, int n0, int k0, int lane) {
#if GDN_LDMATRIX
    const bf16* p = s + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
#else
    const int g = lane >> 2, t = lane & 3;
    const bf16* p = s + (n0 + g) * ld + k0 + 2 * t;
    b[0] = ld32(p);
    b[1] = ld32(p + 8);
#endif
}


__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// Thread-block clusters (the scan's column-block CTAs of one head): mbarriers,
// bulk copies multicast to every CTA of the cluster, the cluster barrier.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred P1;\nWAIT_LOOP:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra WAIT_DONE;\nbra WAIT_LOOP;\nWAIT_DONE:\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_multicast(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                               unsigned short mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1], %2, [%3], %4;\n" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "h"(mask)
        : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sequence that owns global chunk c (chunk0 is increasing).
__device__ __forceinline__ int seq_of_chunk(const SeqTable& tab, int c) {
    int lo = 0, hi = tab.n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (tab.chunk0[mid] <= c) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// ---------------------------------------------------------------- prep ----

extern __shared__ __align__(16) unsigned char dyn_smem[];

// Shared memory of the prep kernel (bytes).
constexpr int PREP_R1 = 2 * BT * LD128 * 2;           // Ks | Qs, later Af | Tf (f32)
constexpr int PREP_TS = BT * LD64 * 2;                // T in bf16
constexpr int PREP_KBT = DK * LD64 * 2;               // (beta exp(G) k)^T
constexpr int PREP_VBT = DV * LD64 * 2;               // (beta v)^T
constexpr int PREP_X = 3 * 16 * 16 * 4;               // off-diagonal partial products
constexpr int PREP_V = BT * LD128 * 2;                // raw v rows (cp.async staging)
constexpr int PREP_SMEM = PREP_R1 + PREP_TS + PREP_KBT + PREP_VBT + PREP_X + 3 * BT * 4 + PREP_V;
constexpr int LDF = BT + 1;                           // f32 [64][65]
static_assert(2 * BT * LDF * 4 <= PREP_R1, "Af and Tf fit in the K/Q region");
static_assert(2 * PREP_SMEM <= 228 * 1024, "two prep CTAs per SM");

extern "C" __global__ void __launch_bounds__(PREP_THREADS) gdn_chunk_prep_v1_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    unsigned char* smem = dyn_smem;
    bf16* Ks = reinterpret_cast<bf16*>(smem);
    bf16* Qs = Ks + BT * LD128;
    float* Af = reinterpret_cast<float*>(smem);
    float* Tf = Af + BT * LDF;
    bf16* Ts = reinterpret_cast<bf16*>(smem + PREP_R1);
    bf16* KbT = reinterpret_cast<bf16*>(smem + PREP_R1 + PREP_TS);
    bf16* VbT = reinterpret_cast<bf16*>(smem + PREP_R1 + PREP_TS + PREP_KBT);
    float* X = reinterpret_cast<float*>(smem + PREP_R1 + PREP_TS + PREP_KBT + PREP_VBT);
    float* Gs = X + 3 * 256;
    float* Gc = Gs + BT;
    float* Bs = Gc + BT;
    bf16* Vs = reinterpret_cast<bf16*>(Bs + BT);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int c = blockIdx.x, h = blockIdx.y;
    const int s = seq_of_chunk(tab, c);
    const int lc = c - tab.chunk0[s];
    const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
    const int nrows = min(BT, tab.rows[s] - lc * BT);
    const int kh = h / (hv / hk);
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const size_t tile = (size_t)c * hv + h;

    // Raw q, k, v rows into shared memory in one burst (zeros past the sequence).
    for (int e = tid; e < BT * 16; e += PREP_THREADS) {
        const int r = e >> 4, ch = (e & 15) * 8;
        const bool ok = r < nrows;
        const bf16* src = qkv + (row0 + r) * ld_qkv;
        cp_async_16(Qs + r * LD128 + ch, ok ? src + kh * DK + ch : qkv, ok);
        cp_async_16(Ks + r * LD128 + ch, ok ? src + (long long)(hk + kh) * DK + ch : qkv, ok);
        cp_async_16(Vs + r * LD128 + ch, ok ? src + 2LL * hk * DK + (long long)h * DV + ch : qkv, ok);
    }
    cp_async_commit();
    if (tid < BT) {
        const bool ok = tid < nrows;
        Gs[tid] = ok ? gdec[(row0 + tid) * hv + h] : 0.f;
        Bs[tid] = ok ? beta[(row0 + tid) * hv + h] : 0.f;
    }
    __syncthreads();
    if (tid < BT) {  // inclusive scan: within each warp, then warp 1 adds warp 0's total
        float v = Gs[tid];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float n = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += n;
        }
        Gc[tid] = v;
    }
    cp_async_wait_all();
    __syncthreads();
    if (tid >= 32 && tid < BT) Gc[tid] += Gc[31];
    __syncthreads();
    const float GL = Gc[BT - 1];  // padded rows have g = 0

    // Rows (a warp each): normalise q and k in place, scale, lay out k and v
    // transposed for W and U. Lane owns columns lane + 32e (conflict-light).
    const float qscale = rsqrtf((float)DK);
    for (int r = warp; r < BT; r += PREP_THREADS / 32) {
        const bool ok = r < nrows;
        float q[4], k[4], v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = lane + 32 * e;
            q[e] = __bfloat162float(Qs[r * LD128 + col]);
            k[e] = __bfloat162float(Ks[r * LD128 + col]);
            v[e] = __bfloat162float(Vs[r * LD128 + col]);
        }
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) { sq += q[e] * q[e]; sk += k[e] * k[e]; }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        const float iq = rsqrtf(sq + L2_EPS) * qscale, ik = rsqrtf(sk + L2_EPS);
        const float b = Bs[r], eg = __expf(Gc[r]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = lane + 32 * e;
            Qs[r * LD128 + col] = __float2bfloat16(q[e] * iq);
            Ks[r * LD128 + col] = __float2bfloat16(k[e] * ik);
            KbT[col * LD64 + r] = __float2bfloat16(k[e] * ik * b * eg);
            VbT[col * LD64 + r] = __float2bfloat16(v[e] * b);
        }
        if (lane == 0) {
            float* f = fac_out + tile * FAC;
            f[r] = ok ? iq * eg : 0.f;
            f[BT + r] = ok ? ik * __expf(GL - Gc[r]) : 0.f;
            if (r == 0) f[2 * BT] = __expf(GL);
        }
    }
    __syncthreads();

    // K K^T and Q K^T: warp w owns rows 16w..16w+15, all 64 columns.
    const int g8 = lane >> 2, t4 = lane & 3, m0 = 16 * warp;
    float acc_a[8][4], acc_p[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_a[nt][e] = acc_p[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
        unsigned ak[4], aq[4];
        frag_a(ak, Ks, LD128, m0, 16 * ks, lane);
        frag_a(aq, Qs, LD128, m0, 16 * ks, lane);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            unsigned b[2];
            frag_b(b, Ks, LD128, 8 * nt, 16 * ks, lane);
            mma16816(acc_a[nt], ak, b);
            mma16816(acc_p[nt], aq, b);
        }
    }
    // P (masked j <= i, decayed) straight to global.
    bf16* P = p_out + tile * (BT * BT);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int i = m0 + g8 + 8 * hf, j = 8 * nt + 2 * t4;
            const float p0 = j <= i ? acc_p[nt][2 * hf] * __expf(Gc[i] - Gc[j]) : 0.f;
            const float p1 = j + 1 <= i ? acc_p[nt][2 * hf + 1] * __expf(Gc[i] - Gc[j + 1]) : 0.f;
            *reinterpret_cast<bf162*>(P + i * BT + j) = __floats2bfloat162_rn(p0, p1);
        }
    __syncthreads();  // Ks/Qs no longer read: the region becomes Af | Tf
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = m0 + g8 + 8 * hf, j = 8 * nt + 2 * t4 + e;
                Af[i * LDF + j] = j < i ? acc_a[nt][2 * hf + e] * Bs[i] * __expf(Gc[i] - Gc[j]) : 0.f;
            }
    // Zero T above its diagonal blocks.
    for (int e = tid; e < BT * BT; e += PREP_THREADS) {
        const int i = e / BT, j = e % BT;
        if ((j >> 4) > (i >> 4)) Tf[i * LDF + j] = 0.f;
    }
    __syncthreads();

    // T = (I + A)^-1. Diagonal 16x16 blocks: one thread per block column,
    // the column in registers (row i needs rows j < i of the same column).
    if (tid < BT) {
        const int b0 = (tid >> 4) * 16, cc = tid & 15;
        float tcol[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) tcol[i] = i == cc ? 1.f : 0.f;
#pragma unroll
        for (int i = 1; i < 16; ++i) {
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < i; ++j) acc += Af[(b0 + i) * LDF + b0 + j] * tcol[j];
            if (i > cc) tcol[i] = -acc;
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) Tf[(b0 + i) * LDF + b0 + cc] = tcol[i];
    }
    __syncthreads();
    // Off-diagonal blocks, diagonal by diagonal: T_IJ = -T_II sum_{K=J}^{I-1} A_IK T_KJ.
    for (int d = 1; d < 4; ++d) {
        const int nb = 4 - d;
        for (int e = tid; e < nb * 256; e += PREP_THREADS) {
            const int J = e >> 8, I = J + d, r = (e >> 4) & 15, cc = e & 15;
            float acc = 0.f;
            for (int m = 16 * J; m < 16 * I; ++m) acc += Af[(16 * I + r) * LDF + m] * Tf[m * LDF + 16 * J + cc];
            X[e] = acc;
        }
        __syncthreads();
        for (int e = tid; e < nb * 256; e += PREP_THREADS) {
            const int J = e >> 8, I = J + d, r = (e >> 4) & 15, cc = e & 15;
            float acc = 0.f;
            for (int m = 0; m <= r; ++m) acc += Tf[(16 * I + r) * LDF + 16 * I + m] * X[(J << 8) + m * 16 + cc];
            Tf[(16 * I + r) * LDF + 16 * J + cc] = -acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < BT * BT; e += PREP_THREADS) {
        const int i = e / BT, j = e % BT;
        Ts[i * LD64 + j] = __float2bfloat16(Tf[i * LDF + j]);
    }
    __syncthreads();

    // W = T (beta exp(G) K), U = T (beta V): rows 16w.., 128 columns each.
#pragma unroll 1
    for (int which = 0; which < 2; ++which) {
        const bf16* Bt = which == 0 ? KbT : VbT;
        bf16* dst = (which == 0 ? w_out : u_out) + tile * (BT * DK);
        float acc[16][4];
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < BT / 16; ++ks) {
            unsigned a[4];
            frag_a(a, Ts, LD64, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < 16; ++nt) {
                unsigned b[2];
                frag_b(b, Bt, LD64, 8 * nt, 16 * ks, lane);
                mma16816(acc[nt], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int i = m0 + g8 + 8 * hf, j = 8 * nt + 2 * t4;
                *reinterpret_cast<bf162*>(dst + i * DK + j) =
                    __floats2bfloat162_rn(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
            }
    }
}

// ------------------------------------------------------- prep (v2) ----
//
// Eight warps per (chunk, value head). Differences from v1: v goes from
// global straight to (beta v)^T (no staging), the off-diagonal blocks of
// T = (I + A)^-1 are 16x16 products on the tensor cores in 3xTF32 (split
// hi/lo operands: f32-level accuracy), and W, U, P leave through shared
// memory as coalesced 16-byte stores.

constexpr int PREP2_THREADS = 256;
constexpr int PREP2_WARPS = PREP2_THREADS / 32;
constexpr int LDF2 = BT + 4;     // f32 [64][68]: tf32 fragment reads hit distinct banks
constexpr int LDX = 24;          // f32 [16][24] per-warp scratch, same reason
constexpr int P2_R1 = 2 * BT * LD128 * 2;   // Ks | Qs, then Af | Tf (f32), then W | U staging
constexpr int P2_TS = BT * LD64 * 2;        // P staging, then X scratch, then T (bf16)
constexpr int P2_KBT = DK * LD64 * 2;
constexpr int P2_VBT = DV * LD64 * 2;
constexpr int PREP2_SMEM = P2_R1 + P2_TS + P2_KBT + P2_VBT + 3 * BT * 4;
static_assert(2 * BT * LDF2 * 4 <= P2_R1, "Af and Tf fit in the K/Q region");
static_assert(4 * 16 * LDX * 4 <= P2_TS, "X scratch fits in the T region");
static_assert(2 * PREP2_SMEM <= 227 * 1024, "two prep CTAs per SM");

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

// c += a b in 3xTF32 (a = ah + al, b = bh + bl; the al bl term dropped).
__device__ __forceinline__ void mma1688x3(float* c, const float* a, const float* b) {
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
    mma1688(c, al, bh);
    mma1688(c, ah, bl);
    mma1688(c, ah, bh);
}

// acc (16 x 16 as two n8 tiles) += A[am0.., ak0..] (16 x 16) * B[bk0.., bn0..] (16 x 16),
// both f32 row-major in shared memory.
__device__ __forceinline__ void mm16_f32(float (*acc)[4], const float* A, int lda, int am0, int ak0,
                                         const float* B, int ldb, int bk0, int bn0, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
        float a[4];
        const float* pa = A + (am0 + g) * lda + ak0 + 8 * ks + t;
        a[0] = pa[0];
        a[1] = pa[8 * lda];
        a[2] = pa[4];
        a[3] = pa[8 * lda + 4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            float b[2];
            const float* pb = B + (bk0 + 8 * ks + t) * ldb + bn0 + 8 * nt + g;
            b[0] = pb[0];
            b[1] = pb[4 * ldb];
            mma1688x3(acc[nt], a, b);
        }
    }
}

extern "C" __global__ void __launch_bounds__(PREP2_THREADS, 2) gdn_chunk_prep_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    unsigned char* smem = dyn_smem;
    bf16* Ks = reinterpret_cast<bf16*>(smem);
    bf16* Qs = Ks + BT * LD128;
    float* Af = reinterpret_cast<float*>(smem);
    float* Tf = Af + BT * LDF2;
    bf16* Ts = reinterpret_cast<bf16*>(smem + P2_R1);
    float* Xs = reinterpret_cast<float*>(smem + P2_R1);
    bf16* KbT = reinterpret_cast<bf16*>(smem + P2_R1 + P2_TS);
    bf16* VbT = reinterpret_cast<bf16*>(smem + P2_R1 + P2_TS + P2_KBT);
    float* Gs = reinterpret_cast<float*>(smem + P2_R1 + P2_TS + P2_KBT + P2_VBT);
    float* Gc = Gs + BT;
    float* Bs = Gc + BT;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g8 = lane >> 2, t4 = lane & 3;
    const int c = blockIdx.x, h = blockIdx.y;
    const int s = seq_of_chunk(tab, c);
    const int lc = c - tab.chunk0[s];
    const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
    const int nrows = min(BT, tab.rows[s] - lc * BT);
    const int kh = h / (hv / hk);
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const size_t tile = (size_t)c * hv + h;

    // q, k rows by cp.async (zeros past the sequence); v rows into registers:
    // this thread's row vr, 8-column pieces (tid / 64) + 4j.
    for (int e = tid; e < BT * 16; e += PREP2_THREADS) {
        const int r = e >> 4, ch = (e & 15) * 8;
        const bool ok = r < nrows;
        const bf16* src = qkv + (row0 + r) * ld_qkv;
        cp_async_16(Qs + r * LD128 + ch, ok ? src + kh * DK + ch : qkv, ok);
        cp_async_16(Ks + r * LD128 + ch, ok ? src + (long long)(hk + kh) * DK + ch : qkv, ok);
    }
    cp_async_commit();
    const int vr = tid & (BT - 1);
    uint4 vreg[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int col = ((tid >> 6) + 4 * j) * 8;
        vreg[j] = vr < nrows ? *reinterpret_cast<const uint4*>(
                                   qkv + (row0 + vr) * ld_qkv + 2LL * hk * DK + (long long)h * DV + col)
                             : make_uint4(0, 0, 0, 0);
    }
    if (tid < BT) {
        const bool ok = tid < nrows;
        Gs[tid] = ok ? gdec[(row0 + tid) * hv + h] : 0.f;
        Bs[tid] = ok ? beta[(row0 + tid) * hv + h] : 0.f;
    }
    __syncthreads();
    if (tid < BT) {  // inclusive scan: within each warp, then warp 1 adds warp 0's total
        float v = Gs[tid];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float n = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += n;
        }
        Gc[tid] = v;
    }
    {  // (beta v)^T: a warp writes 32 consecutive rows of one column (conflict-free)
        const float b = Bs[vr];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = ((tid >> 6) + 4 * j) * 8;
            const bf162* v2 = reinterpret_cast<const bf162*>(&vreg[j]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __bfloat1622float2(v2[i]);
                VbT[(col + 2 * i) * LD64 + vr] = __float2bfloat16(f.x * b);
                VbT[(col + 2 * i + 1) * LD64 + vr] = __float2bfloat16(f.y * b);
            }
        }
    }
    cp_async_wait_all();
    __syncthreads();
    if (tid >= 32 && tid < BT) Gc[tid] += Gc[31];
    __syncthreads();
    const float GL = Gc[BT - 1];  // padded rows have g = 0

    // Rows (a warp each): normalise q and k in place, scale, (beta exp(G) k)^T.
    const float qscale = rsqrtf((float)DK);
#pragma unroll 2
    for (int r = warp; r < BT; r += PREP2_WARPS) {
        const bool ok = r < nrows;
        float q[4], k[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = lane + 32 * e;
            q[e] = __bfloat162float(Qs[r * LD128 + col]);
            k[e] = __bfloat162float(Ks[r * LD128 + col]);
        }
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) { sq += q[e] * q[e]; sk += k[e] * k[e]; }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        const float iq = rsqrtf(sq + L2_EPS) * qscale, ik = rsqrtf(sk + L2_EPS);
        const float b = Bs[r], eg = __expf(Gc[r]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = lane + 32 * e;
            Qs[r * LD128 + col] = __float2bfloat16(q[e] * iq);
            Ks[r * LD128 + col] = __float2bfloat16(k[e] * ik);
            KbT[col * LD64 + r] = __float2bfloat16(k[e] * ik * b * eg);
        }
        if (lane == 0) {
            float* f = fac_out + tile * FAC;
            f[r] = ok ? iq * eg : 0.f;
            f[BT + r] = ok ? ik * __expf(GL - Gc[r]) : 0.f;
            if (r == 0) f[2 * BT] = __expf(GL);
        }
    }
    __syncthreads();

    // K K^T and Q K^T: warp w owns rows 16(w%4).., columns 32(w/4)..+31;
    // a piece wholly above the diagonal is zero and skips the products.
    const int m0 = 16 * (warp & 3), c0 = 32 * (warp >> 2);
    float acc_a[4][4], acc_p[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_a[nt][e] = acc_p[nt][e] = 0.f;
    if (c0 <= m0 + 15) {
#pragma unroll
        for (int ks = 0; ks < DK / 16; ++ks) {
            unsigned ak[4], aq[4];
            frag_a(ak, Ks, LD128, m0, 16 * ks, lane);
            frag_a(aq, Qs, LD128, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                unsigned b[2];
                frag_b(b, Ks, LD128, c0 + 8 * nt, 16 * ks, lane);
                mma16816(acc_a[nt], ak, b);
                mma16816(acc_p[nt], aq, b);
            }
        }
    }
    // P (masked j <= i, decayed) to its staging tile.
    bf16* Pst = Ts;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int i = m0 + g8 + 8 * hf, j = c0 + 8 * nt + 2 * t4;
            const float p0 = j <= i ? acc_p[nt][2 * hf] * __expf(Gc[i] - Gc[j]) : 0.f;
            const float p1 = j + 1 <= i ? acc_p[nt][2 * hf + 1] * __expf(Gc[i] - Gc[j + 1]) : 0.f;
            *reinterpret_cast<bf162*>(Pst + i * LD64 + j) = __floats2bfloat162_rn(p0, p1);
        }
    __syncthreads();  // Ks/Qs no longer read: the region becomes Af | Tf
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int i = m0 + g8 + 8 * hf, j = c0 + 8 * nt + 2 * t4;
            float2 a;
            a.x = j < i ? acc_a[nt][2 * hf] * Bs[i] * __expf(Gc[i] - Gc[j]) : 0.f;
            a.y = j + 1 < i ? acc_a[nt][2 * hf + 1] * Bs[i] * __expf(Gc[i] - Gc[j + 1]) : 0.f;
            *reinterpret_cast<float2*>(Af + i * LDF2 + j) = a;
        }
    {  // P out, 16 bytes a thread
        bf16* P = p_out + tile * (BT * BT);
        for (int e = tid; e < BT * (BT / 8); e += PREP2_THREADS) {
            const int r = e >> 3, ch = (e & 7) * 8;
            *reinterpret_cast<uint4*>(P + r * BT + ch) = *reinterpret_cast<const uint4*>(Pst + r * LD64 + ch);
        }
    }
    __syncthreads();

    // T = (I + A)^-1. Diagonal 16x16 blocks: one thread per block column,
    // the column in registers (row i needs rows j < i of the same column).
    if (tid < BT) {
        const int b0 = (tid >> 4) * 16, cc = tid & 15;
        float tcol[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) tcol[i] = i == cc ? 1.f : 0.f;
#pragma unroll
        for (int i = 1; i < 16; ++i) {
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < i; ++j) acc += Af[(b0 + i) * LDF2 + b0 + j] * tcol[j];
            if (i > cc) tcol[i] = -acc;
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) Tf[(b0 + i) * LDF2 + b0 + cc] = tcol[i];
    }
    __syncthreads();
    // Off-diagonal blocks, block row by block row: warp J computes
    // X = sum_{K=J}^{I-1} A_IK T_KJ, then T_IJ = -T_II X (tensor cores, 3xTF32).
#pragma unroll 1
    for (int I = 1; I < 4; ++I) {
        if (warp < I) {
            const int J = warp;
            float x[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 1
            for (int K = J; K < I; ++K) mm16_f32(x, Af, LDF2, 16 * I, 16 * K, Tf, LDF2, 16 * K, 16 * J, lane);
            float* Xw = Xs + warp * 16 * LDX;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    *reinterpret_cast<float2*>(Xw + (g8 + 8 * hf) * LDX + 8 * nt + 2 * t4) =
                        make_float2(x[nt][2 * hf], x[nt][2 * hf + 1]);
            __syncwarp();
            float y[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            mm16_f32(y, Tf, LDF2, 16 * I, 16 * I, Xw, LDX, 0, 0, lane);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    *reinterpret_cast<float2*>(Tf + (16 * I + g8 + 8 * hf) * LDF2 + 16 * J + 8 * nt + 2 * t4) =
                        make_float2(-y[nt][2 * hf], -y[nt][2 * hf + 1]);
            __syncwarp();
        }
        __syncthreads();
    }
    // T in bf16 (zero above the diagonal blocks).
    for (int e = tid; e < BT * BT / 2; e += PREP2_THREADS) {
        const int i = e >> 5, j = (e & 31) * 2;
        const float2 v = (j >> 4) > (i >> 4) ? make_float2(0.f, 0.f)
                                             : *reinterpret_cast<const float2*>(Tf + i * LDF2 + j);
        *reinterpret_cast<bf162*>(Ts + i * LD64 + j) = __floats2bfloat162_rn(v.x, v.y);
    }
    __syncthreads();

    // W = T (beta exp(G) K) (warps 0-3), U = T (beta V) (warps 4-7): rows
    // 16(w%4).., 128 columns, staged over the dead Af | Tf region.
    {
        const int which = warp >> 2;
        const bf16* Bt = which == 0 ? KbT : VbT;
        bf16* st = Ks + which * (BT * LD128);
        float acc[16][4];
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < BT / 16; ++ks) {
            unsigned a[4];
            frag_a(a, Ts, LD64, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < 16; ++nt) {
                unsigned b[2];
                frag_b(b, Bt, LD64, 8 * nt, 16 * ks, lane);
                mma16816(acc[nt], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int i = m0 + g8 + 8 * hf, j = 8 * nt + 2 * t4;
                *reinterpret_cast<bf162*>(st + i * LD128 + j) =
                    __floats2bfloat162_rn(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
            }
    }
    __syncthreads();
    for (int e = tid; e < 2 * BT * 16; e += PREP2_THREADS) {
        const int which = e >> 10, r = (e >> 4) & (BT - 1), ch = (e & 15) * 8;
        bf16* dst = (which == 0 ? w_out : u_out) + tile * (BT * DK);
        *reinterpret_cast<uint4*>(dst + r * DK + ch) =
            *reinterpret_cast<const uint4*>(Ks + which * (BT * LD128) + r * LD128 + ch);
    }
}

// ---------------------------------------------------------------- scan ----

// Scan layout for BV value columns per CTA. Work split: phase-1/2 tiles
// (64 x BV) as 4 row tiles x SCAN_WARPS/4 column groups; state tiles
// (DK x BV) as one 16-row tile per warp, all BV columns.
template <int BV, int WARPS = SCAN_WARPS>
struct ScanCfg {
    static constexpr int THREADS = WARPS * 32;
    static constexpr int SROW = WARPS < 8 ? WARPS : 8;     // warps along the state's key rows
    static constexpr int SCOL = WARPS / SROW;              // ... and along its columns
    static constexpr int SNT = (BV / 8) / SCOL;            // n8 state tiles per warp
    static constexpr int LDU = BV + 8;
    static constexpr int NT = (BV / 8) / (WARPS / 4);  // n8 tiles per warp in phases 1-2
    static constexpr int MT = (DK / 16) / SROW;        // m16 state tiles per warp
    // One stage of streamed tiles (bytes).
    static constexpr int ST_W = 0;
    static constexpr int ST_Q = ST_W + BT * LD128 * 2;
    static constexpr int ST_K = ST_Q + BT * LD128 * 2;
    static constexpr int ST_P = ST_K + BT * LD128 * 2;
    static constexpr int ST_U = ST_P + BT * LD64 * 2;
    static constexpr int ST_F = ST_U + BT * LDU * 2;
    static constexpr int STAGE = ST_F + FAC * 4;
    static constexpr int KT = 2 * STAGE;              // (kf K)^T [DK][LD64]
    static constexpr int HT = KT + DK * LD64 * 2;     // S^T in bf16 [BV][LD128]
    static constexpr int VN = HT + BV * LD128 * 2;    // delta^T [BV][LD64]
    static constexpr int SMEM = VN + BV * LD64 * 2;
    static_assert(STAGE % 16 == 0, "stages stay 16-byte aligned");
    static_assert(SMEM <= 227 * 1024, "one scan CTA fits an SM");
    static_assert(NT >= 1 && MT >= 1 && SNT >= 1, "warp split covers the tiles");
};
constexpr int SCAN_SMEM_NARROW = ScanCfg<BV_NARROW>::SMEM;
constexpr int SCAN_SMEM_WIDE = ScanCfg<BV_WIDE>::SMEM;
static_assert(ScanCfg<BV_NARROW, 2 * SCAN_WARPS>::SMEM == SCAN_SMEM_NARROW, "warps leave the layout alone");
static_assert(SCAN_SMEM_NARROW < SCAN_SMEM_WIDE, "both scan layouts instantiate");

// CL > 1: the CL = DV / BV column-block CTAs of a head form a cluster; each
// loads a 1/CL share of the rows of W, Q, K, P and multicasts it to all of
// them (one L2 read per tile instead of CL), completing on a per-stage mbarrier.
template <int BV, int WARPS, int CL>
__device__ __forceinline__ void scan_body(
    const bf16* __restrict__ qkv, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const bf16* __restrict__ p_in, const float* __restrict__ fac_in, float* __restrict__ state,
    bf16* __restrict__ out, int hk, int hv, const SeqTable& tab, int opts) {
    using C = ScanCfg<BV, WARPS>;
    constexpr int SCAN_THREADS = C::THREADS;
    unsigned char* smem = dyn_smem;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g8 = lane >> 2, t4 = lane & 3;
    const int vb = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    const int kh = h / (hv / hk);
    const int rows = tab.rows[s];
    const int nch = (rows + BT - 1) / BT;
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const long long ld_out = (long long)hv * DV;
    bf16* KT = reinterpret_cast<bf16*>(smem + C::KT);
    bf16* HT = reinterpret_cast<bf16*>(smem + C::HT);
    bf16* VN = reinterpret_cast<bf16*>(smem + C::VN);

    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + C::SMEM);
    auto load_stage = [&](int st, int lc) {
        unsigned char* base = smem + st * C::STAGE;
        const size_t tile = (size_t)(tab.chunk0[s] + lc) * hv + h;
        const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
        const int nrows = min(BT, rows - lc * BT);
        bf16* Ws = reinterpret_cast<bf16*>(base + C::ST_W);
        bf16* Qs = reinterpret_cast<bf16*>(base + C::ST_Q);
        bf16* Ks = reinterpret_cast<bf16*>(base + C::ST_K);
        bf16* Ps = reinterpret_cast<bf16*>(base + C::ST_P);
        bf16* Us = reinterpret_cast<bf16*>(base + C::ST_U);
        float* Fs = reinterpret_cast<float*>(base + C::ST_F);
        if constexpr (CL > 1) {
            // Rows vb*RPC.. of W, P (always whole tiles) and of Q, K (valid rows
            // only: the rest stay stale and are masked where read).
            constexpr int RPC = BT / CL;
            if (tid == 0) mbar_expect_tx(bars + st, BT * (DK * 2 + BT * 2) + nrows * 2 * (DK * 2));
            if (tid < 4 * RPC) {
                const int which = tid / RPC, r = vb * RPC + tid % RPC;
                const unsigned short mask = (1u << CL) - 1;
                if (which == 0) {
                    bulk_multicast(Ws + r * LD128, w_in + (tile * BT + r) * DK, DK * 2, bars + st, mask);
                } else if (which == 1) {
                    bulk_multicast(Ps + r * LD64, p_in + (tile * BT + r) * BT, BT * 2, bars + st, mask);
                } else if (r < nrows) {
                    const bf16* src = qkv + (row0 + r) * ld_qkv + (long long)(which == 2 ? kh : hk + kh) * DK;
                    bulk_multicast((which == 2 ? Qs : Ks) + r * LD128, src, DK * 2, bars + st, mask);
                }
            }
        } else {
            for (int e = tid; e < BT * 16; e += SCAN_THREADS) {
                const int r = e >> 4, ch = (e & 15) * 8;
                cp_async_16(Ws + r * LD128 + ch, w_in + (tile * BT + r) * DK + ch, true);
                const bool ok = r < nrows;
                const bf16* src = ok ? qkv + (row0 + r) * ld_qkv + kh * DK + ch : qkv;
                cp_async_16(Qs + r * LD128 + ch, src, ok);
                cp_async_16(Ks + r * LD128 + ch, ok ? src + (long long)hk * DK : qkv, ok);
            }
            for (int e = tid; e < BT * 8; e += SCAN_THREADS) {
                const int r = e >> 3, ch = (e & 7) * 8;
                cp_async_16(Ps + r * LD64 + ch, p_in + (tile * BT + r) * BT + ch, true);
            }
        }
        for (int e = tid; e < BT * (BV / 8); e += SCAN_THREADS) {
            const int r = e / (BV / 8), ch = (e % (BV / 8)) * 8;
            cp_async_16(Us + r * C::LDU + ch, u_in + (tile * BT + r) * DV + vb * BV + ch, true);
        }
        if (tid < FAC / 4) cp_async_16(Fs + 4 * tid, fac_in + tile * FAC + 4 * tid, true);
        cp_async_commit();
    };

    // State slice: warp w holds key rows 16*C::MT*(w % SROW) .. (C::MT m16 tiles)
    // x C::SNT n8 tiles from column 8*C::SNT*(w / SROW), f32.
    float* S = state + ((size_t)tab.slot[s] * hv + h) * DK * DV + vb * BV;
    const int hrow0 = 16 * C::MT * (warp % C::SROW);
    const int hcol0 = 8 * C::SNT * (warp / C::SROW);
    float acc_h[C::MT][C::SNT][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = hrow0 + 16 * mt + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
                const float2 v = *reinterpret_cast<const float2*>(S + (size_t)r * DV + cc);
                acc_h[mt][nt][2 * hf] = v.x;
                acc_h[mt][nt][2 * hf + 1] = v.y;
            }
    auto store_ht = [&]() {
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = hrow0 + 16 * mt + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
                    HT[cc * LD128 + r] = __float2bfloat16(acc_h[mt][nt][2 * hf]);
                    HT[(cc + 1) * LD128 + r] = __float2bfloat16(acc_h[mt][nt][2 * hf + 1]);
                }
    };

    if constexpr (CL > 1) {
        if (tid == 0) {
            mbar_init(bars, 1);
            mbar_init(bars + 1, 1);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        cluster_sync();
    }
    load_stage(0, 0);
    store_ht();
    const int m0 = 16 * (warp & 3);           // chunk rows of this warp (phases 1-2)
    const int n0 = C::NT * (warp >> 2);       // first n8 tile of this warp (phases 1-2)
#pragma unroll 1
    for (int lc = 0; lc < nch; ++lc) {
        const int st = (opts & 1) ? 0 : (lc & 1);
        cp_async_wait_all();
        __syncthreads();
        if constexpr (CL > 1) cluster_sync();  // every CTA is done with stage st ^ 1
        // opts (timing experiments only; results are wrong): 1 = no loads after
        // the first chunk, 2 = no arithmetic.
        if (lc + 1 < nch && !(opts & 1)) load_stage(st ^ 1, lc + 1);
        if constexpr (CL > 1) {
            if (!(opts & 1) || lc == 0) mbar_wait(bars + st, (lc >> 1) & 1);
        }
        if (opts & 2) continue;
        const unsigned char* base = smem + st * C::STAGE;
        const bf16* Ws = reinterpret_cast<const bf16*>(base + C::ST_W);
        const bf16* Qs = reinterpret_cast<const bf16*>(base + C::ST_Q);
        const bf16* Ks = reinterpret_cast<const bf16*>(base + C::ST_K);
        const bf16* Ps = reinterpret_cast<const bf16*>(base + C::ST_P);
        const bf16* Us = reinterpret_cast<const bf16*>(base + C::ST_U);
        const float* Fs = reinterpret_cast<const float*>(base + C::ST_F);

        // (kf K)^T for the state update.
        const int nrows_c = min(BT, rows - lc * BT);
        for (int e = tid; e < BT * (DK / 2); e += SCAN_THREADS) {
            const int t = e & (BT - 1), dp = e >> 6;
            float2 kk = __bfloat1622float2(*reinterpret_cast<const bf162*>(Ks + t * LD128 + 2 * dp));
            if (t >= nrows_c) kk = make_float2(0.f, 0.f);  // stale rows (cluster loads)
            const float f = Fs[BT + t];
            KT[(2 * dp) * LD64 + t] = __float2bfloat16(kk.x * f);
            KT[(2 * dp + 1) * LD64 + t] = __float2bfloat16(kk.y * f);
        }

        // delta = U - W S0 and Q S0 (rows m0..m0+15, C::NT n8 tiles from n0).
        float av[C::NT][4], ao[C::NT][4];
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) av[nt][e] = ao[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < DK / 16; ++ks) {
            unsigned aw[4], aq[4];
            frag_a(aw, Ws, LD128, m0, 16 * ks, lane);
            frag_a(aq, Qs, LD128, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt) {
                unsigned b[2];
                frag_b(b, HT, LD128, 8 * (n0 + nt), 16 * ks, lane);
                mma16816(av[nt], aw, b);
                mma16816(ao[nt], aq, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                const float2 u = __bfloat1622float2(*reinterpret_cast<const bf162*>(Us + r * C::LDU + cc));
                VN[cc * LD64 + r] = __float2bfloat16(u.x - av[nt][2 * hf]);
                VN[(cc + 1) * LD64 + r] = __float2bfloat16(u.y - av[nt][2 * hf + 1]);
                const float qf = Fs[r];
                ao[nt][2 * hf] *= qf;
                ao[nt][2 * hf + 1] *= qf;
            }
        __syncthreads();

        // o += P delta; store the valid rows.
#pragma unroll
        for (int ks = 0; ks < BT / 16; ++ks) {
            unsigned a[4];
            frag_a(a, Ps, LD64, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt) {
                unsigned b[2];
                frag_b(b, VN, LD64, 8 * (n0 + nt), 16 * ks, lane);
                mma16816(ao[nt], a, b);
            }
        }
        const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
        const int nrows = min(BT, rows - lc * BT);
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                if (r < nrows)
                    *reinterpret_cast<bf162*>(out + (row0 + r) * ld_out + (long long)h * DV + vb * BV + cc) =
                        __floats2bfloat162_rn(ao[nt][2 * hf], ao[nt][2 * hf + 1]);
            }

        // S = exp(G_L) S0 + (kf K)^T delta.
        const float egl = Fs[2 * BT];
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_h[mt][nt][e] *= egl;
#pragma unroll
        for (int ks = 0; ks < BT / 16; ++ks) {
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt) {
                unsigned a[4];
                frag_a(a, KT, LD64, hrow0 + 16 * mt, 16 * ks, lane);
#pragma unroll
                for (int nt = 0; nt < C::SNT; ++nt) {
                    unsigned b[2];
                    frag_b(b, VN, LD64, hcol0 + 8 * nt, 16 * ks, lane);
                    mma16816(acc_h[mt][nt], a, b);
                }
            }
        }
        store_ht();  // S^T for the next chunk (its readers wait at the loop head)
    }

#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = hrow0 + 16 * mt + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
                *reinterpret_cast<float2*>(S + (size_t)r * DV + cc) =
                    make_float2(acc_h[mt][nt][2 * hf], acc_h[mt][nt][2 * hf + 1]);
            }
    if constexpr (CL > 1) cluster_sync();  // no CTA leaves while the cluster still runs
}

extern "C" __global__ void __launch_bounds__(2 * SCAN_THREADS) gdn_chunk_scan_bf16(
    const bf16* __restrict__ qkv, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const bf16* __restrict__ p_in, const float* __restrict__ fac_in, float* __restrict__ state,
    bf16* __restrict__ out, int hk, int hv, SeqTable tab, int opts) {
    // SCAN_THREADS threads, or twice as many (an experiment: more warps per chunk).
    if (blockDim.x == 2 * SCAN_THREADS)
        scan_body<BV_NARROW, 2 * SCAN_WARPS, 1>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab, opts);
    else
        scan_body<BV_NARROW, SCAN_WARPS, 1>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab, opts);
}

extern "C" __global__ void __launch_bounds__(2 * SCAN_THREADS) gdn_chunk_scan_bv64_bf16(
    const bf16* __restrict__ qkv, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const bf16* __restrict__ p_in, const float* __restrict__ fac_in, float* __restrict__ state,
    bf16* __restrict__ out, int hk, int hv, SeqTable tab, int opts) {
    // SCAN_THREADS threads, or twice as many (an experiment: more warps per chunk).
    if (blockDim.x == 2 * SCAN_THREADS)
        scan_body<BV_WIDE, 2 * SCAN_WARPS, 1>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab, opts);
    else
        scan_body<BV_WIDE, SCAN_WARPS, 1>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab, opts);
}

// The same scans with the column-block CTAs of a head in one cluster
// (multicast tile loads; shared memory + 16 bytes for two mbarriers).
extern "C" __global__ void __cluster_dims__(DV / BV_NARROW, 1, 1) __launch_bounds__(2 * SCAN_THREADS)
    gdn_chunk_scan_cl_bf16(const bf16* __restrict__ qkv, const bf16* __restrict__ w_in,
                           const bf16* __restrict__ u_in, const bf16* __restrict__ p_in,
                           const float* __restrict__ fac_in, float* __restrict__ state, bf16* __restrict__ out,
                           int hk, int hv, SeqTable tab, int opts) {
    if (blockDim.x == 2 * SCAN_THREADS)
        scan_body<BV_NARROW, 2 * SCAN_WARPS, DV / BV_NARROW>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv,
                                                             tab, opts);
    else
        scan_body<BV_NARROW, SCAN_WARPS, DV / BV_NARROW>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab,
                                                         opts);
}

extern "C" __global__ void __cluster_dims__(DV / BV_WIDE, 1, 1) __launch_bounds__(2 * SCAN_THREADS)
    gdn_chunk_scan_cl_bv64_bf16(const bf16* __restrict__ qkv, const bf16* __restrict__ w_in,
                                const bf16* __restrict__ u_in, const bf16* __restrict__ p_in,
                                const float* __restrict__ fac_in, float* __restrict__ state,
                                bf16* __restrict__ out, int hk, int hv, SeqTable tab, int opts) {
    if (blockDim.x == 2 * SCAN_THREADS)
        scan_body<BV_WIDE, 2 * SCAN_WARPS, DV / BV_WIDE>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab,
                                                         opts);
    else
        scan_body<BV_WIDE, SCAN_WARPS, DV / BV_WIDE>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab,
                                                     opts);
}

}  // namespace gdn
