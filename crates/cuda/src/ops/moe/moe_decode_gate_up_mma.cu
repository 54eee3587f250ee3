// The MoE decode's gate+up on the tensor cores: FP8 experts (routed and
// shared) first, bf16 ones at the end of the file (moe_decode_gate_up_mma).
// FP8 (crates/cuda/src/ops/moe/decode.rs, `gate_up_mma_takes`): the grid,
// the routing and the handoff to the down kernel of moe_decode_gate_up_fp8
// (gate_up_body in moe_decode.cu), the dots of mma.sync m16n8k16 instead of
// one FMA a weight (docs/perf/cuda-fp8.md, session 20: the FMA kernel ran
// 292 warp instructions a KB at 25 % of DRAM). Follows
// moe_decode_down_mma.cu in the program (its mma_round).
//
// A CTA's 24 columns (40 from two rows: the *_rows entries, GU_MMA_TILES_ROWS)
// are GU_MMA_TILES tiles of 8: a tile is A rows 0-7 the
// gate rows of its columns and rows 8-15 their up rows, so lane (g, 0) ends
// with column g's gate dot (D[g][0]) and up dot (D[g + 8][0]). The warps
// split hidden: warp w takes the 64-column rounds [w per, (w + 1) per), per
// = ceil(hidden / 64 / WARPS) <= GU_MMA_ROUNDS; lane (g, t) loads the 16
// bytes at column 64 j + 16 t of its gate and up rows for each of its rounds,
// the four mma of a round take bytes 4m .. 4m + 3 (A's columns 2t, 2t + 1
// and 2t + 8, 2t + 9), B x at those columns in every column. x (the row
// staged in shared memory) goes to f16 a warp: each warp's own 512 columns
// at most, times 2^e so that their largest |x| is in [2^14, 2^15), the
// warp's sums times 2^-e. Each round's gate and up sums are multiplied by
// their rows' 128 x 128 block scales. The warps' sums meet in shared memory
// (warp order) and one thread a column writes SiLU(g) * u.

namespace headroom_moe_decode {

constexpr int GU_MMA_TILES = 3;   // tiles of 8 columns a CTA (24 columns, as GATE_UP_COLS warps of 8)
constexpr int GU_MMA_TILES_ROWS = 5;  // from two rows (the *_rows entries: as GATE_UP_COLS_ROWS)
constexpr int GU_MMA_ROUNDS = 4;  // rounds of 64 columns a warp: hidden <= 2048

// The CTA's activations once every warp's tile sums are in part (tile,
// warp, gate rows 0-7 then up rows 8-15): thread c < cols (the CTA's live
// tiles' columns) sums column c0 + c's over the warps in order and writes
// SiLU(g) * u (columns past n: nothing).
__device__ __forceinline__ void gu_mma_write(const float (*part)[WARPS][16], int cols, int c0, int n,
                                             float* act_r) {
    if (threadIdx.x < cols) {
        const int i = threadIdx.x / 8, cg = threadIdx.x % 8;
        const int c = c0 + threadIdx.x;
        if (c < n) {
            float gsum = 0.f, usum = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                gsum += part[i][w][cg];
                usum += part[i][w][cg + 8];
            }
            act_r[c] = gsum / (1.f + expf(-gsum)) * usum;
        }
    }
}

#ifdef HEADROOM_E4M3_CVT  // sm_89+ (e4m3.cuh, mma_round): below it the entry traps and decode.rs never takes it

// A tile's gate row g and up row g (this lane's 16 bytes of each of rounds
// [r0, r1), zeros past r1).
__device__ __forceinline__ void gu_mma_load(const unsigned char* g_row, const unsigned char* u_row, int r0, int r1,
                                            int lane, unsigned long long pol, uint4 (&v)[GU_MMA_ROUNDS][2]) {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < GU_MMA_ROUNDS; ++j) {
        const int col = 64 * (r0 + j) + 16 * t;
        const bool ok = r0 + j < r1;
        v[j][0] = ok ? load16w_fp8(g_row + col, g_row, true, pol) : make_uint4(0u, 0u, 0u, 0u);
        v[j][1] = ok ? load16w_fp8(u_row + col, u_row, true, pol) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// Lane l's f16 pairs of x[64 r0 + 16 l .. + 16) (the warp's columns, 16 a
// lane, zeros past hidden) times 2^e, e from the warp's largest |x|;
// returns 2^-e.
__device__ __forceinline__ float gu_mma_x(const bf16* xs, int r0, int r1, int lane, unsigned (&h)[8]) {
    const int at = 64 * r0 + 16 * lane;
    const bool in = at < 64 * r1;
    const uint4 a = in ? *reinterpret_cast<const uint4*>(xs + at) : make_uint4(0u, 0u, 0u, 0u);
    const uint4 b = in ? *reinterpret_cast<const uint4*>(xs + at + 8) : make_uint4(0u, 0u, 0u, 0u);
    const unsigned u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    unsigned mx = 0;  // bf16 bits of the largest |x| (NaN above inf)
#pragma unroll
    for (int q = 0; q < 8; ++q) mx = max(mx, max(u[q] & 0x7fffu, (u[q] >> 16) & 0x7fffu));
    mx = __reduce_max_sync(0xffffffffu, mx);
    int e = 0;
    if (mx != 0 && mx < 0x7f80u) e = min(120, max(-120, 14 - ((int)(mx >> 7) - 127)));
    const float up = __int_as_float((127 + e) << 23);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const __half2 p = __floats2half2_rn(__uint_as_float(u[q] << 16) * up, __uint_as_float(u[q] & 0xffff0000u) * up);
        h[q] = *reinterpret_cast<const unsigned*>(&p);
    }
    return __int_as_float((127 - e) << 23);
}

// This warp's gate (sg) and up (su) sums of one tile over rounds [r0, r1):
// lane (g, 0) holds column g's. gs / us: the gate / up rows' block row of
// scales (one scale each a 128-column block).
__device__ __forceinline__ void gu_mma_tile(const uint4 (&v)[GU_MMA_ROUNDS][2], const unsigned (&h)[8], int r0,
                                            int r1, const float* gs, const float* us, int lane, float& sg,
                                            float& su) {
    const int t = lane & 3;
    sg = 0.f;
    su = 0.f;
#pragma unroll
    for (int j = 0; j < GU_MMA_ROUNDS; ++j) {
        if (r0 + j >= r1) break;  // warp-uniform
        // x at 64 (r0 + j) + 16 t .. + 16: lane 4 j + t's pairs.
        float d[4];
        mma_round(v[j][0], v[j][1], h, 4 * j + t, d);
        const int kb = (r0 + j) >> 1;  // the round's 128-column block
        sg = fmaf(d[0], __ldg(gs + kb), sg);
        su = fmaf(d[2], __ldg(us + kb), su);
    }
}

#endif  // HEADROOM_E4M3_CVT

}  // namespace headroom_moe_decode

// moe_decode_gate_up_fp8_mma: moe_decode_gate_up_fp8's parameters and grid
// (ceil(max(inter, shared_inter) / 24), rows + rows * top_k), block THREADS.
// Needs hidden a multiple of 64 up to 64 * GU_MMA_ROUNDS * WARPS and the
// intermediates multiples of 8 (decode.rs checks).
template <int TILES>
__device__ __forceinline__ void gate_up_fp8_mma_body(
    const __nv_bfloat16* __restrict__ x, const unsigned char* __restrict__ gate_up,
    const float* __restrict__ gate_up_s, const unsigned char* __restrict__ shared_gate_proj,
    const float* __restrict__ shared_gate_s, const unsigned char* __restrict__ shared_up_proj,
    const float* __restrict__ shared_up_s, const float* __restrict__ logits, int rows, int hidden, int experts,
    int top_k, int renormalise, int first, int local, int inter, int shared_inter, int act_stride,
    int* __restrict__ topk_expert, float* __restrict__ topk_weight, float* __restrict__ act) {
#ifndef HEADROOM_E4M3_CVT
    __trap();  // no e4m3 conversion instruction below sm_89: decode.rs never takes this entry there
#else
    using namespace headroom_moe_decode;
    __shared__ RouteSmem sm;
    __shared__ __align__(16) bf16 xs[MAX_HIDDEN];
    __shared__ float part[TILES][WARPS][16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
    const int y = blockIdx.y;
    const int c0 = blockIdx.x * TILES * 8;  // the CTA's first column
    const int rounds = hidden >> 6;
    const int per = (rounds + WARPS - 1) / WARPS;
    const int r0 = min(rounds, warp * per), r1 = min(rounds, r0 + per);
    const int kb = (hidden + 127) >> 7;
    const unsigned long long pol = weight_policy();
    // The CTA's expert: its gate rows (row c at g_m + c * hidden, scales
    // g_s) and up rows (row u_off + c of u_m, scales u_s), its columns n and
    // its act row.
    const unsigned char *g_m, *u_m;
    const float *g_s, *u_s;
    int n, u_off, r;
    float* act_r;
    uint4 v[GU_MMA_ROUNDS][2];
    // Tile i's gate and up rows of this lane (row g of the tile; the last
    // column past n) and their block rows of scales.
    auto rows_of = [&](int i, const unsigned char*& gr, const unsigned char*& ur, const float*& gsr,
                       const float*& usr) {
        const int c = min(c0 + 8 * i + g, n - 1);
        gr = g_m + (long long)c * hidden;
        ur = u_m + (long long)(u_off + c) * hidden;
        gsr = g_s + (long long)(c >> 7) * kb;
        usr = u_s + (long long)((u_off + c) >> 7) * kb;
    };
    const unsigned char *gr, *ur;
    const float *gsr, *usr;
    if (y < rows) {
        // The shared expert of row y: its first tile loads before the wait.
        r = y;
        g_m = shared_gate_proj;
        u_m = shared_up_proj;
        g_s = shared_gate_s;
        u_s = shared_up_s;
        n = shared_inter;
        u_off = 0;
        act_r = act + ((long long)r * (top_k + 1) + top_k) * act_stride;
        if (c0 >= n) {
            wait_prior();
            launch_next();
            return;
        }
        rows_of(0, gr, ur, gsr, usr);
        gu_mma_load(gr, ur, r0, r1, lane, pol, v);
        wait_prior();
        launch_next();  // the down CTAs load their tiles while this grid runs
        stage_async(x + (long long)r * hidden, xs, hidden);
        cp_async_wait();
        __syncthreads();
    } else {
        const int pair = y - rows;
        r = pair / top_k;
        const int slot = pair - r * top_k;
        routed_cta_start(x, logits, r, slot, hidden, experts, top_k, renormalise, first, local, topk_expert,
                         topk_weight, xs, sm);
        const int e = sm.sel_e[slot] - first;
        if (e < 0 || e >= local || c0 >= inter) return;  // another rank's expert: the down kernel skips it
        g_m = u_m = gate_up + (long long)e * 2 * inter * hidden;
        g_s = u_s = gate_up_s + (long long)e * ((2 * inter + 127) >> 7) * kb;
        n = inter;
        u_off = inter;
        act_r = act + ((long long)r * (top_k + 1) + slot) * act_stride;
        rows_of(0, gr, ur, gsr, usr);
        gu_mma_load(gr, ur, r0, r1, lane, pol, v);
    }
    unsigned h[8];
    const float down = gu_mma_x(xs, r0, r1, lane, h);
#pragma unroll 1
    for (int i = 0; i < TILES; ++i) {
        const bool live = c0 + 8 * i < n;  // CTA-uniform
        float sg = 0.f, su = 0.f;
        if (live) {
            uint4 nv[GU_MMA_ROUNDS][2];
            const unsigned char *gn = nullptr, *un = nullptr;
            const float *gsn = nullptr, *usn = nullptr;
            const bool more = i + 1 < TILES && c0 + 8 * (i + 1) < n;
            if (more) {
                rows_of(i + 1, gn, un, gsn, usn);
                gu_mma_load(gn, un, r0, r1, lane, pol, nv);
            }
            gu_mma_tile(v, h, r0, r1, gsr, usr, lane, sg, su);
            if (more) {
#pragma unroll
                for (int j = 0; j < GU_MMA_ROUNDS; ++j) {
                    v[j][0] = nv[j][0];
                    v[j][1] = nv[j][1];
                }
                gsr = gsn;
                usr = usn;
            }
        }
        if ((lane & 3) == 0) {
            part[i][warp][g] = sg * down;
            part[i][warp][g + 8] = su * down;
        }
    }
    __syncthreads();
    gu_mma_write(part, TILES * 8, c0, n, act_r);
#endif
}

// The entries' parameters are moe_decode_gate_up's (GATE_UP_*PARAMS and
// GATE_UP_TAIL of moe_decode.cu, which precedes this file in the program),
// declared in its namespace as its entries are.
namespace headroom_moe_decode {

extern "C" __global__ void __launch_bounds__(THREADS, 2)
    moe_decode_gate_up_fp8_mma(GATE_UP_SCALED_PARAMS(unsigned char, unsigned char)) {
    gate_up_fp8_mma_body<GU_MMA_TILES>(x, gate_up, gate_up_s, shared_gate_proj, shared_gate_s, shared_up_proj,
                                       shared_up_s, GATE_UP_TAIL);
}

// The same from two rows: GU_MMA_TILES_ROWS tiles a CTA (40 columns, as
// moe_decode_gate_up_fp8_rows: fewer CTAs, each routing once for more columns).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    moe_decode_gate_up_fp8_mma_rows(GATE_UP_SCALED_PARAMS(unsigned char, unsigned char)) {
    gate_up_fp8_mma_body<GU_MMA_TILES_ROWS>(x, gate_up, gate_up_s, shared_gate_proj, shared_gate_s,
                                            shared_up_proj, shared_up_s, GATE_UP_TAIL);
}

}  // namespace headroom_moe_decode

// The bf16 gate_up on the tensor cores (decode.rs, `gate_up_mma_takes`):
// moe_decode_gate_up's grid, routing and handoff, a CTA's 24 columns as
// GU_MMA_TILES tiles of 8 gate rows (A rows 0-7) and their 8 up rows (A rows
// 8-15), as moe_decode_gate_up_fp8_mma. A bf16 chunk is 8 weights, so a
// round is 32 columns of hidden: lane (g, t) loads the 16 bytes at column
// 32 j + 8 t of its gate and up rows, the two mma of a round take the
// chunk's words 2m and 2m + 1 (A's columns 2t, 2t + 1 and 2t + 8, 2t + 9)
// and B the x words at the same columns (from shared memory, the same in
// every B column). Warp w takes the rounds [w per, (w + 1) per) of hidden
// (per = ceil(hidden / 32 / WARPS) <= 2 * GU_BF_STAGE), loaded a stage of
// GU_BF_STAGE rounds at a time, the next stage's loads issued before the
// current stage's mma (a tile is one or two stages). The products are exact
// in f32 (bf16 times bf16), summed by the tensor cores in f32: the FMA
// kernel's products in another order. The warps' sums meet in shared memory
// (warp order) and one thread a column writes SiLU(g) * u.

namespace headroom_moe_decode {

constexpr int GU_BF_STAGE = 4;  // 32-column rounds a stage: a lane's 4 gate and 4 up chunks

// A stage of a tile: this lane's chunks of its gate row gr and up row ur for
// rounds [q0, q0 + GU_BF_STAGE), none past r1 (zeros there).
__device__ __forceinline__ void gu_bf_load(const bf16* gr, const bf16* ur, int q0, int r1, int lane,
                                           unsigned long long pol, uint4 (&v)[GU_BF_STAGE][2]) {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < GU_BF_STAGE; ++j) {
        const int col = 32 * (q0 + j) + 8 * t;
        const bool ok = q0 + j < r1;
        v[j][0] = ok ? load8w(gr + col, gr, true, pol) : zero4();
        v[j][1] = ok ? load8w(ur + col, ur, true, pol) : zero4();
    }
}

// The stage's products added to d (lane (g, t): d[0] column g's gate sum,
// d[2] its up sum), x from shared memory.
__device__ __forceinline__ void gu_bf_stage(const uint4 (&v)[GU_BF_STAGE][2], const bf16* xs, int q0, int r1,
                                            int lane, float (&d)[4]) {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < GU_BF_STAGE; ++j) {
        if (q0 + j >= r1) break;  // warp-uniform
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + 32 * (q0 + j) + 8 * t);
        mma_bf16_16816(d, v[j][0].x, v[j][1].x, v[j][0].y, v[j][1].y, xv.x, xv.y);
        mma_bf16_16816(d, v[j][0].z, v[j][1].z, v[j][0].w, v[j][1].w, xv.z, xv.w);
    }
}

}  // namespace headroom_moe_decode

// moe_decode_gate_up_mma(_rows): moe_decode_gate_up's parameters and its
// grid at 8 * TILES columns a CTA (ceil(max(inter, shared_inter) / (8 *
// TILES)), rows + rows * top_k), block THREADS. Needs hidden a multiple of 32 up to 32 * 2 * GU_BF_STAGE *
// WARPS (decode.rs checks) and mma.sync on bf16 (sm_80+).
template <int TILES>
__device__ __forceinline__ void gate_up_bf16_mma_body(
    const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate_up,
    const __nv_bfloat16* __restrict__ shared_gate_proj, const __nv_bfloat16* __restrict__ shared_up_proj,
    const float* __restrict__ logits, int rows, int hidden, int experts, int top_k, int renormalise, int first,
    int local, int inter, int shared_inter, int act_stride, int* __restrict__ topk_expert,
    float* __restrict__ topk_weight, float* __restrict__ act) {
    using namespace headroom_moe_decode;
    __shared__ RouteSmem sm;
    __shared__ __align__(16) bf16 xs[MAX_HIDDEN];
    __shared__ float part[TILES][WARPS][16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
    const int y = blockIdx.y;
    const int c0 = blockIdx.x * TILES * 8;  // the CTA's first column
    const int rounds = hidden >> 5;
    const int per = (rounds + WARPS - 1) / WARPS;
    const int r0 = min(rounds, warp * per), r1 = min(rounds, r0 + per);
    const int stages = per > GU_BF_STAGE ? 2 : 1;  // a tile's (CTA-uniform)
    const unsigned long long pol = weight_policy();
    // The CTA's expert: gate row c at g_m + c * hidden, up row c at u_m +
    // (u_off + c) * hidden, n columns, its act row.
    const bf16 *g_m, *u_m;
    int n, u_off;
    float* act_r;
    if (y < rows) {
        g_m = shared_gate_proj;
        u_m = shared_up_proj;
        n = shared_inter;
        u_off = 0;
        act_r = act + ((long long)y * (top_k + 1) + top_k) * act_stride;
    } else {
        const int pair = y - rows;
        const int r = pair / top_k, slot = pair - r * top_k;
        routed_cta_start(x, logits, r, slot, hidden, experts, top_k, renormalise, first, local, topk_expert,
                         topk_weight, xs, sm);
        const int e = sm.sel_e[slot] - first;
        if (e < 0 || e >= local) return;  // another rank's expert: the down kernel skips it
        g_m = u_m = gate_up + (long long)e * 2 * inter * hidden;
        n = inter;
        u_off = inter;
        act_r = act + ((long long)r * (top_k + 1) + slot) * act_stride;
    }
    // Tiles with a column (CTA-uniform), each `stages` stages: stage s is
    // tile s / stages, rounds from r0 + GU_BF_STAGE * (s % stages).
    const int tiles = c0 < n ? min(TILES, (n - c0 + 7) / 8) : 0;
    const int units = tiles * stages;
    auto load_stage = [&](int s, uint4(&v)[GU_BF_STAGE][2]) {
        const int c = min(c0 + 8 * (s / stages) + g, n - 1);
        gu_bf_load(g_m + (long long)c * hidden, u_m + (long long)(u_off + c) * hidden,
                   r0 + GU_BF_STAGE * (s % stages), r1, lane, pol, v);
    };
    uint4 va[GU_BF_STAGE][2], vb[GU_BF_STAGE][2];
    if (units > 0) load_stage(0, va);  // the shared expert's: before the wait
    if (y < rows) {
        wait_prior();
        launch_next();  // the down CTAs load their tiles while this grid runs
        if (units == 0) return;
        stage_async(x + (long long)y * hidden, xs, hidden);
        cp_async_wait();
        __syncthreads();
    } else if (units == 0) {
        return;
    }
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    // Stage s's products, then its tile's sums to shared memory once its last stage is in.
    auto run_stage = [&](int s, const uint4(&v)[GU_BF_STAGE][2]) {
        gu_bf_stage(v, xs, r0 + GU_BF_STAGE * (s % stages), r1, lane, d);
        if (s % stages == stages - 1) {
            if ((lane & 3) == 0) {
                part[s / stages][warp][g] = d[0];
                part[s / stages][warp][g + 8] = d[2];
            }
            d[0] = d[1] = d[2] = d[3] = 0.f;
        }
    };
#pragma unroll 1
    for (int s = 0; s < units; s += 2) {
        if (s + 1 < units) load_stage(s + 1, vb);
        run_stage(s, va);
        if (s + 1 < units) {
            if (s + 2 < units) load_stage(s + 2, va);
            run_stage(s + 1, vb);
        }
    }
    __syncthreads();
    gu_mma_write(part, tiles * 8, c0, n, act_r);
}

namespace headroom_moe_decode {

extern "C" __global__ void __launch_bounds__(THREADS, 2)
    moe_decode_gate_up_mma(GATE_UP_PARAMS(bf16, bf16)) {
    gate_up_bf16_mma_body<GU_MMA_TILES>(x, gate_up, shared_gate_proj, shared_up_proj, GATE_UP_TAIL);
}

// The same from two rows at GU_MMA_TILES_ROWS tiles a CTA (40 columns).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    moe_decode_gate_up_mma_rows(GATE_UP_PARAMS(bf16, bf16)) {
    gate_up_bf16_mma_body<GU_MMA_TILES_ROWS>(x, gate_up, shared_gate_proj, shared_up_proj, GATE_UP_TAIL);
}

}  // namespace headroom_moe_decode
