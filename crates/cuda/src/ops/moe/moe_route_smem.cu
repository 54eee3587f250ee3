// The MoE routing as it was before session 5 (step256), kept only as the
// baseline the register routing of moe_route.cu is measured against
// (crates/cuda/tests/step256_timing.rs); `RouteForm::Smem` runs it. Delete it
// once docs/perf/cuda-step256.md has the side-by-side.
//
// moe_route_smem: one warp per token, SMEM_ROUTE_WARPS tokens a block, the
// probabilities in dynamic shared memory ([SMEM_ROUTE_WARPS][experts] f32),
// k rounds of a warp arg-max over the experts ranked after the last pick;
// counts per expert (atomics). moe_offsets_smem: one block of MAX_EXPERTS
// threads, the exclusive prefix sums of the counts and of the row tiles; unlike
// the original it leaves the counts as they are, for moe_route.cu's scatter
// (which counts them back down to zero). Same outputs as moe_route.

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_moe_smem {

constexpr int SMEM_ROUTE_WARPS = 8;
constexpr int SMEM_ROUTE_THREADS = SMEM_ROUTE_WARPS * 32;
constexpr int MAX_EXPERTS = 1024;
constexpr int GEMM_BM = 128;

// (pa, a) ranks before (pb, b): higher probability first, NaN last, lower index on ties.
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b) {
    bool na = pa != pa, nb = pb != pb;
    if (na != nb) return nb;
    if (!na && pa != pb) return pa > pb;
    return a < b;
}

extern "C" __global__ void __launch_bounds__(SMEM_ROUTE_THREADS)
moe_route_smem(const float* __restrict__ logits, int tokens, int experts, int top_k, int renormalise,
          int* __restrict__ topk_expert, float* __restrict__ topk_weight, int* __restrict__ counts,
          int first, int local) {
    // Experts first .. first+local are this rank's (all of them without expert
    // parallelism): topk_expert holds the local index, -1 for another rank's.
    extern __shared__ float probs_all[];  // [SMEM_ROUTE_WARPS][experts]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long t = (long long)blockIdx.x * SMEM_ROUTE_WARPS + warp;
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
moe_offsets_smem(const int* __restrict__ counts, int experts, int* __restrict__ expert_offsets,
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
    }
    if (e == 0) {
        expert_offsets[0] = 0;
        tile_offsets[0] = 0;
    }
}

}  // namespace headroom_moe_smem
