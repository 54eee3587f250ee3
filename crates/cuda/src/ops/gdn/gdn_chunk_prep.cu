// Gated delta rule, chunked form: the per-chunk preparation kernel
// (`gdn_chunk_prep_bf16`; the scan that consumes its output is in
// gdn_chunked.cu, whose header states the algebra). The constants, the
// sequence table and the fragment helpers both use are in gdn_common.cuh.
//
// One CTA (8 warps) per (64-row chunk, value head), all chunks in parallel:
// q, k rows by cp.async, v straight to beta v; q/k L2 norms; chunk-local
// cumsum G of g; A = beta exp(Gi - Gj) ki.kj and P = exp(Gi - Gj) qi.kj on
// mma.sync; T = (I + A)^-1 by blocked forward substitution (16x16 diagonal
// blocks by one thread per column, off-diagonal blocks as 16x16 products on
// the tensor cores in 3xTF32); W = T (beta exp(G) K), U = T (beta V). W and U
// (bf16) leave through shared memory as 16-byte stores, P (bf16) from
// registers, per-row factors (f32) beside them.
//
// One entry, gdn_chunk_prep_bf16: (beta v) and (beta exp(G) k) kept
// row-major, written as 16-byte vectors and read as B operands by
// ldmatrix.trans; q/k rows normalised by 8 lanes each (16-byte accesses);
// the off-diagonal inverse by 2x2 block doubling on all 8 warps (one n8 half
// of a 16x16 block each, 3xTF32); three CTAs per SM: 70,400 bytes of shared
// memory and <= 80 registers (see the layout below). The generations before
// it and their measurements are in docs/perf/cuda-gdn.md and
// docs/perf/cleanup-cuda-gdnmoe.md.

// The shared constants, sequence table and helpers come first: gdn_common.cuh
// and the inverse's 3xTF32 helpers (gdn_prep_tf32.cuh) are prepended to this
// source (sources.rs), inside `namespace gdn`.

constexpr float L2_EPS = 1e-6f;

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
// Eight warps per (chunk, value head), three CTAs per SM (<= 74 KiB, <= 80
// registers). Shared memory: R1 holds Ks | Qs, then Af | Tf (f32); T (bf16)
// over the dead Af and the inverse's X scratch in the unused upper blocks of
// Tf; P leaves from registers; W | U staged in two 64-column passes, the
// first beside T in R1, the second over the dead Kb | Vb.

constexpr int PREP_THREADS = 256;
constexpr int PREP_WARPS = PREP_THREADS / 32;
constexpr int LDF = BT + 4;     // f32 [64][68]: tf32 fragment reads hit distinct banks
constexpr int PREP_R1 = 2 * BT * LD128 * 2;   // Ks | Qs, then Af | Tf (f32), then T and W | U staging
constexpr int PREP_KB = PREP_R1;
constexpr int PREP_VB = PREP_KB + BT * LD128 * 2;
constexpr int PREP_G = PREP_VB + BT * LD128 * 2;
constexpr int PREP_SMEM = PREP_G + 3 * BT * 4;
constexpr int PREP_S1 = BT * LD64 * 2;  // after T: pass 1's W | U halves, [2][BT][LD64]
static_assert(2 * BT * LDF * 4 <= PREP_R1, "Af and Tf fit in the K/Q region");
static_assert(PREP_S1 + 2 * BT * LD64 * 2 <= PREP_R1, "pass 1 staging fits beside T");
static_assert(BT * LD64 * 2 <= BT * LDF * 4, "T fits over Af");
static_assert(2 * BT * LD64 * 2 <= 2 * BT * LD128 * 2, "pass 2 staging fits over Kb | Vb");
static_assert(3 * (PREP_SMEM + 1024) <= 228 * 1024, "three prep CTAs per SM");

// B fragment (16 x 8) of a row-major [k][n] tile with row stride ld
// (ldmatrix.trans; rows 16-byte aligned): lanes 0-15 address rows k0.. at n0.
__device__ __forceinline__ void frag_b_trans(unsigned* b, const bf16* s, int ld, int k0, int n0, int lane) {
    const bf16* p = s + (k0 + (lane & 15)) * ld + n0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void prep_body(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, const SeqTable& tab) {
    unsigned char* smem = dyn_smem;
    bf16* Ks = reinterpret_cast<bf16*>(smem);
    bf16* Qs = Ks + BT * LD128;
    float* Af = reinterpret_cast<float*>(smem);
    float* Tf = Af + BT * LDF;
    bf16* Ts = reinterpret_cast<bf16*>(smem);
    // beta exp(G) k and beta v, row-major [BT][LD128].
    bf16* KbT = reinterpret_cast<bf16*>(smem + PREP_KB);
    bf16* VbT = reinterpret_cast<bf16*>(smem + PREP_VB);
    float* Gs = reinterpret_cast<float*>(smem + PREP_G);
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

    // Rows (8 lanes each): normalise q and k in place, scale, (beta exp(G) k)^T.
    const float qscale = rsqrtf((float)DK);
    {  // lane l of a row: columns 8l.. and 64 + 8l.. (16-byte accesses)
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
                if (c0 + 8 * nt > m0 + 15) continue;  // n8 pieces above the diagonal
                unsigned b[2];
                frag_b(b, Ks, LD128, c0 + 8 * nt, 16 * ks, lane);
                mma16816(acc_a[nt], ak, b);
                mma16816(acc_p[nt], aq, b);
            }
        }
    }
    // P (masked j <= i, decayed) straight out.
    bf16* Pst = p_out + tile * (BT * BT);
    constexpr int LDP = BT;
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
    {
        // Off-diagonal blocks by 2x2 doubling, all warps on one n8 half of a
        // 16x16 block each: [[L11, 0], [L21, L22]]^-1 has -L22^-1 L21 L11^-1
        // below the diagonal. Level 1 (warps 0-3): T10 = -T11 (A10 T00),
        // T32 = -T33 (A32 T22). Level 2 (all 8): X = A[2:4, 0:2] T[0:2, 0:2]
        // into shared scratch, then T[2:4, 0:2] = -T[2:4, 2:4] X.
        const int half = 8 * (warp & 1), b = warp >> 1;
        // X block xb: the unused upper blocks (0,1), (0,2), (0,3), (1,2) of Tf.
        constexpr int ldx = LDF;
        auto xblock = [&](int xb) -> float* {
            return Tf + (xb == 3 ? 16 * LDF + 32 : 16 * (xb + 1));
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
    // 16(w%4).., 128 columns in two 64-column passes (32 accumulators a
    // thread): pass 1 staged beside T, pass 2 over Kb | Vb once every warp
    // is done with them.
    {
        constexpr int NP = 2, NTP = 16 / NP;
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
            if (pass == 1) __syncthreads();  // T, Kb, Vb no longer read
            bf16* st = (pass == 0 ? reinterpret_cast<bf16*>(smem + PREP_S1) : KbT) + which * (BT * LD64);
            const int ldst = LD64;
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
    for (int e = tid; e < 2 * 2 * BT * 8; e += PREP_THREADS) {
        const int which = e >> 10, pass = (e >> 9) & 1, r = (e >> 3) & (BT - 1), ch = (e & 7) * 8;
        const bf16* src = (pass == 0 ? reinterpret_cast<const bf16*>(smem + PREP_S1) : KbT) + which * (BT * LD64);
        bf16* dst = (which == 0 ? w_out : u_out) + tile * (BT * DK);
        *reinterpret_cast<uint4*>(dst + r * DK + 64 * pass + ch) =
            *reinterpret_cast<const uint4*>(src + r * LD64 + ch);
    }
}

extern "C" __global__ void __launch_bounds__(PREP_THREADS, 3) gdn_chunk_prep_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    bf16* __restrict__ w_out, bf16* __restrict__ u_out, bf16* __restrict__ p_out,
    float* __restrict__ fac_out, int hk, int hv, SeqTable tab) {
    prep_body(qkv, gdec, beta, w_out, u_out, p_out, fac_out, hk, hv, tab);
}

}  // namespace gdn
