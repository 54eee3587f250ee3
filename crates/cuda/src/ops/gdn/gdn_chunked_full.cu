// Gated delta rule, chunked form: the full-width scan
// (gdn_chunk_scan_full_bf16, sm_90a only; ScanWidth::Full) over the prep's
// output (gdn_chunk_prep.cu: Tb = T diag(beta), P, factors);
// docs/perf/cuda-gdn.md, "Session 13, branch gdnfused" and "Session 14".
//
// One CTA per (value head, sequence) owns the whole 128 x 128 f32 state of
// that head across all of the sequence's chunks (the narrow and wide scans
// of gdn_chunked.cu split it into 4 or 2 column-block CTAs that each re-read
// the chunk's Q, K, P, Tb): every chunk's tiles are read once per head. Per chunk exactly their
// algebra (gdn_chunked.cu's header states it):
//   KS = K S0 and QS = Q S0                     (phase 1)
//   Y  = V - diag(ef) KS                        (epilogue 1; Y in place of V)
//   delta = Tb Y                                (phase 1b)
//   o  = diag(qf) QS + P delta                  (phase 2)
//   S1 = e^{G_L} S0 + K^T (kf delta)            (phase 2)
// with K, Q, V the raw bf16 input rows (zeros past the sequence) and
// qf, kf, ef, e^{G_L} from the prep's factors.
//
// Not warp-specialised: 16 warps (512 threads), all of them loading
// (cp.async, two stages: chunk c + 1's tiles stream in while chunk c
// computes) and all of them computing: phase 1 on wgmma (below), phases 1b
// and 2 and the state update on mma.sync m16n8k16 (bf16 in, f32
// accumulate), fragments by ldmatrix. Warp w:
//   phases 1, 1b, 2 (64 x 128 tiles): rows 16 (w % 4).., columns 32 (w / 4)..
//     (4 n8 tiles); the four warps of a column group are one warpgroup;
//   the state: key rows 16 (w % 8).., value columns 64 (w / 8).. (8 n8 tiles,
//     32 f32 registers a thread).
// Synchronisation per chunk: the loop head (cp.async wait + __syncthreads:
// stage c landed, S^T of the previous chunk written, the other stage free),
// one 128-thread named barrier per column group (Y complete before Tb Y
// reads it), one __syncthreads (delta^T and (kf delta)^T complete, every
// read of S^T done before the state update overwrites it).
//
// Rounding points: those of the narrow and wide scans (S0 -> bf16 for the
// S^T tile; KS, QS f32; Y = V - ef KS in f32 rounded once to bf16; Tb bf16 from the
// prep; delta = Tb Y f32, rounded to bf16 as delta and as kf delta; o f32,
// bf16 on store; S1 f32). The only differences: Y is stored row-major and
// read by ldmatrix.trans (same values), and the products over the zero
// blocks of P above its diagonal are skipped (exact, except that a NaN of a
// later row no longer reaches earlier rows through 0 * NaN).
//
// opts as in gdn_chunked.cu (1 = no tile loads after the first chunk,
// 2 = no arithmetic; timing only, wrong results).
//
// Phase 1 (KS = K S0 and QS = Q S0, 55 % of the chunk's MACs) runs on
// Hopper warpgroup MMA: warpgroup cg issues 8 k-steps x 2 wgmma m64n32k16
// (A = the K or Q rows, B = S^T rows 32 cg.., both read by the tensor cores
// from shared memory, K-major, 128-byte swizzle), then waits for them. Its
// accumulator fragment is the mma.sync one (warp w % 4 of the warpgroup
// holds rows 16 (w % 4).., register 4 nt + e = m16n8 C fragment element e of
// n8 tile nt), so the epilogues are mma.sync code. Q, K and S^T live in
// shared memory as [2 column blocks][rows][128 B] with the 16-byte chunks
// XOR-swizzled by (row mod 8) (the SW128 layout of the descriptors, as in
// attention_fused_wgmma.cu), at 1024-byte aligned offsets from a 1024-byte
// aligned base; the cp.async loads, the stmatrix.trans stores of S^T and the
// ldmatrix.trans reads of K^T (state update) address that layout.
// Generic-proxy writes that a wgmma reads (cp.async of Q/K, stmatrix of
// S^T) are followed by fence.proxy.async before the loop-head barrier.
// (Session 13 wrote the same kernel with phase 1 on mma.sync too; it was
// 4-6 % slower and was not kept.)
//
// Shared memory: two stages of [Q 16 KiB | K 16 KiB | P, Tb 64 x 72 | V (then
// Y) 64 x 136 | factors] padded to 69,632 B; S^T 32 KiB; delta^T, (kf delta)^T
// 128 x 72: 208,896 B + 1,024 B of alignment slack = 209,920 B.
//
// kernels/wgmma_sync.cuh, gdn_common.cuh and gdn_stmatrix.cuh are prepended
// to this source (sources.rs), the last two inside `namespace gdn`.

using headroom_async::desc_sw128;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_wait;

constexpr int FUSED_WARPS = 16;
constexpr int FUSED_THREADS = FUSED_WARPS * 32;
constexpr int FACL = 196;        // floats per (chunk, head) of the prep's factors (gdn_chunk_prep.cu)
static_assert(FACL == FAC + BT && FACL % 4 == 0, "factors: FAC, then ef");

// Shared-memory layout (bytes from the 1024-byte aligned base). One stage:
constexpr int FW_Q = 0;                           // Q rows, SW128 [2][BT][128 B]
constexpr int FW_K = FW_Q + BT * DK * 2;          // K rows, SW128 [2][BT][128 B]
constexpr int FW_P = FW_K + BT * DK * 2;          // P [BT][LD64]
constexpr int FW_T = FW_P + BT * LD64 * 2;        // Tb [BT][LD64] (blocks at and below the diagonal)
constexpr int FW_V = FW_T + BT * LD64 * 2;        // V rows [BT][LD128], overwritten by Y
constexpr int FW_F = FW_V + BT * LD128 * 2;       // factors [FACL] f32
constexpr int FW_STAGE = (FW_F + FACL * 4 + 1023) / 1024 * 1024;
constexpr int FUSED_STAGES = 2;
constexpr int FW_HT = FUSED_STAGES * FW_STAGE;    // S^T bf16, SW128 [2][DV][128 B] (rows: value columns)
constexpr int FW_VN = FW_HT + DV * DK * 2;        // delta^T bf16 [DV][LD64]
constexpr int FW_VK = FW_VN + DV * LD64 * 2;      // (kf delta)^T bf16 [DV][LD64]
constexpr int FW_END = FW_VK + DV * LD64 * 2;
constexpr int FUSED_WG_SMEM = FW_END + 1024;      // + slack to align the base to 1024 bytes
static_assert(FW_STAGE % 1024 == 0 && FW_K % 1024 == 0 && FW_HT % 1024 == 0, "SW128 tiles 1024-byte aligned");
static_assert(FW_P % 16 == 0 && FW_T % 16 == 0 && FW_V % 16 == 0 && FW_F % 16 == 0, "16-byte aligned tiles");
static_assert(FW_STAGE == 69632 && FUSED_WG_SMEM == 209920, "launch.rs SCAN_FULL_SMEM");
static_assert(FUSED_WG_SMEM <= 227 * 1024, "one CTA fits an SM");

// Byte offset of 16-byte chunk c (0..15) of row r in a [2][ROWS][128 B]
// SW128 tile (columns 0-63, then 64-127; chunk c % 8 of a 128-byte row
// stored at position (c % 8) ^ (r % 8)).
template <int ROWS>
__device__ __forceinline__ unsigned sw128(int r, int c) {
    return (unsigned)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// d += A B on one wgmma m64n32k16 (bf16 in, f32 accumulate), A (64 x 16)
// and B (16 x 32) from shared memory by descriptor, both K-major.
// d[nt][e]: accumulator register 4 nt + e.
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[4][4], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "l"(da), "l"(db), "r"(1));
}
// Pins accumulator registers here: no read or write of them moves across
// (after wgmma_wait).
__device__ __forceinline__ void fence_acc(float (&d)[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

constexpr int FNT = 4;           // n8 tiles per warp in phases 1, 1b, 2 (32 columns)
constexpr int FSNT = 8;          // n8 state tiles per warp (64 columns)
static_assert(4 * FNT * 8 * (FUSED_WARPS / 4) == 4 * DV, "phase tiles: 4 row tiles x 4 column groups");
static_assert(FSNT * 8 * 2 == DV && 16 * 8 == DK && FUSED_WARPS == 16, "state: 8 row tiles x 2 column halves");

extern __shared__ __align__(16) unsigned char dyn_smem[];

// Named barrier `id` (1..4; 0 is __syncthreads') over the 128 threads of one warpgroup.
__device__ __forceinline__ void bar_sync_128(int id) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

// A fragment (16 x 16) of the transpose of a [k][m] tile of BT rows in the
// SW128 layout at shared address s: element (m, k) of the fragment is
// tile[k][m] (ldmatrix.trans). Lanes 8i..8i+7 address matrix i: k rows
// k0 + 8(i >> 1).., columns m0 + 8(i & 1).. (gdn_chunked.cu's frag_a_trans
// with the row addresses of the swizzled layout; m0 a multiple of 8).
__device__ __forceinline__ void frag_a_trans_sw(unsigned* a, unsigned s, int m0, int k0, int lane) {
    const int r = k0 + (lane & 7) + ((lane >> 4) & 1) * 8;
    const int c = (m0 >> 3) + ((lane >> 3) & 1);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(s + sw128<BT>(r, c)));
}

// B fragment (16 x 8) of a row-major [k][n] tile with row stride ld
// (ldmatrix.trans; rows 16-byte aligned): lanes 0-15 address rows k0.. at
// n0 (lanes 0-7: b[0], k rows k0..k0+7; lanes 8-15: b[1]); lanes 16-31's
// addresses are ignored by .x2. The same helper as gdn_chunk_prep.cu's
// (verified there), argument order (k0, n0) as there.
__device__ __forceinline__ void frag_b_trans(unsigned* b, const bf16* s, int ld, int k0, int n0, int lane) {
    const bf16* p = s + (k0 + (lane & 15)) * ld + n0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}

// stsm_x4_trans (gdn_stmatrix.cuh) at a shared address (the lane's 16-byte row).
__device__ __forceinline__ void stsm_x4_trans_at(unsigned addr, unsigned r0, unsigned r1, unsigned r2,
                                                 unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

extern "C" __global__ void __launch_bounds__(FUSED_THREADS, 1) gdn_chunk_scan_full_bf16(
    const bf16* __restrict__ qkv, const bf16* __restrict__ tb_in, const bf16* __restrict__ p_in,
    const float* __restrict__ fac_in, float* __restrict__ state, bf16* __restrict__ out, int hk, int hv,
    SeqTable tab, int opts) {
    // The tiles start at the first 1024-byte boundary (the SW128 period).
    unsigned char* smem = dyn_smem + ((1024u - (smem_addr(dyn_smem) & 1023u)) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g8 = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.x, s = blockIdx.y;
    const int kh = h / (hv / hk);
    const int rows = tab.rows[s];
    const int nch = (rows + BT - 1) / BT;
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const long long ld_out = (long long)hv * DV;
    const long long v_col = 2LL * hk * DK + (long long)h * DV;  // this head's V in a qkv row
    const unsigned sHT = smem_addr(smem + FW_HT);
    bf16* VN = reinterpret_cast<bf16*>(smem + FW_VN);
    bf16* VK = reinterpret_cast<bf16*>(smem + FW_VK);

    // Chunk lc's tiles into stage st (one cp.async group).
    auto load_stage = [&](int st, int lc) {
        unsigned char* base = smem + st * FW_STAGE;
        const size_t tile = (size_t)(tab.chunk0[s] + lc) * hv + h;
        const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
        const int nrows = min(BT, rows - lc * BT);
        unsigned char* Qs = base + FW_Q;  // SW128
        unsigned char* Ks = base + FW_K;  // SW128
        bf16* Ps = reinterpret_cast<bf16*>(base + FW_P);
        bf16* Ts = reinterpret_cast<bf16*>(base + FW_T);
        bf16* Vs = reinterpret_cast<bf16*>(base + FW_V);
        float* Fs = reinterpret_cast<float*>(base + FW_F);
        for (int e = tid; e < BT * 16; e += FUSED_THREADS) {  // Q, K, V rows (zeros past the sequence)
            const int r = e >> 4, c = e & 15, ch = c * 8;
            const bool ok = r < nrows;
            const bf16* src = qkv + (row0 + r) * ld_qkv;
            cp_async_16(Qs + sw128<BT>(r, c), ok ? src + kh * DK + ch : qkv, ok);
            cp_async_16(Ks + sw128<BT>(r, c), ok ? src + (long long)(hk + kh) * DK + ch : qkv, ok);
            cp_async_16(Vs + r * LD128 + ch, ok ? src + v_col + ch : qkv, ok);
        }
        for (int e = tid; e < BT * 8; e += FUSED_THREADS) {  // P; Tb at and below its diagonal blocks
            const int r = e >> 3, ch = (e & 7) * 8;
            cp_async_16(Ps + r * LD64 + ch, p_in + (tile * BT + r) * BT + ch, true);
            if ((ch >> 4) <= (r >> 4)) cp_async_16(Ts + r * LD64 + ch, tb_in + (tile * BT + r) * BT + ch, true);
        }
        if (tid < FACL / 4) cp_async_16(Fs + 4 * tid, fac_in + tile * FACL + 4 * tid, true);
        cp_async_commit();
    };

    // The state: warp w holds key rows hrow0.. (16), value columns hcol0.. (64), f32.
    float* S = state + ((size_t)tab.slot[s] * hv + h) * DK * DV;
    const int hrow0 = 16 * (warp & 7);
    const int hcol0 = 64 * (warp >> 3);
    float acc_h[FSNT][4];
#pragma unroll
    for (int nt = 0; nt < FSNT; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = hrow0 + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
            const float2 v = *reinterpret_cast<const float2*>(S + (size_t)r * DV + cc);
            acc_h[nt][2 * hf] = v.x;
            acc_h[nt][2 * hf + 1] = v.y;
        }
    // S^T in bf16 (HT[col][row], SW128 with DV rows) for the next chunk's
    // phase 1: lane 8i + j addresses row (value column) hcol0 + 8 (np + i/2) + j,
    // 16-byte chunk (hrow0 + 8 (i % 2)) / 8 (key rows).
    auto store_ht = [&]() {
        const int i = lane >> 3, j = lane & 7;
#pragma unroll
        for (int np = 0; np < FSNT; np += 2) {
            const float* a0 = acc_h[np];
            const float* a1 = acc_h[np + 1];
            stsm_x4_trans_at(sHT + sw128<DV>(hcol0 + 8 * (np + (i >> 1)) + j, (hrow0 >> 3) + (i & 1)),
                             pack_bf16(a0[0], a0[1]), pack_bf16(a0[2], a0[3]), pack_bf16(a1[0], a1[1]),
                             pack_bf16(a1[2], a1[3]));
        }
    };
    // A 64 x 128 tile's C fragments of this warp (rows m0.., FNT n8 tiles
    // from n8 tile n0) as packed bf16 pairs r[nt][hf], stored transposed into
    // a [DV][LD64] tile.
    auto store_tile_t = [&](bf16* dst, const unsigned (&r)[FNT][2], int m0, int n0) {
        const int i = lane >> 3, j = lane & 7;
#pragma unroll
        for (int np = 0; np < FNT; np += 2)
            stsm_x4_trans(dst + (8 * (n0 + np + (i >> 1)) + j) * LD64 + m0 + 8 * (i & 1), r[np][0], r[np][1],
                          r[np + 1][0], r[np + 1][1]);
    };

    load_stage(0, 0);
    store_ht();
    const int mb = warp & 3;                  // row tile of this warp (phases 1-2): its 16-row block
    const int m0 = 16 * mb;                   // chunk rows m0..m0+15
    const int cg = warp >> 2;                 // column group (= warpgroup): columns 32 cg..
    const int n0 = FNT * cg;                  // first n8 tile of this warp (phases 1-2)
    int st_next = 1;
#pragma unroll 1
    for (int lc = 0; lc < nch; ++lc) {
        // Stage lc % 2 landed (the only group in flight); the barrier also
        // frees the other stage (read by chunk lc - 1) and publishes S^T.
        cp_async_wait_all();
        fence_proxy_async();  // this thread's cp.async (Q, K) and stmatrix (S^T) writes -> wgmma reads
        __syncthreads();
        const int st = (opts & 1) ? 0 : st_next ^ 1;
        if (lc + 1 < nch && !(opts & 1)) load_stage(st_next, lc + 1);
        st_next ^= 1;
        if (opts & 2) continue;
        unsigned char* base = smem + st * FW_STAGE;
        const unsigned sQ = smem_addr(base + FW_Q);
        const unsigned sK = smem_addr(base + FW_K);
        const bf16* Ps = reinterpret_cast<const bf16*>(base + FW_P);
        const bf16* Ts = reinterpret_cast<const bf16*>(base + FW_T);
        bf16* Ys = reinterpret_cast<bf16*>(base + FW_V);  // V, then Y in place
        const float* Fs = reinterpret_cast<const float*>(base + FW_F);

        // Phase 1: KS = K S0 and QS = Q S0 on wgmma: this warpgroup (column
        // group cg) computes all 64 rows x columns 32 cg..; this warp's
        // accumulators are rows m0.., FNT n8 tiles from n0, as in the
        // mma.sync fragments. k-step ks: column block ks / 4 of the SW128 tiles,
        // 32 bytes (16 elements) further per step inside its 128-byte rows.
        float ak[FNT][4], ao[FNT][4];
#pragma unroll
        for (int nt = 0; nt < FNT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) ak[nt][e] = ao[nt][e] = 0.f;
        {
            constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
            const unsigned sB = sHT + (unsigned)(32 * cg * 128);  // S^T rows 32 cg..
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < DK / 16; ++ks) {
                const unsigned col = (unsigned)((ks & 3) * 32);
                const unsigned a_off = (unsigned)((ks >> 2) * (BT * 128)) + col;
                const unsigned long long db = desc_sw128(sB + (unsigned)((ks >> 2) * (DV * 128)) + col, 16, SBO);
                wgmma_m64n32k16_ss(ak, desc_sw128(sK + a_off, 16, SBO), db);
                wgmma_m64n32k16_ss(ao, desc_sw128(sQ + a_off, 16, SBO), db);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(ak);
            fence_acc(ao);
        }
        // Epilogue 1: Y = V - ef KS (f32, rounded once to bf16), written over
        // V element by element (each element read and written by one thread);
        // QS scaled by qf (rows past the sequence: V = K = 0, ef = qf = 0).
#pragma unroll
        for (int nt = 0; nt < FNT; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                bf162* yp = reinterpret_cast<bf162*>(Ys + r * LD128 + cc);
                const float2 v = __bfloat1622float2(*yp);
                const float ef = Fs[FAC + r];
                *yp = __floats2bfloat162_rn(v.x - ef * ak[nt][2 * hf], v.y - ef * ak[nt][2 * hf + 1]);
                const float qf = Fs[r];
                ao[nt][2 * hf] *= qf;
                ao[nt][2 * hf + 1] *= qf;
            }
        // Y columns 32 cg.. are written and read only by the four warps of
        // this column group (one warpgroup): a barrier of those 128 threads.
        bar_sync_128(1 + cg);

        // Phase 1b: delta = Tb Y (rows m0.., k-steps over Tb's blocks 0..mb:
        // the blocks above the diagonal are zero and were not loaded).
        {
            float ad[FNT][4];
#pragma unroll
            for (int nt = 0; nt < FNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) ad[nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) {
                if (ks <= mb) {  // warp-uniform
                    unsigned a[4];
                    frag_a(a, Ts, LD64, m0, 16 * ks, lane);
#pragma unroll
                    for (int nt = 0; nt < FNT; ++nt) {
                        unsigned b[2];
                        frag_b_trans(b, Ys, LD128, 16 * ks, 8 * (n0 + nt), lane);
                        mma_bf16_16816(ad[nt], a, b);
                    }
                }
            }
            // Epilogue 1b: delta and kf delta (rows past the sequence: kf = 0) in bf16.
            unsigned rn[FNT][2], rk[FNT][2];
#pragma unroll
            for (int nt = 0; nt < FNT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf;
                    const float d0 = ad[nt][2 * hf], d1 = ad[nt][2 * hf + 1];
                    const float kf = Fs[BT + r];
                    rn[nt][hf] = pack_bf16(d0, d1);
                    rk[nt][hf] = pack_bf16(d0 * kf, d1 * kf);
                }
            store_tile_t(VN, rn, m0, n0);
            store_tile_t(VK, rk, m0, n0);
        }
        __syncthreads();

        // Phase 2a: o = qf QS + P delta (k-steps over P's blocks 0..mb: the
        // blocks above the diagonal are zero), valid rows stored.
#pragma unroll
        for (int ks = 0; ks < BT / 16; ++ks) {
            if (ks <= mb) {  // warp-uniform
                unsigned a[4];
                frag_a(a, Ps, LD64, m0, 16 * ks, lane);
#pragma unroll
                for (int nt = 0; nt < FNT; ++nt) {
                    unsigned b[2];
                    frag_b(b, VN, LD64, 8 * (n0 + nt), 16 * ks, lane);
                    mma_bf16_16816(ao[nt], a, b);
                }
            }
        }
        {
            const long long row0 = (long long)tab.first[s] + (long long)lc * BT;
            const int nrows = min(BT, rows - lc * BT);
#pragma unroll
            for (int nt = 0; nt < FNT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = m0 + g8 + 8 * hf, cc = 8 * (n0 + nt) + 2 * t4;
                    if (r < nrows)
                        *reinterpret_cast<bf162*>(out + (row0 + r) * ld_out + (long long)h * DV + cc) =
                            __floats2bfloat162_rn(ao[nt][2 * hf], ao[nt][2 * hf + 1]);
                }
        }
        // Phase 2b: S = e^{G_L} S0 + K^T (kf delta) (key rows hrow0..,
        // columns hcol0..; K^T straight from the K rows by ldmatrix.trans).
        {
            const float egl = Fs[2 * BT];
#pragma unroll
            for (int nt = 0; nt < FSNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_h[nt][e] *= egl;
#pragma unroll
            for (int ks = 0; ks < BT / 16; ++ks) {
                unsigned a[4];
                frag_a_trans_sw(a, sK, hrow0, 16 * ks, lane);
#pragma unroll
                for (int nt = 0; nt < FSNT; ++nt) {
                    unsigned b[2];
                    frag_b(b, VK, LD64, hcol0 + 8 * nt, 16 * ks, lane);
                    mma_bf16_16816(acc_h[nt], a, b);
                }
            }
        }
        store_ht();  // S^T for the next chunk (its readers wait at the loop head)
    }

#pragma unroll
    for (int nt = 0; nt < FSNT; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = hrow0 + g8 + 8 * hf, cc = hcol0 + 8 * nt + 2 * t4;
            *reinterpret_cast<float2*>(S + (size_t)r * DV + cc) = make_float2(acc_h[nt][2 * hf], acc_h[nt][2 * hf + 1]);
        }
}

}  // namespace gdn
