// Gated delta rule, chunked form for prefill: the scans over the prep's
// output (gdn_chunk_prep.cu) at 32 or 64 value columns per CTA
// (gdn_chunk_scan_narrow_bf16, gdn_chunk_scan_wide_bf16); the full-width
// scan (one CTA per head and sequence) is gdn_chunked_full.cu.
//
// Semantics (transformers' torch_recurrent_gated_delta_rule with
// use_qk_l2norm_in_kernel=True): per value head h (key head h / (hv/hk)),
// q and k L2-normalised (x * rsqrt(sum x^2 + 1e-6)), q scaled by 1/sqrt(DK);
// per token: S *= exp(g); delta = (v - S^T k) * beta; S += k (x) delta;
// o = S^T q. f32 state and accumulation, bf16 inputs and output.
//
// Within a chunk of BT rows with G = inclusive cumsum of g (chunk-local) and
// k^ = k / |k|:
//   A[i][j] = beta_i exp(G_i - G_j) k^_i.k^_j  (j < i),  T = (I + A)^-1
//   W = T (beta exp(G) K^),  U = T (beta V)
//   delta = U - W S0                           (S0: state at chunk start)
//   o_i = exp(G_i) S0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i.k_j) delta_j
//   S1 = exp(G_L) S0 + sum_j exp(G_L - G_j) k_j delta_j^T
//
// The "lite" form (docs/perf/cuda-gdn.md, "Session 13, branch gdnlite"; the
// W/U form it replaced in session 14 had the prep write W and U and the scan
// form delta = U - W S0). With Tb = T diag(beta) and K^ = diag(1/|k|) K
// (raw k rows), exactly
//   U - W S0 = Tb V - Tb diag(e^G) K^ S0 = Tb (V - diag(ef) (K S0)),
//   ef_j = e^{G_j} / |k_j|,
// so per chunk this scan computes
//   KS = K S0 and QS = Q S0                     (phase 1: K in W's place)
//   Y  = V - diag(ef) KS                        (epilogue 1; Y^T to shared)
//   delta = Tb Y                                (phase 1b: 64-deep, new)
//   o  = diag(qf) QS + P delta,  S1 = e^{G_L} S0 + K^T (kf delta)   (phase 2, as before)
// with the K tile it already streams for the state update, V columns
// streamed from the packed qkv rows (the same bytes as the U columns
// before) and Tb (8 KiB, its zero blocks above the diagonal neither loaded
// nor multiplied) instead of W (16 KiB).
//
// Rounding points (all products mma.sync m16n8k16, bf16 operands, f32
// accumulate; everything not named here is f32):
//   S0 -> bf16 (the S^T tile, as before); K, Q, V: the raw bf16 input rows;
//   KS, QS: f32 accumulators;  Y = V - ef * KS in f32, rounded once to bf16;
//   Tb: bf16 from the prep (bf16(T_ij beta_j));  delta = Tb Y: f32
//   accumulator, rounded to bf16 as delta and as kf * delta (as before);
//   o: f32, rounded to bf16 on store; S1: f32 registers.
// Against the W/U form this drops the bf16 roundings of W and U
// (and of beta e^G k^ and beta v inside the prep) and adds one of Y; the
// cancellation V - e^G K^ S0 now happens in f32 before any rounding.
//
// Two entries: the narrow scan (32 columns, three stages, next loads after
// phase 1's products, phase-1/1b k-steps in two accumulator chains, the state update ahead of the output, bf16
// transposed tiles by stmatrix.trans) and the wide scan (64 columns, two
// stages, the plain order). opts (timing experiments of the bench only, 0 in
// production): 1 = no tile loads after the first chunk, 2 = no arithmetic;
// either gives wrong results.
//
// gdn_common.cuh and gdn_stmatrix.cuh are prepended to this source
// (sources.rs), inside `namespace gdn`.

constexpr int BVL_NARROW = 32;   // value columns per lite scan CTA: 4 CTAs per head
constexpr int BVL_WIDE = 64;     // or 2
constexpr int SCANL_WARPS = 8;
constexpr int SCANL_THREADS = SCANL_WARPS * 32;
constexpr int FACL = 196;        // floats per (chunk, head) of the prep's factors (gdn_chunk_prep.cu)
static_assert(FACL == FAC + BT && FACL % 4 == 0, "factors: FAC, then ef");

extern __shared__ __align__(16) unsigned char dyn_smem[];

template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Named barrier ID over THREADS threads (ID 0 is __syncthreads'); immediate
// operands, so ptxas reserves only the barriers used.
template <int ID, int THREADS>
__device__ __forceinline__ void bar_sync_named() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

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

// Lite scan layout for BV value columns per CTA, STAGES tile stages in
// flight. Work split: phase-1/1b/2 tiles (64 x BV)
// as 4 row tiles x 2 column groups (warp % 4, warp / 4); state tiles
// (DK x BV) one 16-row tile per warp, all BV columns.
template <int BV, int STAGES>
struct LiteCfg {
    static constexpr int WARPS = SCANL_WARPS;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int SROW = 8;                  // warps along the state's key rows
    static constexpr int SNT = BV / 8;              // n8 state tiles per warp
    static constexpr int MT = (DK / 16) / SROW;     // m16 state tiles per warp (1)
    static constexpr int LDV = BV + 8;
    static constexpr int NT = (BV / 8) / (WARPS / 4);  // n8 tiles per warp in phases 1-2
    // One stage of streamed tiles (bytes): Q, K rows (raw, bf16), P, Tb,
    // the CTA's V columns, the factors.
    static constexpr int ST_Q = 0;
    static constexpr int ST_K = ST_Q + BT * LD128 * 2;
    static constexpr int ST_P = ST_K + BT * LD128 * 2;
    static constexpr int ST_T = ST_P + BT * LD64 * 2;
    static constexpr int ST_V = ST_T + BT * LD64 * 2;
    static constexpr int ST_F = ST_V + BT * LDV * 2;
    static constexpr int STAGE = ST_F + FACL * 4;
    static constexpr int HT = STAGES * STAGE;         // S^T in bf16 [BV][LD128]
    static constexpr int YT = HT + BV * LD128 * 2;    // Y^T [BV][LD64]
    static constexpr int VN = YT + BV * LD64 * 2;     // delta^T [BV][LD64]
    static constexpr int VK = VN + BV * LD64 * 2;     // (kf delta)^T [BV][LD64]
    static constexpr int SMEM = VK + BV * LD64 * 2;
    static_assert(STAGE % 16 == 0 && ST_F % 16 == 0, "stages and tiles stay 16-byte aligned");
    static_assert(SMEM <= 227 * 1024, "one scan CTA fits an SM");
    static_assert(MT == 1 && NT >= 1 && NT % 2 == 0 && SNT % 2 == 0, "warp split covers the tiles");
};
constexpr int SCANL_NARROW_STAGES = 3;
constexpr int SCANL_WIDE_STAGES = 2;
constexpr int SCANL_SMEM_NARROW = LiteCfg<BVL_NARROW, SCANL_NARROW_STAGES>::SMEM;
constexpr int SCANL_SMEM_WIDE = LiteCfg<BVL_WIDE, SCANL_WIDE_STAGES>::SMEM;
static_assert(SCANL_SMEM_NARROW == 199984 && SCANL_SMEM_WIDE == 171552, "launch.rs sizes (ScanWidth::smem_bytes)");

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

// PIPELINED (the narrow scan): the next loads after phase 1's products,
// phase 1's and 1b's k-steps in two accumulator chains, the bf16 transposed
// tiles by stmatrix.trans, the state update ahead of the output; else the
// plain order (the wide scan).
template <int BV, int STAGES, bool PIPELINED>
__device__ __forceinline__ void scan_lite_body(
    const bf16* __restrict__ qkv, const bf16* __restrict__ tb_in, const bf16* __restrict__ p_in,
    const float* __restrict__ fac_in, float* __restrict__ state, bf16* __restrict__ out, int hk, int hv,
    const SeqTable& tab, int opts) {
    using C = LiteCfg<BV, STAGES>;
    static_assert(STAGES == 2 || STAGES == 3, "two or three tile stages");
    constexpr int THREADS = C::THREADS;
    unsigned char* smem = dyn_smem;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g8 = lane >> 2, t4 = lane & 3;
    const int vb = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    const int kh = h / (hv / hk);
    const int rows = tab.rows[s];
    const int nch = (rows + BT - 1) / BT;
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const long long ld_out = (long long)hv * DV;
    const long long v_col = 2LL * hk * DK + (long long)h * DV + vb * BV;  // this CTA's V columns in a qkv row
    bf16* HT = reinterpret_cast<bf16*>(smem + C::HT);
    bf16* YT = reinterpret_cast<bf16*>(smem + C::YT);
    bf16* VN = reinterpret_cast<bf16*>(smem + C::VN);
    bf16* VK = reinterpret_cast<bf16*>(smem + C::VK);

    auto load_stage = [&](int st, int lc) {
        unsigned char* base = smem + st * C::STAGE;
        const size_t tile = (size_t)(tab.chunk0[s] + lc) * hv + h;
        const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
        const int nrows = min(BT, rows - lc * BT);
        bf16* Qs = reinterpret_cast<bf16*>(base + C::ST_Q);
        bf16* Ks = reinterpret_cast<bf16*>(base + C::ST_K);
        bf16* Ps = reinterpret_cast<bf16*>(base + C::ST_P);
        bf16* Ts = reinterpret_cast<bf16*>(base + C::ST_T);
        bf16* Vs = reinterpret_cast<bf16*>(base + C::ST_V);
        float* Fs = reinterpret_cast<float*>(base + C::ST_F);
        for (int e = tid; e < BT * 16; e += THREADS) {  // Q, K rows (zeros past the sequence)
            const int r = e >> 4, ch = (e & 15) * 8;
            const bool ok = r < nrows;
            const bf16* src = ok ? qkv + (row0 + r) * ld_qkv + kh * DK + ch : qkv;
            cp_async_16(Qs + r * LD128 + ch, src, ok);
            cp_async_16(Ks + r * LD128 + ch, ok ? src + (long long)hk * DK : qkv, ok);
        }
        for (int e = tid; e < BT * 8; e += THREADS) {  // P; Tb at and below its diagonal blocks
            const int r = e >> 3, ch = (e & 7) * 8;
            cp_async_16(Ps + r * LD64 + ch, p_in + (tile * BT + r) * BT + ch, true);
            if ((ch >> 4) <= (r >> 4)) cp_async_16(Ts + r * LD64 + ch, tb_in + (tile * BT + r) * BT + ch, true);
        }
        for (int e = tid; e < BT * (BV / 8); e += THREADS) {  // V columns (zeros past the sequence)
            const int r = e / (BV / 8), ch = (e % (BV / 8)) * 8;
            const bool ok = r < nrows;
            cp_async_16(Vs + r * C::LDV + ch, ok ? qkv + (row0 + r) * ld_qkv + v_col + ch : qkv, ok);
        }
        if (tid < FACL / 4) cp_async_16(Fs + 4 * tid, fac_in + tile * FACL + 4 * tid, true);
        cp_async_commit();
    };

    // State slice: warp w holds key rows 16 w .. 16 w + 15, all BV columns, f32.
    float* S = state + ((size_t)tab.slot[s] * hv + h) * DK * DV + vb * BV;
    const int hrow0 = 16 * C::MT * (warp % C::SROW);
    const int hcol0 = 0;
    float acc_h[C::MT][C::SNT][4];
    each_state_pair<C>(acc_h, hrow0, hcol0, g8, t4, [&](float* a, int r, int cc) {
        const float2 v = *reinterpret_cast<const float2*>(S + (size_t)r * DV + cc);
        a[0] = v.x;
        a[1] = v.y;
    });
    auto store_ht = [&]() {
        if constexpr (PIPELINED) {
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
    // A 64 x BV tile's C fragments (this warp: rows m0.., C::NT n8 tiles
    // from n0) as packed bf16 pairs r[nt][hf], stored transposed into a
    // [BV][LD64] tile.
    auto store_tile_t = [&](bf16* dst, const unsigned (&r)[C::NT][2], int m0, int n0) {
        if constexpr (PIPELINED) {
            const int i = lane >> 3, j = lane & 7;
#pragma unroll
            for (int np = 0; np < C::NT; np += 2)
                stsm_x4_trans(dst + (8 * (n0 + np + (i >> 1)) + j) * LD64 + m0 + 8 * (i & 1), r[np][0], r[np][1],
                              r[np + 1][0], r[np + 1][1]);
        } else {
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int rr = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                    const bf162 v = *reinterpret_cast<const bf162*>(&r[nt][hf]);
                    dst[cc * LD64 + rr] = __low2bfloat16(v);
                    dst[(cc + 1) * LD64 + rr] = __high2bfloat16(v);
                }
        }
    };

    load_stage(0, 0);
    if constexpr (STAGES == 3) {  // one commit group per chunk, empty past the end
        if (nch > 1) load_stage(1, 1); else cp_async_commit();
    }
    store_ht();
    const int m0 = 16 * (warp & 3);           // chunk rows of this warp (phases 1-2)
    const int n0 = C::NT * (warp >> 2);       // first n8 tile of this warp (phases 1-2)
    const int mb = warp & 3;                  // its 16-row block of Tb: k-steps 0..mb
    int st_cur = 0;  // lc % STAGES
#pragma unroll 1
    for (int lc = 0; lc < nch; ++lc) {
        const int st = (opts & 1) ? 0 : st_cur;
        // Stage st (chunk lc) landed: with three stages chunk lc + 1's group may
        // stay in flight. The barrier also frees the stage chunk lc - 1 used.
        if constexpr (STAGES == 3) cp_async_wait_group<1>(); else cp_async_wait_all();
        __syncthreads();
        const int nxt = lc + STAGES - 1;
        const int st_nxt = st_cur == 0 ? STAGES - 1 : st_cur - 1;  // (lc + STAGES - 1) % STAGES
        auto issue_next = [&]() {
            if (nxt < nch && !(opts & 1)) load_stage(st_nxt, nxt);
            else if constexpr (STAGES == 3) cp_async_commit();
        };
        if (!PIPELINED || (opts & 2)) issue_next();
        st_cur = st_cur + 1 == STAGES ? 0 : st_cur + 1;
        if (opts & 2) continue;
        const unsigned char* base = smem + st * C::STAGE;
        const bf16* Qs = reinterpret_cast<const bf16*>(base + C::ST_Q);
        const bf16* Ks = reinterpret_cast<const bf16*>(base + C::ST_K);
        const bf16* Ps = reinterpret_cast<const bf16*>(base + C::ST_P);
        const bf16* Ts = reinterpret_cast<const bf16*>(base + C::ST_T);
        const bf16* Vs = reinterpret_cast<const bf16*>(base + C::ST_V);
        const float* Fs = reinterpret_cast<const float*>(base + C::ST_F);

        // Phase 1: KS = K S0 and QS = Q S0 (rows m0..m0+15, C::NT n8 tiles
        // from n0). PIPELINED: odd k-steps into a second pair of accumulators.
        float ak[C::NT][4], ao[C::NT][4], ak2[C::NT][4], ao2[C::NT][4];
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) ak[nt][e] = ao[nt][e] = ak2[nt][e] = ao2[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < DK / 16; ++ks) {
            unsigned fk[4], fq[4];
            frag_a(fk, Ks, LD128, m0, 16 * ks, lane);
            frag_a(fq, Qs, LD128, m0, 16 * ks, lane);
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt) {
                unsigned b[2];
                frag_b(b, HT, LD128, 8 * (n0 + nt), 16 * ks, lane);
                const bool odd = PIPELINED && (ks & 1);
                mma_bf16_16816(odd ? ak2[nt] : ak[nt], fk, b);
                mma_bf16_16816(odd ? ao2[nt] : ao[nt], fq, b);
            }
        }
        if constexpr (PIPELINED) issue_next();
        // Epilogue 1: Y = V - ef KS (f32, rounded once to bf16) to Y^T; QS
        // scaled by qf (rows past the sequence: V = K = 0, ef = qf = 0).
        {
            unsigned ry[C::NT][2];
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                    const float2 v = __bfloat1622float2(*reinterpret_cast<const bf162*>(Vs + r * C::LDV + cc));
                    const float ef = Fs[FAC + r];
                    const float y0 = v.x - ef * (ak[nt][2 * hf] + ak2[nt][2 * hf]);
                    const float y1 = v.y - ef * (ak[nt][2 * hf + 1] + ak2[nt][2 * hf + 1]);
                    ry[nt][hf] = pack_bf16(y0, y1);
                    const float qf = Fs[r];
                    ao[nt][2 * hf] = (ao[nt][2 * hf] + ao2[nt][2 * hf]) * qf;
                    ao[nt][2 * hf + 1] = (ao[nt][2 * hf + 1] + ao2[nt][2 * hf + 1]) * qf;
                }
            store_tile_t(YT, ry, m0, n0);
        }
        // Y^T columns 8 n0.. are written and read only by the four warps of
        // this column group (warp / 4): a barrier of those 128 threads.
        if (warp >> 2) bar_sync_named<2, 128>(); else bar_sync_named<1, 128>();

        // Phase 1b: delta = Tb Y (rows m0.., k-steps over Tb's blocks 0..mb:
        // the blocks above the diagonal are zero and were not loaded).
        {
            float ad[C::NT][4], ad2[C::NT][4];
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) ad[nt][e] = ad2[nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) {
                if (ks <= mb) {  // warp-uniform
                    unsigned a[4];
                    frag_a(a, Ts, LD64, m0, 16 * ks, lane);
#pragma unroll
                    for (int nt = 0; nt < C::NT; ++nt) {
                        unsigned b[2];
                        frag_b(b, YT, LD64, 8 * (n0 + nt), 16 * ks, lane);
                        const bool odd = PIPELINED && (ks & 1);
                        mma_bf16_16816(odd ? ad2[nt] : ad[nt], a, b);
                    }
                }
            }
            // Epilogue 1b: delta and kf delta (rows past the sequence: kf = 0) in bf16.
            unsigned rn[C::NT][2], rk[C::NT][2];
#pragma unroll
            for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf;
                    const float d0 = ad[nt][2 * hf] + ad2[nt][2 * hf];
                    const float d1 = ad[nt][2 * hf + 1] + ad2[nt][2 * hf + 1];
                    const float kf = Fs[BT + r];
                    rn[nt][hf] = pack_bf16(d0, d1);
                    rk[nt][hf] = pack_bf16(d0 * kf, d1 * kf);
                }
            store_tile_t(VN, rn, m0, n0);
            store_tile_t(VK, rk, m0, n0);
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
                mma_bf16_16816(ao[nt], a, b);
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
                    mma_bf16_16816(acc_h[mt][nt], a, b);
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

#define GDN_SCAN_ENTRY(name, BV, STAGES, PIPELINED)                                                 \
    extern "C" __global__ void __launch_bounds__(SCANL_THREADS) name(                                    \
        const bf16* __restrict__ qkv, const bf16* __restrict__ tb_in, const bf16* __restrict__ p_in,    \
        const float* __restrict__ fac_in, float* __restrict__ state, bf16* __restrict__ out, int hk,    \
        int hv, SeqTable tab, int opts) {                                                                \
        scan_lite_body<BV, STAGES, PIPELINED>(qkv, tb_in, p_in, fac_in, state, out, hk, hv, tab, opts); \
    }

GDN_SCAN_ENTRY(gdn_chunk_scan_narrow_bf16, BVL_NARROW, SCANL_NARROW_STAGES, true)
GDN_SCAN_ENTRY(gdn_chunk_scan_wide_bf16, BVL_WIDE, SCANL_WIDE_STAGES, false)

}  // namespace gdn
