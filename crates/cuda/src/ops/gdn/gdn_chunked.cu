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
// * gdn_chunk_prep_bf16 (gdn_chunk_prep.cu), one CTA per (chunk, value head),
//   all in parallel: normalises q/k, builds A and P (the masked, decayed
//   q.k^T), inverts (I + A), and writes W, U, P (bf16) and per-row factors
//   (f32) to a scratch buffer.
// * the scan (this file), one CTA per (32 or 64 value columns, value head,
//   sequence): walks the chunks of its sequence in order with its 128 x BV
//   slice of the state in f32 registers; per chunk three tensor-core products
//   (delta = U - W S0 and Q S0; o += P delta; S += K^T (kf delta), K^T read
//   straight from the streamed K tile by ldmatrix.trans). The next chunks'
//   tiles stream in with cp.async while the current one computes. Eight
//   warps: each owns a 16 x 16 piece of the chunk's delta and output and 16
//   key rows of the state slice. Two entries:
//   gdn_chunk_scan_narrow_bf16 (32 columns, three tile stages in flight, the
//   next loads issued after phase 1's products, phase 1's k-steps in two
//   accumulator chains, the state update ahead of the output, the bf16
//   delta^T / S^T tiles written by stmatrix.trans) and
//   gdn_chunk_scan_wide_bf16 (64 columns, two stages, the plain order).
//   opts (timing experiments of the bench only, 0 in production): 1 = no
//   tile loads after the first chunk, 2 = no arithmetic; either gives wrong
//   results.
// The constants, the sequence table and the fragment helpers both kernels
// use are in gdn_common.cuh (prepended to each source).
// Chunks never straddle sequences; rows past a sequence's end are zeros.
// All matmuls use mma.sync m16n8k16 (bf16 in, f32 accumulate).

// The shared constants, sequence table and helpers come first: gdn_common.cuh
// is prepended to this source (sources.rs), inside `namespace gdn`.

constexpr int BV_NARROW = 32;    // value columns per scan CTA: 4 CTAs per head
constexpr int BV_WIDE = 64;      // or 2 CTAs per head (half the tile traffic)
constexpr int SCAN_WARPS = 8;
constexpr int SCAN_THREADS = SCAN_WARPS * 32;

extern __shared__ __align__(16) unsigned char dyn_smem[];

// ---------------------------------------------------------------- scan ----

template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// A fragment (16 x 16) of the transpose of a row-major [k][m] tile with row
// stride ld: element (m, k) of the fragment is s[k][m] (ldmatrix.trans; rows
// 16-byte aligned). Lanes 8i..8i+7 address matrix i: k rows k0 + 8(i >> 1)..,
// columns m0 + 8(i & 1)...
__device__ __forceinline__ void frag_a_trans(unsigned* a, const bf16* s, int ld, int m0, int k0, int lane) {
    const bf16* p = s + (k0 + (lane & 7) + ((lane >> 4) & 1) * 8) * ld + m0 + ((lane >> 3) & 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_addr(p)));
}

// Scan layout for BV value columns per CTA, STAGES tile stages in flight.
// Work split: phase-1/2 tiles (64 x BV) as 4 row tiles x SCAN_WARPS/4 column
// groups; state tiles (DK x BV) as one 16-row tile per warp, all BV columns.
template <int BV, int STAGES, int WARPS = SCAN_WARPS>
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
    static constexpr int HT = STAGES * STAGE;         // S^T in bf16 [BV][LD128]
    static constexpr int VN = HT + BV * LD128 * 2;    // delta^T [BV][LD64]
    static constexpr int VK = VN + BV * LD64 * 2;     // (kf delta)^T [BV][LD64]
    static constexpr int SMEM = VK + BV * LD64 * 2;
    static_assert(STAGE % 16 == 0, "stages stay 16-byte aligned");
    static_assert(SMEM <= 227 * 1024, "one scan CTA fits an SM");
    static_assert(NT >= 1 && MT >= 1 && SNT >= 1, "warp split covers the tiles");
};
constexpr int SCAN_NARROW_STAGES = 3;
constexpr int SCAN_WIDE_STAGES = 2;
constexpr int SCAN_SMEM_NARROW = ScanCfg<BV_NARROW, SCAN_NARROW_STAGES>::SMEM;
constexpr int SCAN_SMEM_WIDE = ScanCfg<BV_WIDE, SCAN_WIDE_STAGES>::SMEM;
static_assert(SCAN_SMEM_NARROW <= 227 * 1024 && SCAN_SMEM_WIDE <= 227 * 1024, "both scan layouts instantiate");

// Transposed store of four 8x8 bf16 matrices from mma C-fragment halves
// (packed bf16 pairs): lanes 8i..8i+7 address rows 0..7 of matrix i, which
// receive its columns (stmatrix.trans, sm_90; rows 16-byte aligned).
__device__ __forceinline__ void stsm_x4_trans(bf16* p, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr(p)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
__device__ __forceinline__ unsigned pack_bf16(float a, float b) {
    bf162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<unsigned*>(&v);
}

// PIPELINED: the next loads after phase 1's products, phase 1's k-steps in
// two accumulator chains, the bf16 delta^T / S^T tiles written by
// stmatrix.trans and the state update ahead of the output (the narrow scan);
// else the plain order (the wide scan).
// f(a, r, cc) for each accumulator pair a = acc[mt][nt][2 * hf ..] of a
// warp's state slice (C::MT m16 x C::SNT n8 tiles from row hrow0, column
// hcol0): state row r, columns cc and cc + 1.
template <typename C, typename F>
__device__ __forceinline__ void each_state_pair(float (&acc)[C::MT][C::SNT][4], int hrow0, int hcol0,
                                                int g8, int t4, F&& f) {
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = hrow0 + 16 * mt + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
                f(&acc[mt][nt][2 * hf], r, cc);
            }
}

template <int BV, int STAGES, int WARPS, bool PIPELINED>
__device__ __forceinline__ void scan_body(
    const bf16* __restrict__ qkv, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const bf16* __restrict__ p_in, const float* __restrict__ fac_in, float* __restrict__ state,
    bf16* __restrict__ out, int hk, int hv, const SeqTable& tab, int opts) {
    using C = ScanCfg<BV, STAGES, WARPS>;
    static_assert(STAGES == 2 || STAGES == 3, "two or three tile stages");
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
    bf16* HT = reinterpret_cast<bf16*>(smem + C::HT);
    bf16* VN = reinterpret_cast<bf16*>(smem + C::VN);
    bf16* VK = reinterpret_cast<bf16*>(smem + C::VK);

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
    each_state_pair<C>(acc_h, hrow0, hcol0, g8, t4, [&](float* a, int r, int cc) {
        const float2 v = *reinterpret_cast<const float2*>(S + (size_t)r * DV + cc);
        a[0] = v.x;
        a[1] = v.y;
    });
    auto store_ht = [&]() {
        if constexpr (PIPELINED) {
            static_assert(C::SNT % 2 == 0, "stmatrix pairs of n8 state tiles");
            const int i = lane >> 3, j = lane & 7;
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int np = 0; np < C::SNT; np += 2) {
                    const float* a0 = acc_h[mt][np];
                    const float* a1 = acc_h[mt][np + 1];
                    stsm_x4_trans(HT + (hcol0 + 8 * (np + (i >> 1)) + j) * LD128 + hrow0 + 16 * mt + 8 * (i & 1),
                                  pack_bf16(a0[0], a0[1]), pack_bf16(a0[2], a0[3]), pack_bf16(a1[0], a1[1]),
                                  pack_bf16(a1[2], a1[3]));
                }
        } else {
            each_state_pair<C>(acc_h, hrow0, hcol0, g8, t4, [&](const float* a, int r, int cc) {
                HT[cc * LD128 + r] = __float2bfloat16(a[0]);
                HT[(cc + 1) * LD128 + r] = __float2bfloat16(a[1]);
            });
        }
    };

    load_stage(0, 0);
    if constexpr (STAGES == 3) {  // one commit group per chunk, empty past the end
        if (nch > 1) load_stage(1, 1); else cp_async_commit();
    }
    store_ht();
    const int m0 = 16 * (warp & 3);           // chunk rows of this warp (phases 1-2)
    const int n0 = C::NT * (warp >> 2);       // first n8 tile of this warp (phases 1-2)
    int st_cur = 0;  // lc % STAGES
#pragma unroll 1
    for (int lc = 0; lc < nch; ++lc) {
        const int st = (opts & 1) ? 0 : st_cur;
        // Stage st (chunk lc) landed: with three stages chunk lc + 1's group may
        // stay in flight. The barrier also frees the stage chunk lc - 1 used.
        if constexpr (STAGES == 3) cp_async_wait_group<1>(); else cp_async_wait_all();
        __syncthreads();
        // opts (timing experiments only; results are wrong): 1 = no loads after
        // the first chunk, 2 = no arithmetic.
        const int nxt = lc + STAGES - 1;
        const int st_nxt = st_cur == 0 ? STAGES - 1 : st_cur - 1;  // (lc + STAGES - 1) % STAGES
        auto issue_next = [&]() {
            if (nxt < nch && !(opts & 1)) load_stage(st_nxt, nxt);
            else if constexpr (STAGES == 3) cp_async_commit();
        };
        // PIPELINED: the next loads are issued once phase 1's products are in flight.
        if (!PIPELINED || (opts & 2)) issue_next();
        st_cur = st_cur + 1 == STAGES ? 0 : st_cur + 1;
        if (opts & 2) continue;
        const unsigned char* base = smem + st * C::STAGE;
        const bf16* Ws = reinterpret_cast<const bf16*>(base + C::ST_W);
        const bf16* Qs = reinterpret_cast<const bf16*>(base + C::ST_Q);
        const bf16* Ks = reinterpret_cast<const bf16*>(base + C::ST_K);
        const bf16* Ps = reinterpret_cast<const bf16*>(base + C::ST_P);
        const bf16* Us = reinterpret_cast<const bf16*>(base + C::ST_U);
        const float* Fs = reinterpret_cast<const float*>(base + C::ST_F);

        // delta = U - W S0 and Q S0 (rows m0..m0+15, C::NT n8 tiles from n0).
        // PIPELINED: odd k-steps into a second pair of accumulators (chains of
        // 4 mma instead of 8), added before the epilogue.
        float av[C::NT][4], ao[C::NT][4], av2[C::NT][4], ao2[C::NT][4];
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) av[nt][e] = ao[nt][e] = av2[nt][e] = ao2[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < DK / 16; ++ks) {
            unsigned aw[4], aq[4];
            frag_a(aw, Ws, LD128, m0, 16 * ks, lane);
            frag_a(aq, Qs, LD128, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt) {
                unsigned b[2];
                frag_b(b, HT, LD128, 8 * (n0 + nt), 16 * ks, lane);
                const bool odd = PIPELINED && (ks & 1);
                mma16816(odd ? av2[nt] : av[nt], aw, b);
                mma16816(odd ? ao2[nt] : ao[nt], aq, b);
            }
        }
        if constexpr (PIPELINED) issue_next();
        if constexpr (PIPELINED) {
            static_assert(C::NT % 2 == 0, "stmatrix pairs of n8 tiles of delta");
            unsigned rn[C::NT][2], rk[C::NT][2];
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                    const float2 u = __bfloat1622float2(*reinterpret_cast<const bf162*>(Us + r * C::LDU + cc));
                    const float d0 = u.x - (av[nt][2 * hf] + av2[nt][2 * hf]);
                    const float d1 = u.y - (av[nt][2 * hf + 1] + av2[nt][2 * hf + 1]);
                    const float kf = Fs[BT + r];  // rows past the sequence: kf = 0
                    rn[nt][hf] = pack_bf16(d0, d1);
                    rk[nt][hf] = pack_bf16(d0 * kf, d1 * kf);
                    const float qf = Fs[r];
                    ao[nt][2 * hf] = (ao[nt][2 * hf] + ao2[nt][2 * hf]) * qf;
                    ao[nt][2 * hf + 1] = (ao[nt][2 * hf + 1] + ao2[nt][2 * hf + 1]) * qf;
                }
            const int i = lane >> 3, j = lane & 7;
#pragma unroll
            for (int np = 0; np < C::NT; np += 2) {
                const int off = (8 * (n0 + np + (i >> 1)) + j) * LD64 + m0 + 8 * (i & 1);
                stsm_x4_trans(VN + off, rn[np][0], rn[np][1], rn[np + 1][0], rn[np + 1][1]);
                stsm_x4_trans(VK + off, rk[np][0], rk[np][1], rk[np + 1][0], rk[np + 1][1]);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                    const float2 u = __bfloat1622float2(*reinterpret_cast<const bf162*>(Us + r * C::LDU + cc));
                    const float d0 = u.x - av[nt][2 * hf], d1 = u.y - av[nt][2 * hf + 1];
                    VN[cc * LD64 + r] = __float2bfloat16(d0);
                    VN[(cc + 1) * LD64 + r] = __float2bfloat16(d1);
                    {  // kf on delta (rows past the sequence: kf = 0)
                        const float kf = Fs[BT + r];
                        VK[cc * LD64 + r] = __float2bfloat16(d0 * kf);
                        VK[(cc + 1) * LD64 + r] = __float2bfloat16(d1 * kf);
                    }
                    const float qf = Fs[r];
                    ao[nt][2 * hf] *= qf;
                    ao[nt][2 * hf + 1] *= qf;
                }
        }
        __syncthreads();

        // o += P delta (k-step ks).
        auto out_step = [&](int ks) {
            unsigned a[4];
            frag_a(a, Ps, LD64, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt) {
                unsigned b[2];
                frag_b(b, VN, LD64, 8 * (n0 + nt), 16 * ks, lane);
                mma16816(ao[nt], a, b);
            }
        };
        // Store the valid output rows.
        auto store_out = [&]() {
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
        };
        // S = exp(G_L) S0 + K^T (kf delta), k-step ks.
        auto state_step = [&](int ks) {
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt) {
                unsigned a[4];
                frag_a_trans(a, Ks, LD128, hrow0 + 16 * mt, 16 * ks, lane);
#pragma unroll
                for (int nt = 0; nt < C::SNT; ++nt) {
                    unsigned b[2];
                    frag_b(b, VK, LD64, hcol0 + 8 * nt, 16 * ks, lane);
                    mma16816(acc_h[mt][nt], a, b);
                }
            }
        };
        // S *= exp(G_L): the state's decay over the chunk.
        auto decay_state = [&]() {
            const float egl = Fs[2 * BT];
#pragma unroll
            for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < C::SNT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_h[mt][nt][e] *= egl;
        };
        if constexpr (PIPELINED) {
            // The state update is the chain the next chunk waits for: its
            // products first, the output's beside them, S^T stored before the
            // output rows (same products per accumulator in the same order).
            decay_state();
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) {
                state_step(ks);
                out_step(ks);
            }
            store_ht();  // S^T for the next chunk (its readers wait at the loop head)
            store_out();
        } else {
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) out_step(ks);
            store_out();
            decay_state();
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) state_step(ks);
            store_ht();  // S^T for the next chunk (its readers wait at the loop head)
        }
    }

    each_state_pair<C>(acc_h, hrow0, hcol0, g8, t4, [&](const float* a, int r, int cc) {
        *reinterpret_cast<float2*>(S + (size_t)r * DV + cc) = make_float2(a[0], a[1]);
    });
}

#define GDN_SCAN_ENTRY(name, BV, STAGES, PIPELINED)                                                       \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) name(                                      \
        const bf16* __restrict__ qkv, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,      \
        const bf16* __restrict__ p_in, const float* __restrict__ fac_in, float* __restrict__ state,       \
        bf16* __restrict__ out, int hk, int hv, SeqTable tab, int opts) {                                \
        scan_body<BV, STAGES, SCAN_WARPS, PIPELINED>(qkv, w_in, u_in, p_in, fac_in, state, out, hk, hv, tab, opts); \
    }

GDN_SCAN_ENTRY(gdn_chunk_scan_narrow_bf16, BV_NARROW, SCAN_NARROW_STAGES, true)
GDN_SCAN_ENTRY(gdn_chunk_scan_wide_bf16, BV_WIDE, SCAN_WIDE_STAGES, false)

}  // namespace gdn
