// The sparse MoE block for a few rows (decode), in three launches instead of
// the grouped-GEMM path's ~14 (crates/cuda/src/backend/moe_decode.rs). Every
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
//    Each warp computes GATE_UP_COLS columns c:
//    act = silu(x . gate[c]) * (x . up[c]).
// 3. moe_decode_down: each warp one output column n of one row:
//    out = bf16(sum over slots s (k experts, then the shared expert) of
//    w_s * (down_s[n] . act_s)), w of the shared expert sigmoid(gate logit);
//    the shared expert's rows load before the wait, the routing (gate_up's)
//    is read after it.
//
// The three launch with programmatic dependent launch (compute capability
// 9.0+): each reads only weights before wait_prior(), and the first two let
// the next kernel's CTAs start early (launch_next(), gate_up's after its
// wait), so those load their weights while the previous kernel runs. Every
// weight load is marked evict-first in L2.
//
// Needs hidden, intermediate and the shared intermediate to be multiples of 8
// (16-byte loads); rows <= MAX_ROWS; experts <= MAX_EXPERTS; top_k <= MAX_TOP_K.

#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_moe_decode {

typedef __nv_bfloat16 bf16;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_ROWS = 8;
constexpr int MAX_EXPERTS = 1024;
constexpr int MAX_TOP_K = 32;
// Experts per thread in the routing (MAX_EXPERTS / THREADS).
constexpr int EPT = MAX_EXPERTS / THREADS;
// Routing candidates: the k best of each 32 experts.
constexpr int MAX_CAND = MAX_EXPERTS / 32 * MAX_TOP_K;
// 8-element chunks per lane in one pass of a hidden-length dot (2048 elements).
constexpr int KCH = 8;
constexpr int KSPAN = KCH * 32 * 8;
// Down kernel: routed slots per group and chunks per lane per slot in one pass (512 elements).
constexpr int DSLOTS = 8;
constexpr int DCH = 2;
constexpr int DSPAN = DCH * 32 * 8;
// Columns each gate_up warp computes one after the other.
constexpr int GATE_UP_COLS = 3;
// Largest hidden (x staged in shared memory) and (top_k + 1) * act_stride (a
// row's activations staged in shared memory by the down kernel).
constexpr int MAX_HIDDEN = 8192;
constexpr int MAX_ACT = 11264;
// x elements the route kernel stages at once (whole rows, at least one).
constexpr int ROUTE_XS = 16384;
static_assert(MAX_EXPERTS % THREADS == 0 && MAX_TOP_K <= 32, "routing");
static_assert(ROUTE_XS >= MAX_HIDDEN && ROUTE_XS % 8 == 0, "route staging");

__device__ __forceinline__ void bf16x8(const uint4& v, float (&f)[8]) {
    const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 p = __bfloat1622float2(b[j]);
        f[2 * j] = p.x;
        f[2 * j + 1] = p.y;
    }
}

__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
    float fa[8], fb[8];
    bf16x8(a, fa);
    bf16x8(b, fb);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s = fmaf(fa[j], fb[j], s);
    return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

// The L2 cache policy for weights: evict-first (each weight byte is read once
// a step, and the model's weights do not fit in L2).
__device__ __forceinline__ unsigned long long weight_policy() {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// 16 bytes from global src to shared dst without registers (cp.async, L2
// only); complete after cp_async_wait().
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The chunk of 8 bf16 weights at p when ok, else zeros, read with the L2
// policy `pol` (weight_policy); the load itself always goes out (to `safe`
// when not ok: an in-bounds chunk), so that the compiler issues every load of
// an unrolled group before the first use instead of in rounds.
__device__ __forceinline__ uint4 load8w(const bf16* p, const bf16* safe, bool ok, unsigned long long pol) {
    uint4 v;  // ld.global.nc; volatile keeps the loads in program order, ahead of the FMAs
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ok ? p : safe), "l"(pol));
    return ok ? v : zero4();
}

// One pass (KSPAN elements from base) of this lane's share of a dot over
// hidden: the weight chunks of row w (zeros past hidden).
__device__ __forceinline__ void load_pass(const bf16* __restrict__ w, int base, int hidden, int lane,
                                          unsigned long long pol, uint4 (&v)[KCH]) {
#pragma unroll
    for (int i = 0; i < KCH; ++i) {
        const int k = base + (i * 32 + lane) * 8;
        v[i] = load8w(w + k, w, k < hidden, pol);
    }
}

// sum over the pass of w . x, x from shared memory (zero weights past hidden).
__device__ __forceinline__ float dot_pass(const uint4 (&v)[KCH], const bf16* xs, int base, int hidden,
                                          int lane) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < KCH; ++i) {
        const int k = base + (i * 32 + lane) * 8;
        if (k < hidden) s += dot8(v[i], *reinterpret_cast<const uint4*>(xs + k));
    }
    return s;
}

// Routing key: higher probability ranks first, NaN last (key 0).
__device__ __forceinline__ unsigned prob_key(float p) {
    return p != p ? 0u : __float_as_uint(p) + 1u;  // p >= 0: its bits order as unsigned
}

__device__ __forceinline__ float key_prob(unsigned key) {
    return key == 0u ? __int_as_float(0x7fffffff) : __uint_as_float(key - 1u);
}

// (ka, a) ranks before (kb, b).
__device__ __forceinline__ bool before(unsigned ka, int a, unsigned kb, int b) {
    return ka > kb || (ka == kb && a < b);
}

struct RouteSmem {
    float red_max[WARPS];
    float red_sum[WARPS];
    uint2 cand[MAX_CAND];  // (key, expert)
    int sel_e[MAX_TOP_K];
    float sel_p[MAX_TOP_K];
};

// The softmax over one row's `experts` logits and its top-k by probability
// (ties -> lower index, NaN last): sel_e / sel_p in rank order. Every thread
// of the CTA calls it (it synchronises); sel_* are ready when it returns.
__device__ void route_row(const float* __restrict__ row, int experts, int top_k, RouteSmem& sm) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    float l[EPT];
    float mx = -INFINITY;
#pragma unroll
    for (int v = 0; v < EPT; ++v) {
        const int e = v * THREADS + tid;
        l[v] = e < experts ? __ldcg(row + e) : -INFINITY;  // the previous kernel's, from L2
        mx = fmaxf(mx, l[v]);
    }
    mx = warp_max(mx);
    if (lane == 0) sm.red_max[warp] = mx;
    __syncthreads();
    mx = sm.red_max[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) mx = fmaxf(mx, sm.red_max[w]);
    float p[EPT];
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < EPT; ++v) {
        const int e = v * THREADS + tid;
        p[v] = e < experts ? expf(l[v] - mx) : 0.f;
        sum += p[v];
    }
    sum = warp_sum(sum);
    if (lane == 0) sm.red_sum[warp] = sum;
    __syncthreads();
    sum = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += sm.red_sum[w];
    // Each 32 experts (one warp's lanes): the rank of each among them; the k
    // best are candidates (slot seg * k + rank).
#pragma unroll
    for (int v = 0; v < EPT; ++v) {
        const int seg = v * WARPS + warp;
        if (seg * 32 < experts) {  // warp-uniform
            const int e = seg * 32 + lane;
            const unsigned key = e < experts ? prob_key(p[v] / sum) : 0u;
            int rank = 0;
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                const unsigned kj = __shfl_sync(0xffffffffu, key, j);
                rank += before(kj, j, key, lane);
            }
            if (rank < top_k) sm.cand[seg * top_k + rank] = make_uint2(key, (unsigned)e);
        }
    }
    __syncthreads();
    // Every candidate's rank among the candidates; the k best are the top-k
    // (every expert of the top-k is the k-best of its own 32). Warp w ranks
    // candidates w, w + WARPS, ..., its lanes comparing 32 others at a time.
    const int ncand = (experts + 31) / 32 * top_k;
    for (int i = warp; i < ncand; i += WARPS) {  // warp-uniform
        const uint2 me = sm.cand[i];
        int rank = 0;
        for (int j0 = 0; j0 < ncand; j0 += 32) {
            const int j = j0 + lane;
            bool b = false;
            if (j < ncand) {
                const uint2 o = sm.cand[j];
                b = before(o.x, (int)o.y, me.x, (int)me.y);
            }
            rank += __popc(__ballot_sync(0xffffffffu, b));
        }
        if (lane == 0 && rank < top_k) {
            sm.sel_e[rank] = (int)me.y;
            sm.sel_p[rank] = key_prob(me.x);
        }
    }
    __syncthreads();
}

// Copies `n` bf16 (a multiple of 8) from global src to shared dst with
// cp.async, all threads of the CTA; complete after cp_async_wait().
__device__ __forceinline__ void stage_async(const bf16* __restrict__ src, bf16* dst, int n) {
    for (int c = threadIdx.x; c < n / 8; c += blockDim.x) cp_async16(dst + 8 * c, src + 8 * c);
}

// The local index of the expert of rank t (route_row's), or -1: another rank's.
__device__ __forceinline__ int local_expert(const RouteSmem& sm, int t, int first, int local) {
    const int le = sm.sel_e[t] - first;
    return le >= 0 && le < local ? le : -1;
}

// The weight of the expert of rank t: its probability, over the top-k's sum
// when `renormalise` (summed in rank order).
__device__ __forceinline__ float slot_weight(const RouteSmem& sm, int t, int top_k, int renormalise) {
    if (!renormalise) return sm.sel_p[t];
    float kept = 0.f;
    for (int kk = 0; kk < top_k; ++kk) kept += sm.sel_p[kk];
    return sm.sel_p[t] / kept;
}

// logits: [rows][experts + 1] f32 (the shared expert's gate logit last).
// block: THREADS; grid: ceil((experts + 1) / WARPS).
// Warp j reads its router row once: its first pass before the wait, held
// across every row when hidden fits one pass; the rows of x are staged in
// shared memory ROUTE_XS elements at a time.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_route(const bf16* __restrict__ x, const bf16* __restrict__ router,
                 const bf16* __restrict__ shared_gate, int rows, int hidden, int experts,
                 float* __restrict__ logits) {
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
    const int per = min(rows, ROUTE_XS / hidden);  // rows staged at once (>= 1: hidden <= MAX_HIDDEN)
    for (int r0 = 0; r0 < rows; r0 += per) {
        const int nr = min(per, rows - r0);
        if (r0 > 0) __syncthreads();  // every warp is done with the rows before
        stage_async(x + (long long)r0 * hidden, xs, nr * hidden);
        cp_async_wait();
        __syncthreads();
        float acc[MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.f;
        for (int base = 0; base < hidden; base += KSPAN) {
            // The first pass is in av unless a later round of rows needs it again.
            if (base > 0 || (r0 > 0 && hidden > KSPAN)) load_pass(w, base, hidden, lane, pol, av);
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
}

// SiLU(x . g_row) * (x . u_row) over hidden, x in shared memory; the first
// pass's weight chunks already in av / bv when `loaded`.
__device__ __forceinline__ float swiglu_col(const bf16* __restrict__ g_row, const bf16* __restrict__ u_row,
                                            const bf16* xs, int hidden, int lane, unsigned long long pol,
                                            bool loaded, uint4 (&av)[KCH], uint4 (&bv)[KCH]) {
    float g = 0.f, u = 0.f;
    for (int base = 0; base < hidden; base += KSPAN) {
        if (base > 0 || !loaded) {
            load_pass(g_row, base, hidden, lane, pol, av);
            load_pass(u_row, base, hidden, lane, pol, bv);
        }
        g += dot_pass(av, xs, base, hidden, lane);
        u += dot_pass(bv, xs, base, hidden, lane);
    }
    g = warp_sum(g);
    u = warp_sum(u);
    return g / (1.f + expf(-g)) * u;
}

// gate+up of the routed experts and of the shared expert.
// grid: (ceil(max(inter, shared_inter) / (WARPS * GATE_UP_COLS)), rows + rows * top_k):
// blockIdx.y < rows is the shared expert of row blockIdx.y (dispatched first:
// when CTAs start before the router finishes, those have work), the rest
// (row, slot) = pair blockIdx.y - rows of a routed expert. Warp w of CTA x
// computes columns (x * GATE_UP_COLS + i) * WARPS + w, i < GATE_UP_COLS.
// Routed CTAs: each first computes its row's softmax and top-k from the
// logits (route_row). topk_expert / topk_weight: [rows][top_k], local expert
// index (or -1: another rank's) and its weight, written by the CTA at
// (0, rows + row * top_k).
// Shared CTAs: their first weights load before griddepcontrol.wait.
// act: [rows][top_k + 1][act_stride] f32.
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // <= 128 registers: 2 CTAs an SM
moe_decode_gate_up(const bf16* __restrict__ x, const bf16* __restrict__ gate_up,
                   const bf16* __restrict__ shared_gate_proj, const bf16* __restrict__ shared_up_proj,
                   const float* __restrict__ logits, int rows, int hidden, int experts, int top_k,
                   int renormalise, int first, int local, int inter, int shared_inter, int act_stride,
                   int* __restrict__ topk_expert, float* __restrict__ topk_weight, float* __restrict__ act) {
    __shared__ RouteSmem sm;
    __shared__ __align__(16) bf16 xs[MAX_HIDDEN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int y = blockIdx.y;
    const int col0 = blockIdx.x * GATE_UP_COLS * WARPS + warp;
    const unsigned long long pol = weight_policy();
    uint4 av[KCH], bv[KCH];
    if (y < rows) {
        // The shared expert of row r: no routing, so its first pass loads
        // before the wait (warps past the last column load the last one).
        const int r = y;
        const int cc = min(col0, shared_inter - 1);
        const bf16* g_row = shared_gate_proj + (long long)cc * hidden;
        const bf16* u_row = shared_up_proj + (long long)cc * hidden;
        load_pass(g_row, 0, hidden, lane, pol, av);
        load_pass(u_row, 0, hidden, lane, pol, bv);
        wait_prior();
        launch_next();  // the down CTAs load their shared rows while this grid runs
        stage_async(x + (long long)r * hidden, xs, hidden);
        cp_async_wait();
        __syncthreads();
        float* act_r = act + ((long long)r * (top_k + 1) + top_k) * act_stride;
#pragma unroll 1
        for (int i = 0; i < GATE_UP_COLS; ++i) {
            const int c = col0 + i * WARPS;
            if (c >= shared_inter) break;  // warp-uniform; no barrier below
            const bf16* gr = shared_gate_proj + (long long)c * hidden;
            const bf16* ur = shared_up_proj + (long long)c * hidden;
            const float v = swiglu_col(gr, ur, xs, hidden, lane, pol, i == 0, av, bv);
            if (lane == 0) act_r[c] = v;
        }
        return;
    }
    const int pair = y - rows;
    const int r = pair / top_k, slot = pair - r * top_k;
    wait_prior();
    launch_next();  // the down CTAs load their shared rows while this grid runs
    // x's row lands in shared memory (cp.async) while the routing runs.
    stage_async(x + (long long)r * hidden, xs, hidden);
    route_row(logits + (long long)r * (experts + 1), experts, top_k, sm);
    cp_async_wait();
    __syncthreads();
    if (blockIdx.x == 0 && slot == 0 && (int)threadIdx.x < top_k) {
        const int t = threadIdx.x;
        topk_expert[r * top_k + t] = local_expert(sm, t, first, local);
        topk_weight[r * top_k + t] = slot_weight(sm, t, top_k, renormalise);
    }
    const int e = sm.sel_e[slot] - first;
    if (e < 0 || e >= local) return;  // another rank's expert: the down kernel skips it
    float* act_r = act + ((long long)r * (top_k + 1) + slot) * act_stride;
#pragma unroll 1
    for (int i = 0; i < GATE_UP_COLS; ++i) {
        const int c = col0 + i * WARPS;
        if (c >= inter) break;  // warp-uniform; no barrier below
        const bf16* g_row = gate_up + ((long long)e * 2 * inter + c) * hidden;
        const bf16* u_row = g_row + (long long)inter * hidden;
        load_pass(g_row, 0, hidden, lane, pol, av);
        load_pass(u_row, 0, hidden, lane, pol, bv);
        const float v = swiglu_col(g_row, u_row, xs, hidden, lane, pol, true, av, bv);
        if (lane == 0) act_r[c] = v;
    }
}

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

// The shared expert's chunks of one pass (DCH per lane from cb) of row `row`.
__device__ __forceinline__ void load_shared(const bf16* row, int cb, int len, int lane,
                                            unsigned long long pol, uint4 (&v)[DCH]) {
#pragma unroll
    for (int i = 0; i < DCH; ++i) {
        const int k = cb + (i * 32 + lane) * 8;
        v[i] = load8w(row + k, row, k < len, pol);
    }
}

// One pass of this lane's share of w . a (a f32 in shared memory, len long).
__device__ __forceinline__ float dot_act(const uint4 (&v)[DCH], const float* a_slot, int cb, int len,
                                         int lane) {
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < DCH; ++i) {
        const int k = cb + (i * 32 + lane) * 8;
        if (k < len) {
            float fw[8];
            bf16x8(v[i], fw);
            const float4 a0 = *reinterpret_cast<const float4*>(a_slot + k);
            const float4 a1 = *reinterpret_cast<const float4*>(a_slot + k + 4);
            part = fmaf(fw[0], a0.x, part);
            part = fmaf(fw[1], a0.y, part);
            part = fmaf(fw[2], a0.z, part);
            part = fmaf(fw[3], a0.w, part);
            part = fmaf(fw[4], a1.x, part);
            part = fmaf(fw[5], a1.y, part);
            part = fmaf(fw[6], a1.z, part);
            part = fmaf(fw[7], a1.w, part);
        }
    }
    return part;
}

// out = bf16(sum over the k routed slots of w_s * (down_s[n] . act_s) +
// sigmoid(gate logit) * (shared_down[n] . act_k)). Each warp one column n of
// row blockIdx.y; the shared expert's rows load before griddepcontrol.wait,
// the routing (topk_expert / topk_weight, gate_up's) and the shared gate's
// logit (the route kernel's, finished before gate_up's CTAs passed their
// wait) are read after it.
// grid: (ceil(hidden / WARPS), rows). act_stride % 4 == 0, (top_k + 1) * act_stride <= MAX_ACT.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_down(const float* __restrict__ act, const bf16* __restrict__ down,
                const bf16* __restrict__ shared_down, const int* __restrict__ topk_expert,
                const float* __restrict__ topk_weight, const float* __restrict__ logits, int hidden,
                int experts, int top_k, int inter, int shared_inter, int act_stride,
                bf16* __restrict__ out) {
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
    wait_prior();
    // The row's activations into shared memory (asynchronous: they land
    // while the routing is read and the weights load).
    for (int i = t; i < slots * act_stride / 4; i += THREADS) cp_async16(act_s + 4 * i, act_r + i);
    if (t < top_k) {
        const int e = topk_expert[r * top_k + t];
        base_s[t] = e >= 0 ? down + (long long)e * hidden * inter : nullptr;
        scale_s[t] = topk_weight[r * top_k + t];
    } else if (t == top_k) {
        scale_s[t] = 1.f / (1.f + expf(-logit_row[experts]));
    }
    __syncthreads();
    load_group(base_s, top_k, 0, 0, nn, inter, lane, pol, sd_row, wv);
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

}  // namespace headroom_moe_decode
