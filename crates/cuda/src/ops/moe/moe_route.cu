// Sparse-MoE routing and the bookkeeping around the grouped GEMMs
// (crates/cuda/src/ops/moe). Every kernel runs on the caller's stream; none
// needs the host between launches.
//
// 1. moe_route (moe_route_wide past 256 experts): one warp per token (a
//    block's warps take its tokens in turn, the grid at most
//    ROUTE_MAX_BLOCKS), its logits in registers. Softmax over all experts in
//    f32, then the top-k by probability (ties -> lower expert index; NaN sorts
//    last), the weights renormalised over the kept k when asked:
//    transformers' Qwen3_5MoeTopKRouter and the CPU `route`. Counts tokens per
//    expert (integer atomics: exact) in the block's shared memory, then adds
//    them to the global counts once a block; the last block to finish writes
//    the exclusive prefix sums of the counts (row offsets of each expert in
//    expert order) and of the row tiles per expert (the grouped GEMMs' tile
//    list).
// 2. moe_scatter: SCATTER_PER_THREAD (token, k) pairs a thread: each pair's
//    row (slot) in expert order and, for that slot, the token it came from.
//    A block counts its pairs per expert in shared memory, takes a run of
//    each expert's slots with one global atomic (counting the counts back
//    down to zero), then hands the run out in shared memory. The slot order
//    inside an expert depends on atomics, but no result does: each GEMM row
//    depends only on its own input row. A pass of at most
//    FUSED_SCATTER_PAIRS pairs is scattered by the routing kernel's last
//    block instead (one launch fewer).
//
// The global counts are COUNT_STRIDE ints apart (one 128-byte line each):
// the atomics of different experts then meet in different L2 lines instead
// of queueing on the eight lines 256 packed counters fill (session 41: at
// 32,768 tokens moe_route took 100 us and moe_scatter 72 us, one atomic a
// pair on packed counters).
// 3. moe_combine: out[t] = sum over k, in k order, of w[t][k] * y[slot(t, k)],
//    in f32 (no float atomics: reproducible run to run).
// 4. moe_combine_shared: the same sum, plus the shared expert scaled by its
//    sigmoid gate (x[t] . shared_gate, computed here), rounded once to bf16:
//    the whole MoE block's output in one pass (no f32 intermediate).
// 5. moe_combine_shared_norm(_fp8): that sum added to the residual stream
//    and the next layer's input norm taken in the same pass (the sum stays
//    in shared memory; the norm's rows are ops_norm.cu's, bit for bit).
//
// Expert parallelism: routing is over all experts, but only the pairs of the
// experts first .. first+local (the rank's) are counted, scattered, computed
// and combined; the others are marked -1 and skipped.

#include <cuda_bf16.h>

#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace headroom_moe {

constexpr int ROUTE_WARPS = 16;             // warps per routing block (one token at a time each)
constexpr int ROUTE_THREADS = ROUTE_WARPS * 32;
constexpr int ROUTE_MAX_BLOCKS = 512;       // most routing blocks (their warps then take several tokens)
constexpr int COUNT_STRIDE = 32;            // ints from one expert's global count to the next
constexpr int MAX_EXPERTS = 1024;           // the wide routing kernel's logits in registers
constexpr int ROUTE_NARROW_EXPERTS = 256;   // the narrow one's
constexpr int FUSED_SCATTER_PAIRS = 4096;   // most pairs the routing's last block scatters
constexpr int GEMM_BM = 128;                // rows per grouped-GEMM tile (moe_grouped_gemm.cu BM)
constexpr int COMBINE_THREADS = 256;
constexpr int COMBINE_BATCH = 8;            // loads in flight a thread (combine, fused scatter)
constexpr int SCATTER_THREADS = 256;
constexpr int SCATTER_PER_THREAD = 8;       // pairs a scatter thread takes

// NaN last, then higher probability, then the lower index (the caller
// breaks equal keys by index): 0 is below every key (a padding or picked
// slot), 1 is NaN, a probability p >= 0 is its bits + 2 (monotonic).
__device__ __forceinline__ unsigned rank_key(float p) {
    return p != p ? 1u : __float_as_uint(p) + 2u;
}

// Offsets of the last routing block: exclusive prefix sums of counts[0..local)
// (rows, and row tiles of GEMM_BM) into expert_offsets / tile_offsets [local + 1]
// and each expert's first row into s_start (shared), by ROUTE_THREADS threads,
// each a run of consecutive experts.
__device__ void route_offsets(const int* __restrict__ counts, int local, int* __restrict__ expert_offsets,
                              int* __restrict__ tile_offsets, int* s_start) {
    constexpr int PER = MAX_EXPERTS / ROUTE_THREADS;
    static_assert(PER * ROUTE_THREADS == MAX_EXPERTS, "every expert has a thread");
    __shared__ int warp_rows[ROUTE_WARPS], warp_tiles[ROUTE_WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int c[PER], rows = 0, tiles = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int e = tid * PER + i;
        c[i] = e < local ? __ldcg(counts + (long long)e * COUNT_STRIDE) : 0;  // L2: the other blocks' atomics
        rows += c[i];
        tiles += (c[i] + GEMM_BM - 1) / GEMM_BM;
    }
    // Inclusive scans of the threads' sums: in the warp, then over the warps.
    int r_inc = rows, t_inc = tiles;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int r = __shfl_up_sync(0xffffffffu, r_inc, o), tl = __shfl_up_sync(0xffffffffu, t_inc, o);
        if (lane >= o) {
            r_inc += r;
            t_inc += tl;
        }
    }
    if (lane == 31) {
        warp_rows[warp] = r_inc;
        warp_tiles[warp] = t_inc;
    }
    __syncthreads();
    int r_base = r_inc - rows, t_base = t_inc - tiles;
    for (int w = 0; w < warp; ++w) {
        r_base += warp_rows[w];
        t_base += warp_tiles[w];
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int e = tid * PER + i;
        if (e < local) {
            s_start[e] = r_base;
            r_base += c[i];
            t_base += (c[i] + GEMM_BM - 1) / GEMM_BM;
            expert_offsets[e + 1] = r_base;
            tile_offsets[e + 1] = t_base;
        }
    }
    if (tid == 0) {
        expert_offsets[0] = 0;
        tile_offsets[0] = 0;
    }
}

// One warp per token, the logits in registers (expert j in lane j % 32, slot
// j / 32; experts <= 32 * PER_LANE): max, exp, sum and the probabilities in the
// CPU's per-lane order, then top_k rounds of a warp arg-max (redux.sync on the
// rank keys, then on the index among the equal keys). Picks 0..31 stay in
// their lane and are written (and counted) at the end in parallel.
template <int PER_LANE>
__device__ __forceinline__ void route_token(const float* __restrict__ logits, long long t, int experts, int top_k,
                                            int renormalise, int* __restrict__ topk_expert,
                                            float* __restrict__ topk_weight, int first, int local, int* hist) {
    const int lane = threadIdx.x % 32;
    const float* row = logits + t * experts;
    float p[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
        const int j = lane + 32 * i;
        p[i] = j < experts ? row[j] : -INFINITY;
    }
    // max (fmaxf skips NaN, as Rust's f32::max), then exp and sum.
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) mx = fmaxf(mx, p[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
        if (lane + 32 * i < experts) {
            p[i] = expf(p[i] - mx);
            sum += p[i];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    unsigned key[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) key[i] = lane + 32 * i < experts ? rank_key(p[i] / sum) : 0u;
    float kept = 0.f, my_w = 0.f;
    int my_e = -1;
    for (int kk = 0; kk < top_k; ++kk) {
        // This lane's best (the first of equal keys is its lowest index).
        unsigned bk = 0u;
        int bi = 0;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            if (key[i] > bk) {
                bk = key[i];
                bi = i;
            }
        }
        const unsigned wk = __reduce_max_sync(0xffffffffu, bk);
        const int be = __reduce_min_sync(0xffffffffu, bk == wk ? lane + 32 * bi : 0x7fffffff);
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            if (lane + 32 * i == be) key[i] = 0u;
        }
        const float bp = wk == 1u ? __int_as_float(0x7fffffff) : __uint_as_float(wk - 2u);
        kept += bp;  // in pick order, as the CPU's sum over the chosen
        if (kk < 32) {
            if (lane == kk) {
                my_e = be;
                my_w = bp;
            }
        } else if (lane == 0) {  // top_k > 32: written now, renormalised below
            const int le = be - first;
            const bool mine = le >= 0 && le < local;
            topk_expert[t * top_k + kk] = mine ? le : -1;
            topk_weight[t * top_k + kk] = bp;
            if (mine) atomicAdd(&hist[le], 1);
        }
    }
    if (lane < top_k) {
        const int le = my_e - first;
        const bool mine = le >= 0 && le < local;
        topk_expert[t * top_k + lane] = mine ? le : -1;
        topk_weight[t * top_k + lane] = renormalise ? my_w / kept : my_w;
        if (mine) atomicAdd(&hist[le], 1);
    }
    if (renormalise && lane == 0) {
        for (int kk = 32; kk < top_k; ++kk) topk_weight[t * top_k + kk] /= kept;
    }
}

// The routing of a block's tokens (route_token; warp w of block b takes tokens
// b * ROUTE_WARPS + w, then every gridDim.x * ROUTE_WARPS after), each token's
// picks counted in the block's shared memory, then added to the global counts
// once a block. Experts first .. first+local are this rank's (all of them
// without expert parallelism): topk_expert holds the local index, -1 for
// another rank's. counts [(local + 1) * COUNT_STRIDE] must be zero at the
// launch: counts[e * COUNT_STRIDE] gets expert e's pairs,
// counts[local * COUNT_STRIDE] counts the finished blocks, and the last block
// to finish writes the offsets (moe_offsets' work) and sets its ticket back to 0.
template <int PER_LANE>
__device__ __forceinline__ void route_block(const float* __restrict__ logits, int tokens, int experts,
                                            int top_k, int renormalise, int* __restrict__ topk_expert,
                                            float* __restrict__ topk_weight, int* __restrict__ counts,
                                            int first, int local, int* __restrict__ expert_offsets,
                                            int* __restrict__ tile_offsets, int* __restrict__ slot_token,
                                            int* __restrict__ pair_slot) {
    __shared__ int hist[MAX_EXPERTS];
    for (int e = threadIdx.x; e < local; e += ROUTE_THREADS) hist[e] = 0;
    __syncthreads();
    const int warp = threadIdx.x / 32;
    const long long stride = (long long)gridDim.x * ROUTE_WARPS;
    for (long long t = (long long)blockIdx.x * ROUTE_WARPS + warp; t < tokens; t += stride)  // warp-uniform
        route_token<PER_LANE>(logits, t, experts, top_k, renormalise, topk_expert, topk_weight, first, local, hist);
    __syncthreads();
    for (int e = threadIdx.x; e < local; e += ROUTE_THREADS) {
        const int h = hist[e];
        if (h != 0) atomicAdd(&counts[(long long)e * COUNT_STRIDE], h);
    }
    // The last block to finish sees every count (each thread's atomics are
    // ordered before its fence, the fences before the block's ticket).
    int* ticket = counts + (long long)local * COUNT_STRIDE;
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(ticket, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    __shared__ int s_start[MAX_EXPERTS];
    route_offsets(counts, local, expert_offsets, tile_offsets, s_start);
    if (threadIdx.x == 0) *ticket = 0;
    if (slot_token == nullptr) return;
    // A small pass (at most FUSED_SCATTER_PAIRS pairs): moe_scatter's work here,
    // each pair's expert read from L2 (the other blocks wrote it), the slots
    // taken from shared cursors, COMBINE_BATCH pairs a thread in flight; then
    // the counts back to zero for the next pass.
    __syncthreads();
    const int pairs = tokens * top_k;
    for (int p0 = threadIdx.x; p0 < pairs; p0 += COMBINE_BATCH * ROUTE_THREADS) {
        int e[COMBINE_BATCH];
#pragma unroll
        for (int b = 0; b < COMBINE_BATCH; ++b) {
            const int p = p0 + b * ROUTE_THREADS;
            e[b] = p < pairs ? __ldcg(topk_expert + p) : -2;
        }
#pragma unroll
        for (int b = 0; b < COMBINE_BATCH; ++b) {
            const int p = p0 + b * ROUTE_THREADS;
            if (e[b] == -2) continue;
            if (e[b] < 0) {  // another rank's expert
                pair_slot[p] = -1;
                continue;
            }
            const int slot = atomicAdd(&s_start[e[b]], 1);
            slot_token[slot] = p / top_k;
            pair_slot[p] = slot;
        }
    }
    for (int e = threadIdx.x; e < local; e += ROUTE_THREADS) counts[(long long)e * COUNT_STRIDE] = 0;
}

// Launch: grid min(ceil(tokens / ROUTE_WARPS), ROUTE_MAX_BLOCKS), block
// ROUTE_THREADS, no dynamic shared memory. moe_route: experts <= 256; moe_route_wide: experts <= MAX_EXPERTS.
// slot_token / pair_slot: null, or (tokens * top_k <= FUSED_SCATTER_PAIRS) the
// scatter's outputs, written by the last block (no moe_scatter launch then).
#define ROUTE_ENTRY(NAME, PER_LANE)                                                                   \
    extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)                                      \
    NAME(const float* __restrict__ logits, int tokens, int experts, int top_k, int renormalise,      \
         int* __restrict__ topk_expert, float* __restrict__ topk_weight, int* __restrict__ counts,    \
         int first, int local, int* __restrict__ expert_offsets, int* __restrict__ tile_offsets,      \
         int* __restrict__ slot_token, int* __restrict__ pair_slot) {                                 \
        route_block<PER_LANE>(logits, tokens, experts, top_k, renormalise, topk_expert, topk_weight, \
                              counts, first, local, expert_offsets, tile_offsets, slot_token,        \
                              pair_slot);                                                            \
    }
ROUTE_ENTRY(moe_route, ROUTE_NARROW_EXPERTS / 32)
ROUTE_ENTRY(moe_route_wide, MAX_EXPERTS / 32)

// SCATTER_PER_THREAD pairs a thread (block b: pairs b * SCATTER_THREADS *
// SCATTER_PER_THREAD on, thread-interleaved): their slots in expert order.
// counts[e * COUNT_STRIDE] holds expert e's pairs not yet given a slot (the
// routing's); a block takes a run of as many as it has pairs of e by
// decrementing it once, so the counts are zero again for the next pass, and
// hands the run out to its pairs through shared cursors.
extern "C" __global__ void __launch_bounds__(SCATTER_THREADS)
moe_scatter(const int* __restrict__ topk_expert, int pairs, int top_k,
            const int* __restrict__ expert_offsets, int* __restrict__ counts,
            int* __restrict__ slot_token, int* __restrict__ pair_slot) {
    __shared__ int cursor[MAX_EXPERTS];  // the block's pairs of each expert, then its next slot
    for (int e = threadIdx.x; e < MAX_EXPERTS; e += SCATTER_THREADS) cursor[e] = 0;
    __syncthreads();
    const long long p0 = (long long)blockIdx.x * SCATTER_THREADS * SCATTER_PER_THREAD + threadIdx.x;
    int e[SCATTER_PER_THREAD];
#pragma unroll
    for (int b = 0; b < SCATTER_PER_THREAD; ++b) {
        const long long p = p0 + b * SCATTER_THREADS;
        e[b] = p < pairs ? topk_expert[p] : -2;
    }
#pragma unroll
    for (int b = 0; b < SCATTER_PER_THREAD; ++b) {
        if (e[b] >= 0) atomicAdd(&cursor[e[b]], 1);
    }
    __syncthreads();
    for (int x = threadIdx.x; x < MAX_EXPERTS; x += SCATTER_THREADS) {
        const int h = cursor[x];  // nonzero only for this rank's experts
        if (h != 0) cursor[x] = expert_offsets[x] + atomicSub(&counts[(long long)x * COUNT_STRIDE], h) - h;
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < SCATTER_PER_THREAD; ++b) {
        const long long p = p0 + b * SCATTER_THREADS;
        if (e[b] == -2) continue;
        if (e[b] < 0) {  // another rank's expert
            pair_slot[p] = -1;
            continue;
        }
        const int slot = atomicAdd(&cursor[e[b]], 1);
        slot_token[slot] = (int)(p / top_k);
        pair_slot[p] = slot;
    }
}

// acc[0..8] = sum over k (in k order) of w[t][k] * y[slot(t, k)][c..c + 8]
// (slot < 0: another rank's expert, skipped: its rank adds it). The picks are
// read COMBINE_BATCH at a time, their rows loaded together before any is
// summed: two memory latencies a batch, not two a pick.
__device__ __forceinline__ void routed_sum8(const __nv_bfloat16* __restrict__ y,
                                            const float* __restrict__ topk_weight,
                                            const int* __restrict__ pair_slot, long long t, int top_k,
                                            int hidden, int c, float (&acc)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = 0.f;
    for (int k0 = 0; k0 < top_k; k0 += COMBINE_BATCH) {
        float w[COMBINE_BATCH];
        int slot[COMBINE_BATCH];
        uint4 v[COMBINE_BATCH];
#pragma unroll
        for (int b = 0; b < COMBINE_BATCH; ++b) {
            const bool in = k0 + b < top_k;
            slot[b] = in ? pair_slot[t * top_k + k0 + b] : -1;
            w[b] = in ? topk_weight[t * top_k + k0 + b] : 0.f;
        }
#pragma unroll
        for (int b = 0; b < COMBINE_BATCH; ++b) {
            if (slot[b] >= 0) v[b] = *reinterpret_cast<const uint4*>(y + (long long)slot[b] * hidden + c);
        }
#pragma unroll
        for (int b = 0; b < COMBINE_BATCH; ++b) {
            if (slot[b] < 0) continue;
            const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v[b]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float2 f = __bfloat1622float2(h[j]);
                acc[2 * j] += w[b] * f.x;
                acc[2 * j + 1] += w[b] * f.y;
            }
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

// x[c..c + 8] . gate[c..c + 8] added to dot (pairs in order, as one dot product).
__device__ __forceinline__ void dot8(const uint4 xv, const uint4 gv, float& dot) {
    const __nv_bfloat162* xb = reinterpret_cast<const __nv_bfloat162*>(&xv);
    const __nv_bfloat162* gb = reinterpret_cast<const __nv_bfloat162*>(&gv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 a = __bfloat1622float2(xb[j]), b = __bfloat1622float2(gb[j]);
        dot += a.x * b.x + a.y * b.y;
    }
}

// One block per token; hidden % 8 == 0. out[t] = bf16(sum_k w[t][k] * y[slot(t, k)]
// + sigmoid(x[t] . gate) * shared[t]), the routed sum in k order and the gate's dot
// product reduced in a fixed order (reproducible run to run). The thread's first
// column chunk (the only one when hidden <= COMBINE_THREADS * 8) has its x, gate
// and shared loads issued before the routed sum's, and is summed before the
// gate's reduction: the loads of a token overlap instead of queueing.
__device__ __forceinline__ void combine_shared_row(const __nv_bfloat16* __restrict__ y,
                                                   const float* __restrict__ topk_weight,
                                                   const int* __restrict__ pair_slot, int top_k, int hidden,
                                                   const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ gate,
                                                   const __nv_bfloat16* __restrict__ shared, long long t,
                                                   __nv_bfloat16* out_row) {
    __shared__ float partial[COMBINE_THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c0 = threadIdx.x * 8;
    float acc0[8];
    float dot = 0.f;
    uint4 sv0 = make_uint4(0u, 0u, 0u, 0u);
    if (c0 < hidden) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x + t * hidden + c0);
        const uint4 gv = *reinterpret_cast<const uint4*>(gate + c0);
        sv0 = *reinterpret_cast<const uint4*>(shared + t * hidden + c0);
        routed_sum8(y, topk_weight, pair_slot, t, top_k, hidden, c0, acc0);
        dot8(xv, gv, dot);
    }
    for (int c = c0 + COMBINE_THREADS * 8; c < hidden; c += COMBINE_THREADS * 8) {
        dot8(*reinterpret_cast<const uint4*>(x + t * hidden + c), *reinterpret_cast<const uint4*>(gate + c),
             dot);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) partial[warp] = dot;
    __syncthreads();
    float logit = 0.f;
#pragma unroll
    for (int w = 0; w < COMBINE_THREADS / 32; ++w) logit += partial[w];
    const float s = 1.f / (1.f + expf(-logit));
    for (int c = c0; c < hidden; c += COMBINE_THREADS * 8) {
        float acc[8];
        uint4 sv = sv0;
        if (c == c0) {
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[j] = acc0[j];
        } else {
            routed_sum8(y, topk_weight, pair_slot, t, top_k, hidden, c, acc);
            sv = *reinterpret_cast<const uint4*>(shared + t * hidden + c);
        }
        const __nv_bfloat162* sb = reinterpret_cast<const __nv_bfloat162*>(&sv);
        uint4 o;
        __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(sb[j]);
            ob[j] = __floats2bfloat162_rn(acc[2 * j] + s * f.x, acc[2 * j + 1] + s * f.y);
        }
        *reinterpret_cast<uint4*>(out_row + c) = o;
    }
}

extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine_shared(const __nv_bfloat16* __restrict__ y, const float* __restrict__ topk_weight,
                   const int* __restrict__ pair_slot, int top_k, int hidden,
                   const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate,
                   const __nv_bfloat16* __restrict__ shared, __nv_bfloat16* __restrict__ out) {
    const long long t = blockIdx.x;
    combine_shared_row(y, topk_weight, pair_slot, top_k, hidden, x, gate, shared, t, out + t * hidden);
}

// moe_combine_shared with the next layer's input norm folded in: the row's
// bf16 sum (the bits moe_combine_shared stores) kept in shared memory, then
// ops_norm.cu's add_rms_norm_quad_f32res row over it — residual[t] += sum
// (f32, stored), out[t] = the zero-centred RMSNorm of the new residual with
// weight w — and with CODES its e4m3 codes q and scales s
// (add_rms_norm_quad_f32res_fp8's; norm_row.cuh, norm_row_out.cuh: the same
// code, and the same block of 256 threads, so the same bits as the two
// launches). The sum is never written to global memory. One block per
// token; hidden % 8 == 0, hidden <= COMBINE_NORM_MAX_COLS; with CODES
// hidden % 128 == 0.
constexpr int COMBINE_NORM_MAX_COLS = 4 * headroom_norm_row::NORM_ROW_QUADS * COMBINE_THREADS;

template <bool CODES>
__device__ __forceinline__ void combine_shared_norm(const __nv_bfloat16* __restrict__ y,
                                                    const float* __restrict__ topk_weight,
                                                    const int* __restrict__ pair_slot, int top_k, int hidden,
                                                    const __nv_bfloat16* __restrict__ x,
                                                    const __nv_bfloat16* __restrict__ gate,
                                                    const __nv_bfloat16* __restrict__ shared,
                                                    float* __restrict__ residual, const float* __restrict__ w,
                                                    __nv_bfloat16* __restrict__ out, unsigned char* q, float* s,
                                                    float eps) {
    using headroom_norm_row::NORM_ROW_QUADS;
    __shared__ __align__(16) __nv_bfloat16 sum[COMBINE_NORM_MAX_COLS];
    const long long t = blockIdx.x;
    float* res = residual + t * hidden;
    // The residual row's loads go out with the gathers (their latency under
    // theirs); the norm weight (L2-resident, constant) after the sum.
    float4 r[NORM_ROW_QUADS];
    headroom_norm_row::load_row(res, hidden, r);
    combine_shared_row(y, topk_weight, pair_slot, top_k, hidden, x, gate, shared, t, sum);
    __syncthreads();
    float4 ww[NORM_ROW_QUADS];
    headroom_norm_row::load_weights(w, hidden, ww);
    float4 v[NORM_ROW_QUADS];
    const float inv = headroom_norm_row::add_loaded(r, sum, res, hidden, eps, v);
    uint2 o[NORM_ROW_QUADS];
    headroom_norm_row::normed_quads(v, ww, inv, hidden, o);
    headroom_norm_row::store_normed_row<CODES>(o, t, hidden, out, q, s);
}

extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine_shared_norm(const __nv_bfloat16* __restrict__ y, const float* __restrict__ topk_weight,
                        const int* __restrict__ pair_slot, int top_k, int hidden,
                        const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate,
                        const __nv_bfloat16* __restrict__ shared, float* __restrict__ residual,
                        const float* __restrict__ w, __nv_bfloat16* __restrict__ out, float eps) {
    combine_shared_norm<false>(y, topk_weight, pair_slot, top_k, hidden, x, gate, shared, residual, w, out, nullptr,
                               nullptr, eps);
}

extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine_shared_norm_fp8(const __nv_bfloat16* __restrict__ y, const float* __restrict__ topk_weight,
                            const int* __restrict__ pair_slot, int top_k, int hidden,
                            const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate,
                            const __nv_bfloat16* __restrict__ shared, float* __restrict__ residual,
                            const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                            unsigned char* __restrict__ q, float* __restrict__ s, float eps) {
    combine_shared_norm<true>(y, topk_weight, pair_slot, top_k, hidden, x, gate, shared, residual, w, out, q, s,
                              eps);
}

}  // namespace headroom_moe
