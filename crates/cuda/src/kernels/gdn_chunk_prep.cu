// Gated delta rule, chunked form: the per-chunk preparation kernel
// (`gdn_chunk_prep_v3_bf16` / `_v4_bf16`; the scan that consumes its output is in
// gdn_chunked.cu, whose header states the algebra). The constants, the
// sequence table and the fragment helpers both use are in gdn_common.cuh.
//
// One CTA (8 warps) per (64-row chunk, value head), all chunks in parallel:
// q, k rows by cp.async, v straight to beta v; q/k L2 norms; chunk-local
// cumsum G of g; A = beta exp(Gi - Gj) ki.kj and P = exp(Gi - Gj) qi.kj on
// mma.sync; T = (I + A)^-1 by blocked forward substitution (16x16 diagonal
// blocks by one thread per column, off-diagonal blocks as 16x16 products on
// the tensor cores in 3xTF32); W = T (beta exp(G) K), U = T (beta V). W, U, P
// (bf16) leave through shared memory as 16-byte stores, per-row factors (f32)
// beside them.
//
// Two entries (ops::gdn::PrepKernel): gdn_chunk_prep_v3_bf16 ((beta v) and
// (beta exp(G) k) kept row-major, written as 8/16-byte vectors and read as B
// operands by ldmatrix.trans; q/k rows normalised 4 columns a lane; the
// 3xTF32 hi/lo split of the A operand done once per k-step; off-diagonal
// inverse block row by block row on 1-3 warps) and gdn_chunk_prep_v4_bf16
// (the same with the off-diagonal inverse by 2x2 block doubling on all 8
// warps, one n8 half of a 16x16 block each: critical path 9 -> 3 products)
// and gdn_chunk_prep_v5_bf16 (v4's products in three CTAs per SM: 70,400
// bytes of shared memory, <= 80 registers; see PREP5_* below) and _v6 (v5
// with the q/k rows normalised by 8 lanes each, 16-byte accesses: 3 shuffle
// levels instead of 5, a quarter of the per-row scalar work a lane).
// (Run 3's v2 entry, transposed 2-byte stores, was removed in gdn4; it
// lives in commit c157701.)

// The shared constants, sequence table and helpers come first: gdn_common.cuh
// and the inverse's 3xTF32 helpers (gdn_prep_tf32.cuh) are prepended to this
// source (kernels/mod.rs), inside `namespace gdn`.

constexpr float L2_EPS = 1e-6f;

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

extern __shared__ __align__(16) unsigned char dyn_smem[];

// ---------------------------------------------------------------- prep ----
//
// Eight warps per (chunk, value head), two CTAs per SM. (The first version,
// 4 warps with the off-diagonal inverse as scalar loops over shared memory
// and a staging copy of v, was 1.8x slower: docs/perf/cuda-gdn.md, run 3.)

constexpr int PREP_THREADS = 256;
constexpr int PREP_WARPS = PREP_THREADS / 32;
constexpr int LDF = BT + 4;     // f32 [64][68]: tf32 fragment reads hit distinct banks
constexpr int LDX = 24;          // f32 [16][24] per-warp scratch, same reason
constexpr int PREP_R1 = 2 * BT * LD128 * 2;   // Ks | Qs, then Af | Tf (f32), then W | U staging
constexpr int PREP_TS = BT * LD64 * 2;        // P staging, then X scratch, then T (bf16)
constexpr int PREP_KBT = DK * LD64 * 2;
constexpr int PREP_VBT = DV * LD64 * 2;
constexpr int PREP_SMEM = PREP_R1 + PREP_TS + PREP_KBT + PREP_VBT + 3 * BT * 4;
static_assert(2 * BT * LDF * 4 <= PREP_R1, "Af and Tf fit in the K/Q region");
static_assert(4 * 16 * LDX * 4 <= PREP_TS, "X scratch fits in the T region");
static_assert(2 * PREP_SMEM <= 227 * 1024, "two prep CTAs per SM");
static_assert(BT * LD128 * 2 <= PREP_KBT && BT * LD128 * 2 <= PREP_VBT, "v3's row-major Kb, Vb fit");
// v5 (three CTAs per SM: <= 74 KiB, <= 80 registers): no T / P / X region.
// P leaves from registers; X lives in the unused upper blocks of Tf; T
// (bf16) over the dead Af; W | U staged in two 64-column passes, the first
// beside T in R1, the second over the dead Kb | Vb.
constexpr int PREP5_KB = PREP_R1;
constexpr int PREP5_VB = PREP5_KB + BT * LD128 * 2;
constexpr int PREP5_G = PREP5_VB + BT * LD128 * 2;
constexpr int PREP5_SMEM = PREP5_G + 3 * BT * 4;
constexpr int PREP5_S1 = BT * LD64 * 2;  // after T: pass 1's W | U halves, [2][BT][LD64]
static_assert(PREP5_S1 + 2 * BT * LD64 * 2 <= PREP_R1, "pass 1 staging fits beside T");
static_assert(BT * LD64 * 2 <= BT * LDF * 4, "T fits over Af");
static_assert(2 * BT * LD64 * 2 <= 2 * BT * LD128 * 2, "pass 2 staging fits over Kb | Vb");
static_assert(3 * (PREP5_SMEM + 1024) <= 228 * 1024, "three v5 CTAs per SM");

// B fragment (16 x 8) of a row-major [k][n] tile with row stride ld
// (ldmatrix.trans; rows 16-byte aligned): lanes 0-15 address rows k0.. at n0.
__device__ __forceinline__ void frag_b_trans(unsigned* b, const bf16* s, int ld, int k0, int n0, int lane) {
    const bf16* p = s + (k0 + (lane & 15)) * ld + n0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}

template <int GEN>
__device__ __forceinline__ void prep_body(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, const SeqTable& tab) {
    unsigned char* smem = dyn_smem;
    bf16* Ks = reinterpret_cast<bf16*>(smem);
    bf16* Qs = Ks + BT * LD128;
    float* Af = reinterpret_cast<float*>(smem);
    float* Tf = Af + BT * LDF;
    constexpr bool V5 = GEN >= 5;
    bf16* Ts = reinterpret_cast<bf16*>(smem + (V5 ? 0 : PREP_R1));
    float* Xs = reinterpret_cast<float*>(smem + PREP_R1);  // v3/v4 only
    // beta exp(G) k and beta v, row-major [BT][LD128] (v3/v4: regions sized
    // for the [128][LD64] transposes of the v2 kernel).
    bf16* KbT = reinterpret_cast<bf16*>(smem + (V5 ? PREP5_KB : PREP_R1 + PREP_TS));
    bf16* VbT = reinterpret_cast<bf16*>(smem + (V5 ? PREP5_VB : PREP_R1 + PREP_TS + PREP_KBT));
    float* Gs = reinterpret_cast<float*>(smem + (V5 ? PREP5_G : PREP_R1 + PREP_TS + PREP_KBT + PREP_VBT));
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
    for (int e = tid; e < BT * 16; e += PREP_THREADS) {
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
    {  // beta v, row-major: one 16-byte store per piece
        const float b = Bs[vr];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = ((tid >> 6) + 4 * j) * 8;
            const bf162* v2 = reinterpret_cast<const bf162*>(&vreg[j]);
            uint4 o;
            bf162* o2 = reinterpret_cast<bf162*>(&o);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __bfloat1622float2(v2[i]);
                o2[i] = __floats2bfloat162_rn(f.x * b, f.y * b);
            }
            *reinterpret_cast<uint4*>(VbT + vr * LD128 + col) = o;
        }
    }
    cp_async_wait_all();
    __syncthreads();
    if (tid >= 32 && tid < BT) Gc[tid] += Gc[31];
    __syncthreads();
    const float GL = Gc[BT - 1];  // padded rows have g = 0

    // Rows (a warp each; v6: 8 lanes each): normalise q and k in place, scale,
    // (beta exp(G) k)^T.
    const float qscale = rsqrtf((float)DK);
    if constexpr (GEN >= 6) {  // lane l of a row: columns 8l.. and 64 + 8l.. (16-byte accesses)
        const int sub = lane >> 3, l = lane & 7;
        for (int r = 4 * warp + sub; r < BT; r += 4 * PREP_WARPS) {
            const bool ok = r < nrows;
            float q[16], k[16];
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const uint4 qv = *reinterpret_cast<const uint4*>(Qs + r * LD128 + 64 * p + 8 * l);
                const uint4 kv = *reinterpret_cast<const uint4*>(Ks + r * LD128 + 64 * p + 8 * l);
                const bf162* q2 = reinterpret_cast<const bf162*>(&qv);
                const bf162* k2 = reinterpret_cast<const bf162*>(&kv);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 a = __bfloat1622float2(q2[e]), b = __bfloat1622float2(k2[e]);
                    q[8 * p + 2 * e] = a.x, q[8 * p + 2 * e + 1] = a.y;
                    k[8 * p + 2 * e] = b.x, k[8 * p + 2 * e + 1] = b.y;
                }
            }
            float sq = 0.f, sk = 0.f;
#pragma unroll
            for (int e = 0; e < 16; ++e) sq += q[e] * q[e], sk += k[e] * k[e];
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) {
                sq += __shfl_xor_sync(0xffffffffu, sq, o);
                sk += __shfl_xor_sync(0xffffffffu, sk, o);
            }
            const float iq = rsqrtf(sq + L2_EPS) * qscale, ik = rsqrtf(sk + L2_EPS);
            const float eg = __expf(Gc[r]), kb = ik * Bs[r] * eg;
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                uint4 oq, ok4, ob;
                bf162* q2 = reinterpret_cast<bf162*>(&oq);
                bf162* k2 = reinterpret_cast<bf162*>(&ok4);
                bf162* b2 = reinterpret_cast<bf162*>(&ob);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float* qe = q + 8 * p + 2 * e;
                    const float* ke = k + 8 * p + 2 * e;
                    q2[e] = __floats2bfloat162_rn(qe[0] * iq, qe[1] * iq);
                    k2[e] = __floats2bfloat162_rn(ke[0] * ik, ke[1] * ik);
                    b2[e] = __floats2bfloat162_rn(ke[0] * kb, ke[1] * kb);
                }
                const int off = r * LD128 + 64 * p + 8 * l;
                *reinterpret_cast<uint4*>(Qs + off) = oq;
                *reinterpret_cast<uint4*>(Ks + off) = ok4;
                *reinterpret_cast<uint4*>(KbT + off) = ob;
            }
            if (l == 0) {
                float* f = fac_out + tile * FAC;
                f[r] = ok ? iq * eg : 0.f;
                f[BT + r] = ok ? ik * __expf(GL - Gc[r]) : 0.f;
                if (r == 0) f[2 * BT] = __expf(GL);
            }
        }
    } else {  // lane: columns 4 lane .. 4 lane + 3 (8-byte accesses)
#pragma unroll 2
        for (int r = warp; r < BT; r += PREP_WARPS) {
            const bool ok = r < nrows;
            const int col = 4 * lane;
            const uint2 qv = *reinterpret_cast<const uint2*>(Qs + r * LD128 + col);
            const uint2 kv = *reinterpret_cast<const uint2*>(Ks + r * LD128 + col);
            const float2 q01 = __bfloat1622float2(*reinterpret_cast<const bf162*>(&qv.x));
            const float2 q23 = __bfloat1622float2(*reinterpret_cast<const bf162*>(&qv.y));
            const float2 k01 = __bfloat1622float2(*reinterpret_cast<const bf162*>(&kv.x));
            const float2 k23 = __bfloat1622float2(*reinterpret_cast<const bf162*>(&kv.y));
            float sq = q01.x * q01.x + q01.y * q01.y + q23.x * q23.x + q23.y * q23.y;
            float sk = k01.x * k01.x + k01.y * k01.y + k23.x * k23.x + k23.y * k23.y;
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            const float iq = rsqrtf(sq + L2_EPS) * qscale, ik = rsqrtf(sk + L2_EPS);
            const float b = Bs[r], eg = __expf(Gc[r]), kb = ik * b * eg;
            uint2 o;
            *reinterpret_cast<bf162*>(&o.x) = __floats2bfloat162_rn(q01.x * iq, q01.y * iq);
            *reinterpret_cast<bf162*>(&o.y) = __floats2bfloat162_rn(q23.x * iq, q23.y * iq);
            *reinterpret_cast<uint2*>(Qs + r * LD128 + col) = o;
            *reinterpret_cast<bf162*>(&o.x) = __floats2bfloat162_rn(k01.x * ik, k01.y * ik);
            *reinterpret_cast<bf162*>(&o.y) = __floats2bfloat162_rn(k23.x * ik, k23.y * ik);
            *reinterpret_cast<uint2*>(Ks + r * LD128 + col) = o;
            *reinterpret_cast<bf162*>(&o.x) = __floats2bfloat162_rn(k01.x * kb, k01.y * kb);
            *reinterpret_cast<bf162*>(&o.y) = __floats2bfloat162_rn(k23.x * kb, k23.y * kb);
            *reinterpret_cast<uint2*>(KbT + r * LD128 + col) = o;
            if (lane == 0) {
                float* f = fac_out + tile * FAC;
                f[r] = ok ? iq * eg : 0.f;
                f[BT + r] = ok ? ik * __expf(GL - Gc[r]) : 0.f;
                if (r == 0) f[2 * BT] = __expf(GL);
            }
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
                if (GEN >= 4 && c0 + 8 * nt > m0 + 15) continue;  // v4: n8 pieces above the diagonal
                unsigned b[2];
                frag_b(b, Ks, LD128, c0 + 8 * nt, 16 * ks, lane);
                mma16816(acc_a[nt], ak, b);
                mma16816(acc_p[nt], aq, b);
            }
        }
    }
    // P (masked j <= i, decayed) to its staging tile (v5: straight out).
    bf16* Pst = V5 ? p_out + tile * (BT * BT) : Ts;
    constexpr int LDP = V5 ? BT : LD64;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int i = m0 + g8 + 8 * hf, j = c0 + 8 * nt + 2 * t4;
            const float p0 = j <= i ? acc_p[nt][2 * hf] * __expf(Gc[i] - Gc[j]) : 0.f;
            const float p1 = j + 1 <= i ? acc_p[nt][2 * hf + 1] * __expf(Gc[i] - Gc[j + 1]) : 0.f;
            *reinterpret_cast<bf162*>(Pst + i * LDP + j) = __floats2bfloat162_rn(p0, p1);
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
            *reinterpret_cast<float2*>(Af + i * LDF + j) = a;
        }
    if constexpr (!V5) {  // P out, 16 bytes a thread
        bf16* P = p_out + tile * (BT * BT);
        for (int e = tid; e < BT * (BT / 8); e += PREP_THREADS) {
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
            for (int j = 0; j < i; ++j) acc += Af[(b0 + i) * LDF + b0 + j] * tcol[j];
            if (i > cc) tcol[i] = -acc;
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) Tf[(b0 + i) * LDF + b0 + cc] = tcol[i];
    }
    __syncthreads();
    if constexpr (GEN >= 4) {
        // Off-diagonal blocks by 2x2 doubling, all warps on one n8 half of a
        // 16x16 block each: [[L11, 0], [L21, L22]]^-1 has -L22^-1 L21 L11^-1
        // below the diagonal. Level 1 (warps 0-3): T10 = -T11 (A10 T00),
        // T32 = -T33 (A32 T22). Level 2 (all 8): X = A[2:4, 0:2] T[0:2, 0:2]
        // into shared scratch, then T[2:4, 0:2] = -T[2:4, 2:4] X.
        const int half = 8 * (warp & 1), b = warp >> 1;
        // X block xb: v3/v4 a [16][LDX] scratch each; v5 the unused upper
        // blocks (0,1), (0,2), (0,3), (1,2) of Tf.
        constexpr int ldx = V5 ? LDF : LDX;
        auto xblock = [&](int xb) -> float* {
            if constexpr (V5) return Tf + (xb == 3 ? 16 * LDF + 32 : 16 * (xb + 1));
            else return Xs + xb * 16 * LDX;
        };
        if (warp < 4) {
            const int I = 2 * b + 1, J = 2 * b;
            float* Xw = xblock(b);
            float x[4] = {0.f, 0.f, 0.f, 0.f}, y[4] = {0.f, 0.f, 0.f, 0.f};
            mm16x8_f32_split(x, Af, LDF, 16 * I, 16 * J, Tf, LDF, 16 * J, 16 * J + half, lane);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
                *reinterpret_cast<float2*>(Xw + (g8 + 8 * hf) * ldx + half + 2 * t4) =
                    make_float2(x[2 * hf], x[2 * hf + 1]);
            __syncwarp();
            mm16x8_f32_split(y, Tf, LDF, 16 * I, 16 * I, Xw, ldx, 0, half, lane);
            store16x8_neg(Tf, LDF, 16 * I, 16 * J + half, y, lane);
        }
        __syncthreads();
        const int I = 2 + (b >> 1), J = b & 1;  // this warp's block of T[2:4, 0:2]
        {
            float x[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
            for (int K = J; K < 2; ++K)
                mm16x8_f32_split(x, Af, LDF, 16 * I, 16 * K, Tf, LDF, 16 * K, 16 * J + half, lane);
            float* Xb = xblock(b);  // X block (I, J)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
                *reinterpret_cast<float2*>(Xb + (g8 + 8 * hf) * ldx + half + 2 * t4) =
                    make_float2(x[2 * hf], x[2 * hf + 1]);
        }
        __syncthreads();
        {
            float y[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
            for (int I2 = 2; I2 <= I; ++I2)
                mm16x8_f32_split(y, Tf, LDF, 16 * I, 16 * I2, xblock(2 * (I2 - 2) + J), ldx, 0, half, lane);
            store16x8_neg(Tf, LDF, 16 * I, 16 * J + half, y, lane);
        }
        __syncthreads();
    } else {
        // Off-diagonal blocks, block row by block row: warp J computes
        // X = sum_{K=J}^{I-1} A_IK T_KJ, then T_IJ = -T_II X (tensor cores, 3xTF32).
    #pragma unroll 1
        for (int I = 1; I < 4; ++I) {
            if (warp < I) {
                const int J = warp;
                float x[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    #pragma unroll 1
                for (int K = J; K < I; ++K) {
                    mm16_f32_split(x, Af, LDF, 16 * I, 16 * K, Tf, LDF, 16 * K, 16 * J, lane);
                }
                float* Xw = Xs + warp * 16 * LDX;
    #pragma unroll
                for (int nt = 0; nt < 2; ++nt)
    #pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
                        *reinterpret_cast<float2*>(Xw + (g8 + 8 * hf) * LDX + 8 * nt + 2 * t4) =
                            make_float2(x[nt][2 * hf], x[nt][2 * hf + 1]);
                __syncwarp();
                float y[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
                mm16_f32_split(y, Tf, LDF, 16 * I, 16 * I, Xw, LDX, 0, 0, lane);
    #pragma unroll
                for (int nt = 0; nt < 2; ++nt)
    #pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
                        *reinterpret_cast<float2*>(Tf + (16 * I + g8 + 8 * hf) * LDF + 16 * J + 8 * nt + 2 * t4) =
                            make_float2(-y[nt][2 * hf], -y[nt][2 * hf + 1]);
                __syncwarp();
            }
            __syncthreads();
        }
    }
    // T in bf16 (zero above the diagonal blocks).
    for (int e = tid; e < BT * BT / 2; e += PREP_THREADS) {
        const int i = e >> 5, j = (e & 31) * 2;
        const float2 v = (j >> 4) > (i >> 4) ? make_float2(0.f, 0.f)
                                             : *reinterpret_cast<const float2*>(Tf + i * LDF + j);
        *reinterpret_cast<bf162*>(Ts + i * LD64 + j) = __floats2bfloat162_rn(v.x, v.y);
    }
    __syncthreads();

    // W = T (beta exp(G) K) (warps 0-3), U = T (beta V) (warps 4-7): rows
    // 16(w%4).., 128 columns, staged over the dead Af | Tf region (v5: two
    // 64-column passes, 32 accumulators a thread instead of 64; pass 1
    // staged beside T, pass 2 over Kb | Vb once every warp is done with them).
    {
        constexpr int NP = V5 ? 2 : 1, NTP = 16 / NP;
        const int which = warp >> 2;
        const bf16* Bt = which == 0 ? KbT : VbT;
#pragma unroll 1
        for (int pass = 0; pass < NP; ++pass) {
            float acc[NTP][4];
#pragma unroll
            for (int nt = 0; nt < NTP; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) {
                unsigned a[4];
                frag_a(a, Ts, LD64, m0, 16 * ks, lane);
#pragma unroll
                for (int nt = 0; nt < NTP; ++nt) {
                    unsigned b[2];
                    frag_b_trans(b, Bt, LD128, 16 * ks, 8 * NTP * pass + 8 * nt, lane);
                    mma16816(acc[nt], a, b);
                }
            }
            bf16* st = Ks + which * (BT * LD128);
            int ldst = LD128;
            if constexpr (V5) {
                if (pass == 1) __syncthreads();  // T, Kb, Vb no longer read
                st = (pass == 0 ? reinterpret_cast<bf16*>(smem + PREP5_S1) : KbT) + which * (BT * LD64);
                ldst = LD64;
            }
#pragma unroll
            for (int nt = 0; nt < NTP; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int i = m0 + g8 + 8 * hf, j = 8 * nt + 2 * t4;
                    *reinterpret_cast<bf162*>(st + i * ldst + j) =
                        __floats2bfloat162_rn(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
                }
        }
    }
    __syncthreads();
    if constexpr (V5) {
        for (int e = tid; e < 2 * 2 * BT * 8; e += PREP_THREADS) {
            const int which = e >> 10, pass = (e >> 9) & 1, r = (e >> 3) & (BT - 1), ch = (e & 7) * 8;
            const bf16* src = (pass == 0 ? reinterpret_cast<const bf16*>(smem + PREP5_S1) : KbT) + which * (BT * LD64);
            bf16* dst = (which == 0 ? w_out : u_out) + tile * (BT * DK);
            *reinterpret_cast<uint4*>(dst + r * DK + 64 * pass + ch) =
                *reinterpret_cast<const uint4*>(src + r * LD64 + ch);
        }
    } else {
        for (int e = tid; e < 2 * BT * 16; e += PREP_THREADS) {
            const int which = e >> 10, r = (e >> 4) & (BT - 1), ch = (e & 15) * 8;
            bf16* dst = (which == 0 ? w_out : u_out) + tile * (BT * DK);
            *reinterpret_cast<uint4*>(dst + r * DK + ch) =
                *reinterpret_cast<const uint4*>(Ks + which * (BT * LD128) + r * LD128 + ch);
        }
    }
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS, 2) gdn_chunk_prep_v3_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    prep_body<3>(qkv, gdec, beta, w_out, u_out, p_out, fac_out, hk, hv, tab);
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS, 2) gdn_chunk_prep_v4_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    prep_body<4>(qkv, gdec, beta, w_out, u_out, p_out, fac_out, hk, hv, tab);
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS, 3) gdn_chunk_prep_v5_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    prep_body<5>(qkv, gdec, beta, w_out, u_out, p_out, fac_out, hk, hv, tab);
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS, 3) gdn_chunk_prep_v6_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    prep_body<6>(qkv, gdec, beta, w_out, u_out, p_out, fac_out, hk, hv, tab);
}

}  // namespace gdn
