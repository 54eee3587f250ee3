// The sparse MoE block for a few rows (decode), in three launches instead of
// the grouped-GEMM path's ~14 (crates/cuda/src/ops/moe/decode.rs). Every
// weight byte a row needs is read once per row, by GEMV-style warps whose
// loads are all issued before their first use (compile-time chunk counts,
// predicated loads: no dependent rounds), so at one row the block is bound by
// the bytes of its k + 1 experts.
//
// 1. moe_decode_route: warp j computes router logit j (j < experts) or the
//    shared expert's gate logit (j == experts) of every row, f32, reading
//    its weight row once (the rows of x staged in shared memory).
// 2. moe_decode_gate_up: blockIdx.y = a row's shared expert (first: it needs
//    no routing, its first weights load before the wait, beside the
//    router's), or (row, slot) of a routed expert. Every routed CTA first takes its row's
//    softmax and top-k from the logits itself (parallel: each warp ranks its
//    32 experts by shuffles, the k best of each warp are ranked among
//    themselves; ties -> lower index, NaN last, as moe_route), so no CTA waits
//    for a last CTA and no counter is shared between launches. The CTA at
//    (x 0, slot 0) writes the row's experts and weights for the down kernel.
//    Each warp computes COLS columns c (GATE_UP_COLS at one row,
//    GATE_UP_COLS_ROWS from two: the *_rows entries):
//    act = silu(x . gate[c]) * (x . up[c]). On FP8 routed and shared
//    experts with hidden whole 64-column rounds up to 2048, and on bf16
//    experts at one row and from three rows with hidden whole 32-column
//    rounds up to 2048, the gate_up is a tensor-core one of
//    moe_decode_gate_up_mma.cu (the same grid and routing; 24 columns a CTA
//    at one row, 40 from two: the *_mma_rows entries).
// 3. moe_decode_down: each warp one output column n of one row:
//    out = bf16(sum over slots s (k experts, then the shared expert) of
//    w_s * (down_s[n] . act_s)), w of the shared expert sigmoid(gate logit);
//    the shared expert's rows load before the wait, and so do the routed
//    experts' rows: the CTA waits for its row's experts as gate_up's CTA
//    (0, slot 0) publishes them (moe_decode_common.cuh, await_routed; the
//    route kernel marks them unwritten first), so the weight bytes stream
//    while gate_up runs; the routing weights and activations are read after
//    the wait. On bf16 experts, and FP8 routed and shared ones, whose rows
//    are whole 64-column rounds (up to 512) the down kernel is a tensor-core
//    one of moe_decode_down_mma.cu (8 / 16 output columns a CTA, a slot a
//    warp).
//
// The three launch with programmatic dependent launch (compute capability
// 9.0+): each reads only weights before wait_prior() (the down kernel also
// the experts gate_up publishes, above), and the first two let
// the next kernel's CTAs start early (launch_next(), gate_up's after its
// wait), so those load their weights while the previous kernel runs. Every
// weight load is marked evict-first in L2.
//
// The expert kernels are templates on the weight format of the routed
// experts and of the shared expert (compile time: the bf16 entry points
// moe_decode_gate_up / moe_decode_down are the bf16 instantiations, the
// *_fp8 ones block-scaled e4m3 routed and shared experts, *_fp8_sbf16 e4m3
// routed experts with a bf16 shared expert); the router and the shared gate
// are bf16 in all (Qwen's FP8 checkpoints keep them so). An FP8 chunk is 16
// e4m3 whose partial sum is multiplied by its 128 x 128 block's scale; an
// FP8 gate_up warp loads a column's first pass before the previous column's
// dots (two columns in flight).
//
// Needs hidden, intermediate and the shared intermediate to be multiples of 8
// (16-byte loads; 16 for FP8); rows <= MAX_ROWS; experts <= MAX_EXPERTS;
// top_k <= MAX_TOP_K. The helpers are in moe_decode_common.cuh, the weight
// formats (bf16, FP8) in moe_decode_fp8.cuh.

namespace headroom_moe_decode {

// The router's dots of warp j over the nr rows staged in xs (rows r0 .. r0 +
// nr of the call): logit j of each row, written to logits. The first pass of
// the weight row is in av unless `reload_first`.
__device__ __forceinline__ void route_dots(const bf16* w, uint4 (&av)[KCH], const bf16* xs, int r0, int nr,
                                           int hidden, int lane, unsigned long long pol, bool reload_first, int j,
                                           int experts, float* __restrict__ logits) {
    float acc[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.f;
    for (int base = 0; base < hidden; base += KSPAN) {
        if (base > 0 || reload_first) load_pass(w, base, hidden, lane, pol, av);
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            if (r < nr) acc[r] += dot_pass(av, xs + r * hidden, base, hidden, lane);
        }
    }
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
        if (r < nr) {
            const float s = warp_sum(acc[r]);
            if (lane == 0 && j <= experts) logits[(long long)(r0 + r) * (experts + 1) + j] = s;
        }
    }
}

// logits: [rows][experts + 1] f32 (the shared expert's gate logit last);
// topk_expert: [rows][top_k], marked UNROUTED by CTA 0 after the wait (for
// the down kernel's await_routed).
// block: THREADS; grid: ceil((experts + 1) / WARPS).
// Warp j reads its router row once: its first pass before the wait, held
// across every row when hidden fits one pass; the rows of x are staged in
// shared memory ROUTE_XS elements at a time.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_route(const bf16* __restrict__ x, const bf16* __restrict__ router,
                 const bf16* __restrict__ shared_gate, int rows, int hidden, int experts,
                 float* __restrict__ logits, int top_k, int* __restrict__ topk_expert) {
    __shared__ __align__(16) bf16 xs[ROUTE_XS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint4 av[KCH];
    launch_next();  // the gate_up CTAs take the SMs this grid leaves free
    // Router row j (the shared gate's at j == experts); warps past it load
    // the shared gate's and write nothing.
    const int j = blockIdx.x * WARPS + warp;
    const bf16* w = j < experts ? router + (long long)j * hidden : shared_gate;
    const unsigned long long pol = weight_policy();
    load_pass(w, 0, hidden, lane, pol, av);  // weights: before the wait
    wait_prior();
    mark_unrouted(topk_expert, rows, top_k);
    const int per = min(rows, ROUTE_XS / hidden);  // rows staged at once (>= 1: hidden <= MAX_HIDDEN)
    for (int r0 = 0; r0 < rows; r0 += per) {
        const int nr = min(per, rows - r0);
        if (r0 > 0) __syncthreads();  // every warp is done with the rows before
        stage_async(x + (long long)r0 * hidden, xs, nr * hidden);
        cp_async_wait();
        __syncthreads();
        // The first pass is in av unless a later round of rows needs it again.
        route_dots(w, av, xs, r0, nr, hidden, lane, pol, r0 > 0 && hidden > KSPAN, j, experts, logits);
    }
}

// moe_decode_route with the post-attention norm folded in (one launch fewer
// on the decode chain, whose kernels each wait for the one before): instead
// of reading x, every CTA computes each row's r = residual + delta and x =
// the zero-centred RMSNorm of r (norm_row.cuh: the same bits as
// add_rms_norm_quad_f32res) straight into its staging, and CTA 0 writes r to
// residual_out and x to x_out (the expert kernels' input). residual_out is not
// residual: the other CTAs still read it. The norm weight loads before the
// wait, beside the router row. Needs hidden % 4 == 0, hidden <= 4 *
// NORM_ROW_QUADS * THREADS and rows * hidden <= ROUTE_XS (every row staged at
// once); the launcher checks.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_route_norm(const float* __restrict__ residual, const bf16* __restrict__ delta,
                      const float* __restrict__ norm_w, float eps, float* __restrict__ residual_out,
                      bf16* __restrict__ x_out, const bf16* __restrict__ router,
                      const bf16* __restrict__ shared_gate, int rows, int hidden, int experts,
                      float* __restrict__ logits, int top_k, int* __restrict__ topk_expert) {
    using headroom_norm_row::NORM_ROW_QUADS;
    using headroom_norm_row::add_row;
    using headroom_norm_row::load_weights;
    using headroom_norm_row::normed_quads;
    __shared__ __align__(16) bf16 xs[ROUTE_XS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint4 av[KCH];
    float4 ww[NORM_ROW_QUADS];
    launch_next();  // the gate_up CTAs take the SMs this grid leaves free
    const int j = blockIdx.x * WARPS + warp;
    const bf16* w = j < experts ? router + (long long)j * hidden : shared_gate;
    const unsigned long long pol = weight_policy();
    load_pass(w, 0, hidden, lane, pol, av);  // weights: before the wait
    load_weights(norm_w, hidden, ww);
    wait_prior();
    mark_unrouted(topk_expert, rows, top_k);
    const bool first = blockIdx.x == 0;
    for (int r = 0; r < rows; ++r) {
        const long long off = (long long)r * hidden;
        float4 v[NORM_ROW_QUADS];
        const float inv = add_row(residual + off, delta + off, first ? residual_out + off : nullptr, hidden, eps, v);
        uint2 o[NORM_ROW_QUADS];
        normed_quads(v, ww, inv, hidden, o);
        uint2* xr = reinterpret_cast<uint2*>(xs + off);
        uint2* xo = reinterpret_cast<uint2*>(x_out + off);
#pragma unroll
        for (int k = 0; k < NORM_ROW_QUADS; ++k) {
            const int p = threadIdx.x + k * THREADS;
            if (p < (hidden >> 2)) {
                xr[p] = o[k];
                if (first) xo[p] = o[k];
            }
        }
    }
    __syncthreads();
    // moe_decode_route's dots, its one staging round (every row staged).
    route_dots(w, av, xs, 0, rows, hidden, lane, pol, false, j, experts, logits);
}

// A routed gate_up CTA's start (row r, slot `slot`): wait, let the down
// grid launch (its CTAs load their shared rows while this grid runs), stage
// row r of x into xs (cp.async) while ranking the row's experts into sm
// (route_row); the row's CTA (x 0, slot 0) then publishes the experts and
// their weights for the down kernel.
__device__ __forceinline__ void routed_cta_start(const bf16* __restrict__ x, const float* __restrict__ logits,
                                                 int r, int slot, int hidden, int experts, int top_k,
                                                 int renormalise, int first, int local,
                                                 int* __restrict__ topk_expert, float* __restrict__ topk_weight,
                                                 bf16* xs, RouteSmem& sm) {
    wait_prior();
    launch_next();
    stage_async(x + (long long)r * hidden, xs, hidden);
    route_row(logits + (long long)r * (experts + 1), experts, top_k, sm);
    cp_async_wait();
    __syncthreads();
    if (blockIdx.x == 0 && slot == 0 && (int)threadIdx.x < top_k) {
        const int t = threadIdx.x;
        topk_weight[r * top_k + t] = slot_weight(sm, t, top_k, renormalise);
        publish_routed(topk_expert + r * top_k + t, local_expert(sm, t, first, local));
    }
}

// gate+up of the routed experts and of the shared expert.
// grid: (ceil(max(inter, shared_inter) / (WARPS * COLS)), rows + rows * top_k):
// blockIdx.y < rows is the shared expert of row blockIdx.y (dispatched first:
// when CTAs start before the router finishes, those have work), the rest
// (row, slot) = pair blockIdx.y - rows of a routed expert. Warp w of CTA x
// computes columns (x * COLS + i) * WARPS + w, i < COLS.
// Routed CTAs: each first computes its row's softmax and top-k from the
// logits (route_row). topk_expert / topk_weight: [rows][top_k], local expert
// index (or -1: another rank's) and its weight, written by the CTA at
// (0, rows + row * top_k).
// Shared CTAs: their first weights load before griddepcontrol.wait.
// act: [rows][top_k + 1][act_stride] f32.
// FR / FS: the routed experts' / the shared expert's weight format; the
// scales (*_s) are read only for FP8 (gate_up_s: [local][ceil(2 inter /
// 128)][ceil(hidden / 128)], the shared projections' [ceil(shared_inter /
// 128)][ceil(hidden / 128)]).
template <class FR, class FS, int COLS>
__device__ __forceinline__ void gate_up_body(
    const bf16* __restrict__ x, const typename FR::T* __restrict__ gate_up, const float* __restrict__ gate_up_s,
    const typename FS::T* __restrict__ shared_gate_proj, const float* __restrict__ shared_gate_s,
    const typename FS::T* __restrict__ shared_up_proj, const float* __restrict__ shared_up_s,
    const float* __restrict__ logits, int rows, int hidden, int experts, int top_k, int renormalise, int first,
    int local, int inter, int shared_inter, int act_stride, int* __restrict__ topk_expert,
    float* __restrict__ topk_weight, float* __restrict__ act) {
    __shared__ RouteSmem sm;
    __shared__ __align__(16) bf16 xs[MAX_HIDDEN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int y = blockIdx.y;
    const int col0 = blockIdx.x * COLS * WARPS + warp;
    const unsigned long long pol = weight_policy();
    typename FS::Pass av, bv;
    if (y < rows) {
        // The shared expert of row r: no routing, so its first pass loads
        // before the wait (warps past the last column load the last one).
        const int r = y;
        const int cc = min(col0, shared_inter - 1);
        const typename FS::Row g_row = row_of<FS>(shared_gate_proj, shared_gate_s, cc, hidden);
        const typename FS::Row u_row = row_of<FS>(shared_up_proj, shared_up_s, cc, hidden);
        load_pass_f<FS>(g_row, 0, hidden, lane, pol, av);
        load_pass_f<FS>(u_row, 0, hidden, lane, pol, bv);
        wait_prior();
        launch_next();  // the down CTAs load their shared rows while this grid runs
        stage_async(x + (long long)r * hidden, xs, hidden);
        cp_async_wait();
        __syncthreads();
        float* act_r = act + ((long long)r * (top_k + 1) + top_k) * act_stride;
        if constexpr (FS::FP8) {
            swiglu_cols_fp8<COLS>(shared_gate_proj, shared_gate_s, 0, shared_up_proj, shared_up_s, 0, shared_inter,
                            col0, xs, hidden, lane, pol, act_r, av, bv);
        } else {
#pragma unroll 1
            for (int i = 0; i < COLS; ++i) {
                const int c = col0 + i * WARPS;
                if (c >= shared_inter) break;  // warp-uniform; no barrier below
                const bf16* gr = shared_gate_proj + (long long)c * hidden;
                const bf16* ur = shared_up_proj + (long long)c * hidden;
                const float v = swiglu_col<FS>(gr, ur, xs, hidden, lane, pol, i == 0, av, bv);
                if (lane == 0) act_r[c] = v;
            }
        }
        return;
    }
    const int pair = y - rows;
    const int r = pair / top_k, slot = pair - r * top_k;
    routed_cta_start(x, logits, r, slot, hidden, experts, top_k, renormalise, first, local, topk_expert,
                     topk_weight, xs, sm);
    const int e = sm.sel_e[slot] - first;
    if (e < 0 || e >= local) return;  // another rank's expert: the down kernel skips it
    float* act_r = act + ((long long)r * (top_k + 1) + slot) * act_stride;
    if constexpr (FR::FP8) {
        const unsigned char* em = gate_up + (long long)e * 2 * inter * hidden;
        const float* es = gate_up_s + (long long)e * ((2 * inter + 127) >> 7) * ((hidden + 127) >> 7);
        typename FR::Pass ag, au;
        if (col0 < inter) {  // warp-uniform
            fp8_load_pass(row_of<Fp8W>(em, es, col0, hidden), 0, hidden, lane, pol, ag);
            fp8_load_pass(row_of<Fp8W>(em, es, inter + col0, hidden), 0, hidden, lane, pol, au);
        }
        swiglu_cols_fp8<COLS>(em, es, 0, em, es, inter, inter, col0, xs, hidden, lane, pol, act_r, ag, au);
    } else {
        static_assert(!FS::FP8, "bf16 routed experts take a bf16 shared expert");
#pragma unroll 1
        for (int i = 0; i < COLS; ++i) {
            const int c = col0 + i * WARPS;
            if (c >= inter) break;  // warp-uniform; no barrier below
            const bf16* g_row = gate_up + ((long long)e * 2 * inter + c) * hidden;
            const bf16* u_row = g_row + (long long)inter * hidden;
            load_pass(g_row, 0, hidden, lane, pol, av.v);
            load_pass(u_row, 0, hidden, lane, pol, bv.v);
            const float v = swiglu_col<FR>(g_row, u_row, xs, hidden, lane, pol, true, av, bv);
            if (lane == 0) act_r[c] = v;
        }
    }
}

// The entry points: both formats bf16 (the scales unused), FP8 routed and
// shared experts, FP8 routed experts and a bf16 shared expert.
#define GATE_UP_PARAMS(TR, TS)                                                                               \
    const bf16 *__restrict__ x, const TR *__restrict__ gate_up, const TS *__restrict__ shared_gate_proj,   \
        const TS *__restrict__ shared_up_proj, const float *__restrict__ logits, int rows, int hidden,     \
        int experts, int top_k, int renormalise, int first, int local, int inter, int shared_inter,        \
        int act_stride, int *__restrict__ topk_expert, float *__restrict__ topk_weight,                    \
        float *__restrict__ act
#define GATE_UP_SCALED_PARAMS(TR, TS)                                                                        \
    const bf16 *__restrict__ x, const TR *__restrict__ gate_up, const float *__restrict__ gate_up_s,       \
        const TS *__restrict__ shared_gate_proj, const float *__restrict__ shared_gate_s,                  \
        const TS *__restrict__ shared_up_proj, const float *__restrict__ shared_up_s,                      \
        const float *__restrict__ logits, int rows, int hidden, int experts, int top_k, int renormalise,   \
        int first, int local, int inter, int shared_inter, int act_stride, int *__restrict__ topk_expert,  \
        float *__restrict__ topk_weight, float *__restrict__ act
#define GATE_UP_TAIL                                                                                         \
    logits, rows, hidden, experts, top_k, renormalise, first, local, inter, shared_inter, act_stride,      \
        topk_expert, topk_weight, act

// Each twice: COLS = GATE_UP_COLS (one row) and GATE_UP_COLS_ROWS (*_rows).
#define GATE_UP_ENTRY(NAME, COLS)                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) /* <= 128 registers: 2 CTAs an SM */          \
    NAME(GATE_UP_PARAMS(bf16, bf16)) {                                                                       \
        gate_up_body<Bf16W, Bf16W, COLS>(x, gate_up, nullptr, shared_gate_proj, nullptr, shared_up_proj,   \
                                         nullptr, GATE_UP_TAIL);                                            \
    }
#define GATE_UP_FP8_ENTRY(NAME, TS, FS, COLS)                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS, 2)                                                 \
    NAME(GATE_UP_SCALED_PARAMS(unsigned char, TS)) {                                                         \
        gate_up_body<Fp8W, FS, COLS>(x, gate_up, gate_up_s, shared_gate_proj, shared_gate_s,               \
                                     shared_up_proj, shared_up_s, GATE_UP_TAIL);                            \
    }
GATE_UP_ENTRY(moe_decode_gate_up, GATE_UP_COLS)
GATE_UP_ENTRY(moe_decode_gate_up_rows, GATE_UP_COLS_ROWS)
GATE_UP_FP8_ENTRY(moe_decode_gate_up_fp8, unsigned char, Fp8W, GATE_UP_COLS)
GATE_UP_FP8_ENTRY(moe_decode_gate_up_fp8_rows, unsigned char, Fp8W, GATE_UP_COLS_ROWS)
GATE_UP_FP8_ENTRY(moe_decode_gate_up_fp8_sbf16, bf16, Bf16W, GATE_UP_COLS)
GATE_UP_FP8_ENTRY(moe_decode_gate_up_fp8_sbf16_rows, bf16, Bf16W, GATE_UP_COLS_ROWS)

// One group of the down kernel: DSLOTS routed slots from s0, DCH chunks per
// lane from cb, of output row n.
__device__ __forceinline__ void load_group(const bf16* const* base_s, int top_k, int s0, int cb, int n,
                                           int inter, int lane, unsigned long long pol,
                                           const bf16* safe, uint4 (&wv)[DSLOTS][DCH]) {
#pragma unroll
    for (int s = 0; s < DSLOTS; ++s) {
        const int slot = min(s0 + s, top_k - 1);
        const bf16* b = base_s[slot];
#pragma unroll
        for (int i = 0; i < DCH; ++i) {
            const int k = cb + (i * 32 + lane) * 8;
            const bool ok = s0 + s < top_k && b != nullptr && k < inter;
            wv[s][i] = load8w(b + (long long)n * inter + k, safe, ok, pol);
        }
    }
}

// The down kernel on FP8 routed experts (the shared expert's format FS):
// moe_decode_down's loops, a routed slot's chunks 16 e4m3 with their
// block's scale (its expert's scales in sbase_s).
template <class FS>
__device__ __forceinline__ void down_fp8(const float* __restrict__ act, const unsigned char* __restrict__ down,
                                         const float* __restrict__ down_s,
                                         const typename FS::T* __restrict__ shared_down,
                                         const float* __restrict__ shared_down_s,
                                         const int* __restrict__ topk_expert, const float* __restrict__ topk_weight,
                                         const float* __restrict__ logits, int hidden, int experts, int top_k,
                                         int inter, int shared_inter, int act_stride, bf16* __restrict__ out) {
    __shared__ const unsigned char* base_s[MAX_TOP_K];
    __shared__ const float* sbase_s[MAX_TOP_K];
    __shared__ float scale_s[MAX_TOP_K + 1];
    __shared__ __align__(16) float act_s[MAX_ACT];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = blockIdx.y, t = threadIdx.x;
    const int slots = top_k + 1;
    const unsigned long long pol = weight_policy();
    const int n = blockIdx.x * WARPS + warp, nn = min(n, hidden - 1);
    const int kib = (inter + 127) >> 7;  // scale blocks along a routed row
    const long long per_expert = (long long)((hidden + 127) >> 7) * kib;
    const typename FS::Row sd_row = row_of<FS>(shared_down, shared_down_s, nn, shared_inter);
    const float* logit_row = logits + (long long)r * (experts + 1);
    typename FS::DPass sv;
    load_shared_f<FS>(sd_row, 0, shared_inter, lane, pol, sv);  // weights: before the wait
    Fp8W::DPass wv[DSLOTS];
    const float4* act_r = reinterpret_cast<const float4*>(act + (long long)r * slots * act_stride);
    // The row's experts as gate_up publishes them (await_routed): the routed
    // weights load before the wait too.
    if (t < top_k) {
        const int e = await_routed(topk_expert + r * top_k + t);
        base_s[t] = e >= 0 ? down + (long long)e * hidden * inter : nullptr;
        sbase_s[t] = e >= 0 ? down_s + e * per_expert : down_s;
    } else if (t == top_k) {  // the route kernel's logit: complete before this grid started
        scale_s[t] = 1.f / (1.f + expf(-__ldcg(logit_row + experts)));
    }
    __syncthreads();
    // Slots s0 .. s0 + DSLOTS of row nn, chunks from cb (dead slots read expert 0's first chunk).
    auto load_group = [&](int s0, int cb) {
#pragma unroll
        for (int s = 0; s < DSLOTS; ++s) {
            const int slot = min(s0 + s, top_k - 1);
            const unsigned char* b = base_s[slot];
            const bool ok = s0 + s < top_k && b != nullptr;
            const Fp8Row row{b + (long long)nn * inter, sbase_s[slot] + (nn >> 7) * kib};
            fp8_load_act_pass(row, cb, inter, lane, ok, down, down_s, pol, wv[s]);
        }
    };
    load_group(0, 0);
    wait_prior();
    for (int i = t; i < slots * act_stride / 4; i += THREADS) cp_async16(act_s + 4 * i, act_r + i);
    if (t < top_k) scale_s[t] = topk_weight[r * top_k + t];
    cp_async_wait();
    __syncthreads();
    const int longest = max(inter, shared_inter);
    float acc = 0.f;
    for (int cb = 0; cb < longest; cb += DSPAN) {
        if (cb > 0) load_shared_f<FS>(sd_row, cb, shared_inter, lane, pol, sv);
        for (int s0 = 0; s0 < top_k; s0 += DSLOTS) {
            if (s0 > 0 || cb > 0) load_group(s0, cb);
#pragma unroll
            for (int s = 0; s < DSLOTS; ++s) {
                const int slot = min(s0 + s, top_k - 1);
                if (s0 + s < top_k && base_s[slot] != nullptr) {  // dead slots' act may be NaN
                    acc = fmaf(scale_s[slot], fp8_dot_act(wv[s], act_s + slot * act_stride, cb, inter, lane), acc);
                }
            }
        }
        acc = fmaf(scale_s[top_k], dot_act_f<FS>(sv, act_s + top_k * act_stride, cb, shared_inter, lane), acc);
    }
    const float v = warp_sum(acc);
    if (lane == 0 && n < hidden) out[(long long)r * hidden + n] = __float2bfloat16_rn(v);
}

// out = bf16(sum over the k routed slots of w_s * (down_s[n] . act_s) +
// sigmoid(gate logit) * (shared_down[n] . act_k)). Each warp one column n of
// row blockIdx.y; the shared expert's rows and, once gate_up has published
// the row's experts (await_routed), the routed rows load before
// griddepcontrol.wait, and so does the shared gate's logit (the route
// kernel's, finished before gate_up's CTAs passed their wait, so before this
// grid started); the routing weights (topk_weight, gate_up's) and the
// activations are read after it.
// grid: (ceil(hidden / WARPS), rows). act_stride % 4 == 0, (top_k + 1) * act_stride <= MAX_ACT.
// FR / FS: the routed experts' / the shared expert's weight format; the
// scales (*_s) are read only for FP8 (down_s: [local][ceil(hidden /
// 128)][ceil(inter / 128)], shared_down_s: [ceil(hidden / 128)][ceil(shared_inter / 128)]).
template <class FR, class FS>
__device__ __forceinline__ void down_body(const float* __restrict__ act, const typename FR::T* __restrict__ down,
                                          const float* __restrict__ down_s,
                                          const typename FS::T* __restrict__ shared_down,
                                          const float* __restrict__ shared_down_s,
                                          const int* __restrict__ topk_expert,
                                          const float* __restrict__ topk_weight, const float* __restrict__ logits,
                                          int hidden, int experts, int top_k, int inter, int shared_inter,
                                          int act_stride, bf16* __restrict__ out) {
    if constexpr (FR::FP8) {
        down_fp8<FS>(act, down, down_s, shared_down, shared_down_s, topk_expert, topk_weight, logits, hidden,
                     experts, top_k, inter, shared_inter, act_stride, out);
    } else {
        static_assert(!FS::FP8, "bf16 routed experts take a bf16 shared expert");
        // Per routed slot its down matrix (null: another rank's expert); per slot
        // (the shared expert's last) its weight; the row's activations.
        __shared__ const bf16* base_s[MAX_TOP_K];
        __shared__ float scale_s[MAX_TOP_K + 1];
        __shared__ __align__(16) float act_s[MAX_ACT];
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int r = blockIdx.y, t = threadIdx.x;
        const int slots = top_k + 1;
        const unsigned long long pol = weight_policy();
        // Warps past the last column repeat it and write nothing.
        const int n = blockIdx.x * WARPS + warp, nn = min(n, hidden - 1);
        const bf16* sd_row = shared_down + (long long)nn * shared_inter;
        const float* logit_row = logits + (long long)r * (experts + 1);
        uint4 sv[DCH];
        load_shared(sd_row, 0, shared_inter, lane, pol, sv);  // weights: before the wait
        uint4 wv[DSLOTS][DCH];
        const float4* act_r = reinterpret_cast<const float4*>(act + (long long)r * slots * act_stride);
        // The row's experts as gate_up publishes them (await_routed): the
        // routed weights load before the wait too.
        if (t < top_k) {
            const int e = await_routed(topk_expert + r * top_k + t);
            base_s[t] = e >= 0 ? down + (long long)e * hidden * inter : nullptr;
        } else if (t == top_k) {  // the route kernel's logit: complete before this grid started
            scale_s[t] = 1.f / (1.f + expf(-__ldcg(logit_row + experts)));
        }
        __syncthreads();
        load_group(base_s, top_k, 0, 0, nn, inter, lane, pol, sd_row, wv);
        wait_prior();
        // The row's activations into shared memory (asynchronous: they land
        // while the slot weights are read).
        for (int i = t; i < slots * act_stride / 4; i += THREADS) cp_async16(act_s + 4 * i, act_r + i);
        if (t < top_k) scale_s[t] = topk_weight[r * top_k + t];
        cp_async_wait();
        __syncthreads();
        const int longest = max(inter, shared_inter);
        float acc = 0.f;
        for (int cb = 0; cb < longest; cb += DSPAN) {
            if (cb > 0) load_shared(sd_row, cb, shared_inter, lane, pol, sv);
            for (int s0 = 0; s0 < top_k; s0 += DSLOTS) {
                if (s0 > 0 || cb > 0) load_group(base_s, top_k, s0, cb, nn, inter, lane, pol, sd_row, wv);
    #pragma unroll
                for (int s = 0; s < DSLOTS; ++s) {
                    const int slot = min(s0 + s, top_k - 1);
                    if (s0 + s < top_k && base_s[slot] != nullptr) {  // dead slots' act may be NaN
                        acc = fmaf(scale_s[slot], dot_act(wv[s], act_s + slot * act_stride, cb, inter, lane), acc);
                    }
                }
            }
            acc = fmaf(scale_s[top_k], dot_act(sv, act_s + top_k * act_stride, cb, shared_inter, lane), acc);
        }
        const float v = warp_sum(acc);
        if (lane == 0 && n < hidden) out[(long long)r * hidden + n] = __float2bfloat16_rn(v);
    }
}

#define DOWN_PARAMS(TR, TS)                                                                                  \
    const float *__restrict__ act, const TR *__restrict__ down, const TS *__restrict__ shared_down,        \
        const int *__restrict__ topk_expert, const float *__restrict__ topk_weight,                        \
        const float *__restrict__ logits, int hidden, int experts, int top_k, int inter, int shared_inter, \
        int act_stride, bf16 *__restrict__ out
#define DOWN_SCALED_PARAMS(TR, TS)                                                                           \
    const float *__restrict__ act, const TR *__restrict__ down, const float *__restrict__ down_s,          \
        const TS *__restrict__ shared_down, const float *__restrict__ shared_down_s,                       \
        const int *__restrict__ topk_expert, const float *__restrict__ topk_weight,                        \
        const float *__restrict__ logits, int hidden, int experts, int top_k, int inter, int shared_inter, \
        int act_stride, bf16 *__restrict__ out
#define DOWN_TAIL topk_expert, topk_weight, logits, hidden, experts, top_k, inter, shared_inter, act_stride, out

extern "C" __global__ void __launch_bounds__(THREADS) moe_decode_down(DOWN_PARAMS(bf16, bf16)) {
    down_body<Bf16W, Bf16W>(act, down, nullptr, shared_down, nullptr, DOWN_TAIL);
}

extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_down_fp8(DOWN_SCALED_PARAMS(unsigned char, unsigned char)) {
    down_body<Fp8W, Fp8W>(act, down, down_s, shared_down, shared_down_s, DOWN_TAIL);
}

extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_down_fp8_sbf16(DOWN_SCALED_PARAMS(unsigned char, bf16)) {
    down_body<Fp8W, Bf16W>(act, down, down_s, shared_down, shared_down_s, DOWN_TAIL);
}

}  // namespace headroom_moe_decode
