// The glue of the MoE decode on FP8 experts (crates/cuda/src/ops/fp8/moe.rs),
// around the batched-experts FP8 GEMV of fp8_gemv.cu:
//
// 1. fp8_moe_route: one warp (one CTA) per row. Softmax over all experts in
//    f32, top-k by probability (ties -> lower expert index, NaN last), the
//    weights renormalised over the kept k when asked: transformers'
//    Qwen3_5MoeTopKRouter, the CPU `route` and moe_route.cu. Writes each
//    (row, k) pair's local expert index (-1: another rank's expert) and
//    weight.
// 2. fp8_moe_swiglu: act[q][j] = bf16(silu(gu[q][j]) * gu[q][I + j]) for
//    each pair q (gu f32 [pairs][2I]: gate rows then up rows of the expert).
// 3. fp8_moe_combine: out[r][h] = bf16(sum over k, in k order, of w[r][k] *
//    y[r * K + k][h] (pairs of another rank's expert skipped) +
//    sigmoid(gate[r]) * shared[r][h]), in f32.
//
// Every kernel waits for the previous one before it reads (PDL).

#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_fp8_moe {

constexpr int MAX_EXPERTS = 1024;
constexpr int THREADS = 256;

// (pa, a) ranks before (pb, b): higher probability first, NaN last, lower index on ties.
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b) {
    bool na = pa != pa, nb = pb != pb;
    if (na != nb) return nb;
    if (!na && pa != pb) return pa > pb;
    return a < b;
}

}  // namespace headroom_fp8_moe

extern "C" __global__ void __launch_bounds__(32)
    fp8_moe_route(const float* __restrict__ logits, int experts, int top_k, int renormalise,
                  int first, int local, int* __restrict__ ids, float* __restrict__ weights) {
    using namespace headroom_fp8_moe;
    __shared__ float probs[MAX_EXPERTS];
    wait_prior_then_release_next();
    const int lane = threadIdx.x;
    const long long t = blockIdx.x;
    const float* row = logits + t * experts;
    float mx = -INFINITY;
    for (int j = lane; j < experts; j += 32) mx = fmaxf(mx, row[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int j = lane; j < experts; j += 32) {
        const float p = expf(row[j] - mx);
        probs[j] = p;
        sum += p;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int j = lane; j < experts; j += 32) probs[j] /= sum;
    __syncwarp();
    float prev_p = 0.f, kept = 0.f;
    int prev_e = -1;
    for (int kk = 0; kk < top_k; ++kk) {
        float bp = 0.f;
        int be = -1;
        for (int j = lane; j < experts; j += 32) {
            const float p = probs[j];
            const bool eligible = prev_e < 0 || ranks_before(prev_p, prev_e, p, j);
            if (eligible && (be < 0 || ranks_before(p, j, bp, be))) {
                bp = p;
                be = j;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float op = __shfl_xor_sync(0xffffffffu, bp, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ranks_before(op, oe, bp, be))) {
                bp = op;
                be = oe;
            }
        }
        prev_p = bp;
        prev_e = be;
        kept += bp;
        if (lane == 0) {
            const int le = be - first;
            ids[t * top_k + kk] = (le >= 0 && le < local) ? le : -1;
            weights[t * top_k + kk] = bp;
        }
    }
    if (renormalise && lane == 0) {
        for (int kk = 0; kk < top_k; ++kk) weights[t * top_k + kk] /= kept;
    }
}

extern "C" __global__ void __launch_bounds__(256)
    fp8_moe_swiglu(const float* __restrict__ gu, __nv_bfloat16* __restrict__ act,
                   long long pairs, int inter) {
    wait_prior_then_release_next();
    const long long n = pairs * inter;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long q = i / inter;
        const int j = (int)(i % inter);
        const float g = gu[q * 2 * inter + j];
        const float u = gu[q * 2 * inter + inter + j];
        act[i] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
    }
}

extern "C" __global__ void __launch_bounds__(256)
    fp8_moe_combine(const float* __restrict__ y, const int* __restrict__ ids,
                    const float* __restrict__ weights, const __nv_bfloat16* __restrict__ shared,
                    const float* __restrict__ gate, __nv_bfloat16* __restrict__ out, long long rows,
                    int top_k, int hidden, int has_shared) {
    wait_prior_then_release_next();
    const long long n = rows * hidden;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / hidden;
        const int h = (int)(i % hidden);
        float acc = 0.f;
        for (int kk = 0; kk < top_k; ++kk) {
            const long long q = r * top_k + kk;
            if (ids[q] >= 0) acc += weights[q] * y[q * hidden + h];
        }
        if (has_shared) {
            const float s = 1.f / (1.f + expf(-gate[r]));
            acc += s * __bfloat162float(shared[i]);
        }
        out[i] = __float2bfloat16_rn(acc);
    }
}
