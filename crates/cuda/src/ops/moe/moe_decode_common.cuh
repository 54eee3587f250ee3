// The helpers of the MoE decode kernels (moe_decode.cu, which follows this
// file and moe_decode_fp8.cuh in the program): constants, bf16 chunk loads
// and dots, the L2 policy and cp.async, and each routed CTA's softmax and
// top-k (route_row).

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
// Columns each gate_up warp computes one after the other: at one row 3 (198
// CTAs at the 35B shape), from two rows 5 (fewer, longer CTAs: measured
// faster at 2-8 rows and slower at one, docs/perf/cuda-decode.md session 19).
constexpr int GATE_UP_COLS = 3;
constexpr int GATE_UP_COLS_ROWS = 5;
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
    // (every expert of the top-k is the k-best of its own 32). In parallel:
    // G threads a candidate (the largest power of two <= 32 with G * ncand
    // <= THREADS, at least 1), thread sub of a candidate's comparing it with
    // candidates sub, sub + G, ..., the G counts summed by shuffles within
    // the group (G consecutive lanes of one warp).
    const int ncand = (experts + 31) / 32 * top_k;
    int G = 32;
    while (G > 1 && G * ncand > THREADS) G >>= 1;
    const int sub = tid & (G - 1);
    for (int base = 0; base < ncand; base += THREADS / G) {  // CTA-uniform
        const int i = base + tid / G;
        uint2 me = make_uint2(0u, 0u);
        int rank = 0;
        if (i < ncand) {
            me = sm.cand[i];
            for (int j = sub; j < ncand; j += G) {
                const uint2 o = sm.cand[j];
                rank += before(o.x, (int)o.y, me.x, (int)me.y);
            }
        }
        for (int o = 1; o < G; o <<= 1) rank += __shfl_xor_sync(0xffffffffu, rank, o);
        if (sub == 0 && i < ncand && rank < top_k) {
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

// The routing's early handoff to the down kernel. The route kernel marks
// every (row, slot) of topk_expert UNROUTED after its wait; gate_up's CTA
// (x 0, slot 0) of a row writes the row's experts with strong stores
// (publish_routed); the down kernel's CTAs wait for them with strong loads
// (await_routed) *before* their own griddepcontrol.wait, so they load their
// routed weights while gate_up still runs. Safe: the down grid launches only
// once every gate_up CTA has passed its wait (route complete, its marks in
// L2) and called launch_next, so the CTA that writes a row is already
// running; an expert index is never UNROUTED (-1 is another rank's).
constexpr int UNROUTED = -2147483647 - 1;

__device__ __forceinline__ void publish_routed(int* p, int v) {
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int await_routed(const int* p) {
    int v;
    for (;;) {
        asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        if (v != UNROUTED) return v;
        __nanosleep(32);
    }
}

// The route kernel's marks: every slot of every row UNROUTED (CTA 0, after the wait).
__device__ __forceinline__ void mark_unrouted(int* __restrict__ topk_expert, int rows, int top_k) {
    if (blockIdx.x != 0) return;
    for (int i = threadIdx.x; i < rows * top_k; i += blockDim.x) topk_expert[i] = UNROUTED;
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

}  // namespace headroom_moe_decode
