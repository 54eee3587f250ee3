// The sparse MoE block for a few rows (decode), in three launches instead of
// the grouped-GEMM path's ~14 (crates/cuda/src/backend/moe_decode.rs). Every
// weight byte a row needs is read once per row, by GEMV-style warps: at one
// row the block is bound by the bytes of its 8 + 1 experts, not by tiles of
// 128 rows that hold one valid row each.
//
// 1. moe_decode_route: warp j computes router logit j (j < experts) or the
//    shared expert's gate logit (j == experts) for every row, f32 accumulate.
//    The last CTA to finish (a ticket counter, reset by that CTA) takes, per
//    row, the softmax over the experts, the top-k by probability (ties -> lower
//    index, NaN last, as moe_route), renormalises when asked, and the shared
//    gate's sigmoid. Experts outside first .. first+local are marked -1.
// 2. moe_decode_gate_up: blockIdx.y = (row, slot): slot < top_k is the row's
//    slot-th expert, slot == top_k the shared expert. Each warp computes
//    COLS_PER_WARP columns c: act = silu(x . gate[c]) * (x . up[c]), f32.
// 3. moe_decode_down: each warp COLS_PER_WARP output columns n of one row:
//    out = bf16(sum over k, in k order, of w_k * (down_e[n] . act_k)
//    + s * (shared_down[n] . act_shared)).
//
// Needs hidden, intermediate and the shared intermediate to be multiples of
// 8 (16-byte loads); rows <= MAX_ROWS; rows * experts <= PROBS; top_k <= MAX_TOP_K.

#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_moe_decode {

typedef __nv_bfloat16 bf16;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_ROWS = 8;
constexpr int PROBS = 4096;                        // rows * experts of the softmax in shared memory
constexpr int MAX_TOP_K = 32;
constexpr int COLS_PER_WARP = 2;
constexpr int COLS_PER_CTA = WARPS * COLS_PER_WARP;  // 16

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

// (pa, a) ranks before (pb, b): higher probability first, NaN last, lower index on ties.
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b) {
    bool na = pa != pa, nb = pb != pb;
    if (na != nb) return nb;
    if (!na && pa != pb) return pa > pb;
    return a < b;
}

// logits: [rows][experts + 1] f32 workspace; ticket: one u32, 0 between launches.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_route(const bf16* __restrict__ x, const bf16* __restrict__ router,
                 const bf16* __restrict__ shared_gate, int rows, int hidden, int experts, int top_k,
                 int renormalise, int first, int local, float* __restrict__ logits,
                 unsigned* __restrict__ ticket, int* __restrict__ topk_expert,
                 float* __restrict__ topk_weight, float* __restrict__ gate) {
    __shared__ float probs_all[PROBS];  // rows * experts <= PROBS (the launcher checks)
    __shared__ bool last;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = blockIdx.x * WARPS + warp;
    if (j <= experts) {
        const bf16* w = j < experts ? router + (long long)j * hidden : shared_gate;
        float acc[MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.f;
#pragma unroll 8
        for (int c = lane * 8; c < hidden; c += 256) {
            const uint4 wv = __ldg(reinterpret_cast<const uint4*>(w + c));
#pragma unroll
            for (int r = 0; r < MAX_ROWS; ++r) {
                if (r < rows) {
                    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + (long long)r * hidden + c));
                    acc[r] += dot8(wv, xv);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            if (r < rows) {
                const float s = warp_sum(acc[r]);
                if (lane == 0) logits[(long long)r * (experts + 1) + j] = s;
            }
        }
    }
    // The last CTA to arrive sees every CTA's logits (fence before the ticket).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int r = warp; r < rows; r += WARPS) {
        float* probs = probs_all + r * experts;
        const float* row = logits + (long long)r * (experts + 1);
        float mx = -INFINITY;
        for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, __ldcg(row + e));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int e = lane; e < experts; e += 32) {
            const float p = expf(__ldcg(row + e) - mx);
            probs[e] = p;
            sum += p;
        }
        sum = warp_sum(sum);
        for (int e = lane; e < experts; e += 32) probs[e] /= sum;
        __syncwarp();
        float prev_p = 0.f, kept = 0.f;
        int prev_e = -1;
        for (int kk = 0; kk < top_k; ++kk) {
            float bp = 0.f;
            int be = -1;
            for (int e = lane; e < experts; e += 32) {
                const float p = probs[e];
                const bool eligible = prev_e < 0 || ranks_before(prev_p, prev_e, p, e);
                if (eligible && (be < 0 || ranks_before(p, e, bp, be))) { bp = p; be = e; }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float op = __shfl_xor_sync(0xffffffffu, bp, o);
                const int oe = __shfl_xor_sync(0xffffffffu, be, o);
                if (oe >= 0 && (be < 0 || ranks_before(op, oe, bp, be))) { bp = op; be = oe; }
            }
            prev_p = bp;
            prev_e = be;
            kept += bp;
            if (lane == 0) {
                const int le = be - first;
                topk_expert[r * top_k + kk] = le >= 0 && le < local ? le : -1;
                topk_weight[r * top_k + kk] = bp;
            }
        }
        if (lane == 0) {
            if (renormalise) {
                for (int kk = 0; kk < top_k; ++kk) topk_weight[r * top_k + kk] /= kept;
            }
            gate[r] = 1.f / (1.f + expf(-__ldcg(row + experts)));
        }
    }
    if (threadIdx.x == 0) *ticket = 0u;
}

// act: [rows][top_k + 1][act_stride] f32, act_stride >= max(inter, shared_inter).
// grid: (ceil(max(inter, shared_inter) / COLS_PER_CTA), rows * (top_k + 1)).
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_gate_up(const bf16* __restrict__ x, const bf16* __restrict__ gate_up,
                   const bf16* __restrict__ shared_gate_proj, const bf16* __restrict__ shared_up_proj,
                   const int* __restrict__ topk_expert, int hidden, int top_k, int inter,
                   int shared_inter, int act_stride, float* __restrict__ act) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int pair = blockIdx.y, r = pair / (top_k + 1), slot = pair % (top_k + 1);
    const bf16* gate_rows;
    const bf16* up_rows;
    int n;
    if (slot < top_k) {
        const int e = topk_expert[r * top_k + slot];
        if (e < 0) return;  // another rank's expert: the down kernel skips it
        gate_rows = gate_up + (long long)e * 2 * inter * hidden;
        up_rows = gate_rows + (long long)inter * hidden;
        n = inter;
    } else {
        gate_rows = shared_gate_proj;
        up_rows = shared_up_proj;
        n = shared_inter;
    }
    const int c0 = blockIdx.x * COLS_PER_CTA + warp * COLS_PER_WARP;
    if (c0 >= n) return;
    const bf16* xr = x + (long long)r * hidden;
    float g[COLS_PER_WARP], u[COLS_PER_WARP];
#pragma unroll
    for (int j = 0; j < COLS_PER_WARP; ++j) g[j] = u[j] = 0.f;
#pragma unroll 4
    for (int k = lane * 8; k < hidden; k += 256) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xr + k));
        uint4 gv[COLS_PER_WARP], uv[COLS_PER_WARP];
#pragma unroll
        for (int j = 0; j < COLS_PER_WARP; ++j) {
            const int c = min(c0 + j, n - 1);  // a tail column repeats the last (not stored)
            gv[j] = __ldg(reinterpret_cast<const uint4*>(gate_rows + (long long)c * hidden + k));
            uv[j] = __ldg(reinterpret_cast<const uint4*>(up_rows + (long long)c * hidden + k));
        }
#pragma unroll
        for (int j = 0; j < COLS_PER_WARP; ++j) {
            g[j] += dot8(gv[j], xv);
            u[j] += dot8(uv[j], xv);
        }
    }
#pragma unroll
    for (int j = 0; j < COLS_PER_WARP; ++j) {
        const float gs = warp_sum(g[j]), us = warp_sum(u[j]);
        if (lane == 0 && c0 + j < n) {
            act[((long long)pair) * act_stride + c0 + j] = gs / (1.f + expf(-gs)) * us;
        }
    }
}

// This lane's share of the dot of a bf16 weight row of length len with an
// f32 activation row (len % 8 == 0), added to s scaled by w (reduced later).
__device__ __forceinline__ void lane_dot(const bf16* __restrict__ wrow, const float* __restrict__ a, int len,
                                         int lane, float w, float& s) {
    float t = 0.f;
#pragma unroll 2
    for (int k = lane * 8; k < len; k += 256) {
        float fw[8];
        bf16x8(__ldg(reinterpret_cast<const uint4*>(wrow + k)), fw);
        const float4 a0 = *reinterpret_cast<const float4*>(a + k);
        const float4 a1 = *reinterpret_cast<const float4*>(a + k + 4);
        t = fmaf(fw[0], a0.x, t);
        t = fmaf(fw[1], a0.y, t);
        t = fmaf(fw[2], a0.z, t);
        t = fmaf(fw[3], a0.w, t);
        t = fmaf(fw[4], a1.x, t);
        t = fmaf(fw[5], a1.y, t);
        t = fmaf(fw[6], a1.z, t);
        t = fmaf(fw[7], a1.w, t);
    }
    s = fmaf(w, t, s);
}

// grid: (ceil(hidden / COLS_PER_CTA), rows). act_stride % 4 == 0, top_k <= MAX_TOP_K.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_down(const float* __restrict__ act, const bf16* __restrict__ down,
                const bf16* __restrict__ shared_down, const int* __restrict__ topk_expert,
                const float* __restrict__ topk_weight, const float* __restrict__ gate, int hidden,
                int top_k, int inter, int shared_inter, int act_stride, bf16* __restrict__ out) {
    __shared__ int experts_s[MAX_TOP_K];
    __shared__ float weights_s[MAX_TOP_K];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = blockIdx.y;
    if (threadIdx.x < top_k) {
        experts_s[threadIdx.x] = topk_expert[r * top_k + threadIdx.x];
        weights_s[threadIdx.x] = topk_weight[r * top_k + threadIdx.x];
    }
    __syncthreads();
    const int n0 = blockIdx.x * COLS_PER_CTA + warp * COLS_PER_WARP;
    if (n0 >= hidden) return;
    const float* act_r = act + (long long)r * (top_k + 1) * act_stride;
    // Per-lane partial sums over every expert, reduced once at the end: the
    // loads of all experts are independent of each other.
    float acc[COLS_PER_WARP];
#pragma unroll
    for (int j = 0; j < COLS_PER_WARP; ++j) acc[j] = 0.f;
#pragma unroll 4
    for (int kk = 0; kk < top_k; ++kk) {
        const int e = experts_s[kk];
        if (e < 0) continue;  // another rank's expert
        const float w = weights_s[kk];
        const float* a = act_r + (long long)kk * act_stride;
#pragma unroll
        for (int j = 0; j < COLS_PER_WARP; ++j) {
            const int n = min(n0 + j, hidden - 1);  // a tail column repeats the last (not stored)
            lane_dot(down + ((long long)e * hidden + n) * inter, a, inter, lane, w, acc[j]);
        }
    }
    const float s = gate[r];
    const float* a = act_r + (long long)top_k * act_stride;
#pragma unroll
    for (int j = 0; j < COLS_PER_WARP; ++j) {
        const int n = min(n0 + j, hidden - 1);
        lane_dot(shared_down + (long long)n * shared_inter, a, shared_inter, lane, s, acc[j]);
    }
#pragma unroll
    for (int j = 0; j < COLS_PER_WARP; ++j) {
        const float v = warp_sum(acc[j]);
        if (lane == 0 && n0 + j < hidden) out[(long long)r * hidden + n0 + j] = __float2bfloat16_rn(v);
    }
}

// ---- v2: every load of a warp issued before its first use ------------------
// v1 above keeps a warp's loads in short dependent rounds (a column's K loop
// unrolled by 4; the down kernel one expert row after another): at one row
// each round waits a full memory latency. v2 gives a warp one column and
// unrolls its whole K loop (gate_up), and flattens the down kernel's
// (expert, chunk) pairs of one output column over the lanes, so a lane's 18
// loads (35B-A3B: 9 rows of 64 chunks over 32 lanes) are all in flight at once.

// grid: (ceil(max(inter, shared_inter) / WARPS), rows * (top_k + 1)).
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_gate_up_v2(const bf16* __restrict__ x, const bf16* __restrict__ gate_up,
                      const bf16* __restrict__ shared_gate_proj, const bf16* __restrict__ shared_up_proj,
                      const int* __restrict__ topk_expert, int hidden, int top_k, int inter,
                      int shared_inter, int act_stride, float* __restrict__ act) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int pair = blockIdx.y, r = pair / (top_k + 1), slot = pair % (top_k + 1);
    const bf16* gate_rows;
    const bf16* up_rows;
    int n;
    if (slot < top_k) {
        const int e = topk_expert[r * top_k + slot];
        if (e < 0) return;  // another rank's expert: the down kernel skips it
        gate_rows = gate_up + (long long)e * 2 * inter * hidden;
        up_rows = gate_rows + (long long)inter * hidden;
        n = inter;
    } else {
        gate_rows = shared_gate_proj;
        up_rows = shared_up_proj;
        n = shared_inter;
    }
    const int c = blockIdx.x * WARPS + warp;
    if (c >= n) return;
    const bf16* xr = x + (long long)r * hidden;
    const bf16* g_row = gate_rows + (long long)c * hidden;
    const bf16* u_row = up_rows + (long long)c * hidden;
    float g = 0.f, u = 0.f;
#pragma unroll 8
    for (int k = lane * 8; k < hidden; k += 256) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xr + k));
        const uint4 gv = __ldg(reinterpret_cast<const uint4*>(g_row + k));
        const uint4 uv = __ldg(reinterpret_cast<const uint4*>(u_row + k));
        g += dot8(gv, xv);
        u += dot8(uv, xv);
    }
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane == 0) act[(long long)pair * act_stride + c] = g / (1.f + expf(-g)) * u;
}

// grid: (ceil(hidden / WARPS), rows). act_stride % 4 == 0, top_k <= MAX_TOP_K.
extern "C" __global__ void __launch_bounds__(THREADS)
moe_decode_down_v2(const float* __restrict__ act, const bf16* __restrict__ down,
                   const bf16* __restrict__ shared_down, const int* __restrict__ topk_expert,
                   const float* __restrict__ topk_weight, const float* __restrict__ gate, int hidden,
                   int top_k, int inter, int shared_inter, int act_stride, bf16* __restrict__ out) {
    __shared__ int experts_s[MAX_TOP_K];
    __shared__ float weights_s[MAX_TOP_K];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = blockIdx.y;
    if (threadIdx.x < top_k) {
        experts_s[threadIdx.x] = topk_expert[r * top_k + threadIdx.x];
        weights_s[threadIdx.x] = topk_weight[r * top_k + threadIdx.x];
    }
    __syncthreads();
    const int n = blockIdx.x * WARPS + warp;
    if (n >= hidden) return;
    const float* act_r = act + (long long)r * (top_k + 1) * act_stride;
    const int cr = inter / 8, cs = shared_inter / 8;
    const int routed = top_k * cr, total = routed + cs;
    const float s = gate[r];
    float acc = 0.f;
#pragma unroll 6
    for (int idx = lane; idx < total; idx += 32) {
        const bool is_routed = idx < routed;
        const int slot = is_routed ? idx / cr : top_k;
        const int ch = is_routed ? idx - slot * cr : idx - routed;
        const int e = is_routed ? experts_s[slot] : 0;
        // Another rank's expert (-1) reads expert 0's row and its (unwritten)
        // act slot, both in bounds, and the select below drops the product.
        const bf16* wrow = is_routed ? down + ((long long)max(e, 0) * hidden + n) * inter
                                     : shared_down + (long long)n * shared_inter;
        const float scale = is_routed ? weights_s[slot] : s;
        float fw[8];
        bf16x8(__ldg(reinterpret_cast<const uint4*>(wrow + ch * 8)), fw);
        const float* a = act_r + (long long)slot * act_stride + ch * 8;
        const float4 a0 = *reinterpret_cast<const float4*>(a);
        const float4 a1 = *reinterpret_cast<const float4*>(a + 4);
        float t = fw[0] * a0.x;
        t = fmaf(fw[1], a0.y, t);
        t = fmaf(fw[2], a0.z, t);
        t = fmaf(fw[3], a0.w, t);
        t = fmaf(fw[4], a1.x, t);
        t = fmaf(fw[5], a1.y, t);
        t = fmaf(fw[6], a1.z, t);
        t = fmaf(fw[7], a1.w, t);
        acc = e < 0 ? acc : fmaf(scale, t, acc);
    }
    const float v = warp_sum(acc);
    if (lane == 0) out[(long long)r * hidden + n] = __float2bfloat16_rn(v);
}

}  // namespace headroom_moe_decode
