// Sparse-MoE routing and the bookkeeping around the grouped GEMMs
// (crates/cuda/src/ops/moe). Every kernel runs on the caller's stream; none
// needs the host between launches.
//
// 1. moe_route: one warp per token. Softmax over all experts in f32, then the
//    top-k by probability (ties -> lower expert index; NaN sorts last), the
//    weights renormalised over the kept k when asked: transformers'
//    Qwen3_5MoeTopKRouter and the CPU `route`. Counts tokens per expert
//    (integer atomics: exact).
// 2. moe_offsets: one block. Exclusive prefix sums of the counts (row offsets
//    of each expert in expert order) and of the row tiles per expert (the
//    grouped GEMMs' tile list); resets the counts to serve as cursors.
// 3. moe_scatter: one thread per (token, k) pair: its row (slot) in expert
//    order and, for that slot, the token it came from. The slot order inside
//    an expert depends on atomics, but no result does: each GEMM row depends
//    only on its own input row.
// 4. moe_combine: out[t] = sum over k, in k order, of w[t][k] * y[slot(t, k)],
//    in f32 (no float atomics: reproducible run to run).
// 5. moe_combine_shared: the same sum, plus the shared expert scaled by its
//    sigmoid gate (x[t] . shared_gate, computed here), rounded once to bf16:
//    the whole MoE block's output in one pass (no f32 intermediate).
//
// Expert parallelism: routing is over all experts, but only the pairs of the
// experts first .. first+local (the rank's) are counted, scattered, computed
// and combined; the others are marked -1 and skipped.

#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_moe {

constexpr int ROUTE_WARPS = 8;              // tokens per routing block
constexpr int ROUTE_THREADS = ROUTE_WARPS * 32;
constexpr int MAX_EXPERTS = 1024;           // one offsets block: one thread per expert
constexpr int GEMM_BM = 128;                // rows per grouped-GEMM tile (moe_grouped_gemm.cu BM)
constexpr int COMBINE_THREADS = 256;
constexpr int SCATTER_THREADS = 256;

// (pa, a) ranks before (pb, b): higher probability first, NaN last, lower index on ties.
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b) {
    bool na = pa != pa, nb = pb != pb;
    if (na != nb) return nb;
    if (!na && pa != pb) return pa > pb;
    return a < b;
}

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)
moe_route(const float* __restrict__ logits, int tokens, int experts, int top_k, int renormalise,
          int* __restrict__ topk_expert, float* __restrict__ topk_weight, int* __restrict__ counts,
          int first, int local) {
    // Experts first .. first+local are this rank's (all of them without expert
    // parallelism): topk_expert holds the local index, -1 for another rank's.
    extern __shared__ float probs_all[];  // [ROUTE_WARPS][experts]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long t = (long long)blockIdx.x * ROUTE_WARPS + warp;
    if (t >= tokens) return;
    float* probs = probs_all + warp * experts;
    const float* row = logits + t * experts;
    // max (fmaxf skips NaN, as Rust's f32::max), then exp and sum.
    float mx = -INFINITY;
    for (int j = lane; j < experts; j += 32) mx = fmaxf(mx, row[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int j = lane; j < experts; j += 32) {
        float p = expf(row[j] - mx);
        probs[j] = p;
        sum += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int j = lane; j < experts; j += 32) probs[j] /= sum;
    __syncwarp();
    // k rounds of a warp arg-max over the experts ranked after the last pick.
    float prev_p = 0.f, kept = 0.f;
    int prev_e = -1;
    for (int kk = 0; kk < top_k; ++kk) {
        float bp = 0.f;
        int be = -1;
        for (int j = lane; j < experts; j += 32) {
            float p = probs[j];
            bool eligible = prev_e < 0 || ranks_before(prev_p, prev_e, p, j);
            if (eligible && (be < 0 || ranks_before(p, j, bp, be))) { bp = p; be = j; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float op = __shfl_xor_sync(0xffffffffu, bp, o);
            int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ranks_before(op, oe, bp, be))) { bp = op; be = oe; }
        }
        prev_p = bp;
        prev_e = be;
        kept += bp;  // in pick order, as the CPU's sum over the chosen
        if (lane == 0) {
            const int le = be - first;
            const bool mine = le >= 0 && le < local;
            topk_expert[t * top_k + kk] = mine ? le : -1;
            topk_weight[t * top_k + kk] = bp;
            if (mine) atomicAdd(&counts[le], 1);
        }
    }
    if (renormalise && lane == 0) {
        for (int kk = 0; kk < top_k; ++kk) topk_weight[t * top_k + kk] /= kept;
    }
}

// One block of MAX_EXPERTS threads (experts <= MAX_EXPERTS).
extern "C" __global__ void __launch_bounds__(MAX_EXPERTS)
moe_offsets(int* __restrict__ counts, int experts, int* __restrict__ expert_offsets,
            int* __restrict__ tile_offsets) {
    __shared__ int rows[MAX_EXPERTS];
    __shared__ int tiles[MAX_EXPERTS];
    const int e = threadIdx.x;
    int c = e < experts ? counts[e] : 0;
    rows[e] = c;
    tiles[e] = (c + GEMM_BM - 1) / GEMM_BM;
    __syncthreads();
    // Hillis-Steele inclusive scans.
    for (int o = 1; o < MAX_EXPERTS; o <<= 1) {
        int r = e >= o ? rows[e - o] : 0;
        int tl = e >= o ? tiles[e - o] : 0;
        __syncthreads();
        rows[e] += r;
        tiles[e] += tl;
        __syncthreads();
    }
    if (e < experts) {
        expert_offsets[e + 1] = rows[e];
        tile_offsets[e + 1] = tiles[e];
        counts[e] = 0;  // now the scatter's cursor
    }
    if (e == 0) {
        expert_offsets[0] = 0;
        tile_offsets[0] = 0;
    }
}

extern "C" __global__ void __launch_bounds__(SCATTER_THREADS)
moe_scatter(const int* __restrict__ topk_expert, int pairs, int top_k,
            const int* __restrict__ expert_offsets, int* __restrict__ cursor,
            int* __restrict__ slot_token, int* __restrict__ pair_slot) {
    const int p = blockIdx.x * SCATTER_THREADS + threadIdx.x;
    if (p >= pairs) return;
    const int e = topk_expert[p];
    if (e < 0) {  // another rank's expert
        pair_slot[p] = -1;
        return;
    }
    const int slot = expert_offsets[e] + atomicAdd(&cursor[e], 1);
    slot_token[slot] = p / top_k;
    pair_slot[p] = slot;
}

// acc[0..8] = sum over k (in k order) of w[t][k] * y[slot(t, k)][c..c + 8]
// (slot < 0: another rank's expert, skipped: its rank adds it).
__device__ __forceinline__ void routed_sum8(const __nv_bfloat16* __restrict__ y,
                                            const float* __restrict__ topk_weight,
                                            const int* __restrict__ pair_slot, long long t, int top_k,
                                            int hidden, int c, float (&acc)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = 0.f;
    for (int kk = 0; kk < top_k; ++kk) {
        const float w = topk_weight[t * top_k + kk];
        const long long slot = pair_slot[t * top_k + kk];
        if (slot < 0) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(y + slot * hidden + c);
        const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 f = __bfloat1622float2(b[j]);
            acc[2 * j] += w * f.x;
            acc[2 * j + 1] += w * f.y;
        }
    }
}

// One block per token; hidden % 8 == 0 (16-byte loads of y).
extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine(const __nv_bfloat16* __restrict__ y, const float* __restrict__ topk_weight,
            const int* __restrict__ pair_slot, int top_k, int hidden, float* __restrict__ out) {
    const long long t = blockIdx.x;
    for (int c = threadIdx.x * 8; c < hidden; c += COMBINE_THREADS * 8) {
        float acc[8];
        routed_sum8(y, topk_weight, pair_slot, t, top_k, hidden, c, acc);
        float4* o = reinterpret_cast<float4*>(out + t * hidden + c);
        o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
}

// One block per token; hidden % 8 == 0. out[t] = bf16(sum_k w[t][k] * y[slot(t, k)]
// + sigmoid(x[t] . gate) * shared[t]), the routed sum in k order and the gate's dot
// product reduced in a fixed order (reproducible run to run).
extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine_shared(const __nv_bfloat16* __restrict__ y, const float* __restrict__ topk_weight,
                   const int* __restrict__ pair_slot, int top_k, int hidden,
                   const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate,
                   const __nv_bfloat16* __restrict__ shared, __nv_bfloat16* __restrict__ out) {
    __shared__ float partial[COMBINE_THREADS / 32];
    const long long t = blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dot = 0.f;
    for (int c = threadIdx.x * 8; c < hidden; c += COMBINE_THREADS * 8) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x + t * hidden + c);
        const uint4 gv = *reinterpret_cast<const uint4*>(gate + c);
        const __nv_bfloat162* xb = reinterpret_cast<const __nv_bfloat162*>(&xv);
        const __nv_bfloat162* gb = reinterpret_cast<const __nv_bfloat162*>(&gv);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 a = __bfloat1622float2(xb[j]), b = __bfloat1622float2(gb[j]);
            dot += a.x * b.x + a.y * b.y;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) partial[warp] = dot;
    __syncthreads();
    float logit = 0.f;
#pragma unroll
    for (int w = 0; w < COMBINE_THREADS / 32; ++w) logit += partial[w];
    const float s = 1.f / (1.f + expf(-logit));
    for (int c = threadIdx.x * 8; c < hidden; c += COMBINE_THREADS * 8) {
        float acc[8];
        routed_sum8(y, topk_weight, pair_slot, t, top_k, hidden, c, acc);
        const uint4 sv = *reinterpret_cast<const uint4*>(shared + t * hidden + c);
        const __nv_bfloat162* sb = reinterpret_cast<const __nv_bfloat162*>(&sv);
        uint4 o;
        __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(sb[j]);
            ob[j] = __floats2bfloat162_rn(acc[2 * j] + s * f.x, acc[2 * j + 1] + s * f.y);
        }
        *reinterpret_cast<uint4*>(out + t * hidden + c) = o;
    }
}

}  // namespace headroom_moe
