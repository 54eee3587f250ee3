// The MoE decode's down kernel on the tensor cores: FP8 experts (routed and
// shared) first, bf16 ones at the end of the file (moe_decode_down_mma).
// FP8 (crates/cuda/src/ops/moe/decode.rs, `down_mma_takes`): the
// same result as moe_decode_down_fp8 up to rounding, for the shapes where
// each slot's row is whole 64-column rounds, at most DOWN_MMA_ROUNDS of
// them. moe_decode_down_fp8 runs one output column a warp and multiplies
// its 16 weights a chunk one by one against the slot's f32 activations in
// shared memory (docs/perf/cuda-fp8.md, session 20: 254 warp instructions
// a KB, stalled on shared memory); here a warp multiplies a 16-column tile
// of one slot's down matrix with mma.sync m16n8k16 (e4m3 -> f16 A by
// cvt.rn.f16x2.e4m3x2, exact), the slot's activations as every column of B
// (f16 times 2^e, the slot's largest |act| in [2^14, 2^15), as
// fp8_gemv_mma.cu: each of D's columns is the same dot).
//
// CTA (x, r): output columns 16 x .. 16 x + 15 of row r. Warp w takes slots
// w, w + DOWN_MMA_WARPS, ... of the row's top_k routed experts and its
// shared expert (slot top_k); for each, lane (g, t) loads the 16 bytes at
// column 64 j + 16 t of tile rows g and g + 8 for every round j, and the
// four mma of a round take bytes 4m .. 4m + 3 of them (A's columns 2t, 2t+1
// and 2t+8, 2t+9), B the activations at those columns (lane (n, t) the
// 16 at 64 j + 16 t, from lane 4 j + t by shuffles). A round's sum times
// its 128 x 128 block's scale is added to the lane's sums; a slot's sums
// times 2^-e and its weight (the routing weight, sigmoid of the shared
// gate's logit for the shared expert) to the warp's; the warps' sums are
// added in warp order in shared memory and rounded to bf16 once.
//
// As moe_decode_down: the shared expert's tile and, once gate_up has
// published the row's experts (await_routed), the routed tiles load before
// griddepcontrol.wait; the routing weights and activations after it. A
// slot of another rank's expert adds nothing.

#include <cuda_fp16.h>

namespace headroom_moe_decode {

constexpr int DOWN_MMA_WARPS = 9;  // the 35B-A3B's 8 routed slots and the shared one, a warp each
constexpr int DOWN_MMA_THREADS = DOWN_MMA_WARPS * 32;
constexpr int DOWN_MMA_ROUNDS = 8;  // 64-column rounds of a slot's row: intermediates <= 512
constexpr int DOWN_MMA_TILE = 16;   // output columns a CTA

// The CTA's outputs once every warp's sums are in part (warp, output
// column): thread c < TILE sums column n0 + c over the warps in order and
// writes it, rounded to bf16 once, to row r of out.
template <int TILE>
__device__ __forceinline__ void down_mma_write(const float (*part)[TILE], int r, int hidden, long long n0,
                                               bf16* out) {
    const int t = threadIdx.x;
    if (t < TILE) {
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < DOWN_MMA_WARPS; ++w) o += part[w][t];
        out[(long long)r * hidden + n0 + t] = __float2bfloat16_rn(o);
    }
}

#ifdef HEADROOM_E4M3_CVT  // sm_89+ (e4m3.cuh): below it the entry traps and decode.rs never takes it
using headroom_e4m3::e4m3x2_f16x2;

__device__ __forceinline__ void mma_f16_f32(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                            unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 64-column round of a 16-row tile on the tensor cores: d = the round's
// products of rows g and g + 8 (this lane's 16 bytes of each in w0 / w1, at
// column 16 t of the round) with the vector whose f16 pairs for the round sit
// in lane `src` (h: 16 values, the lane's own), in d[0] / d[2] of lane (g, 0).
// The four mma take bytes 4m .. 4m + 3 of each chunk (A's columns 2t, 2t + 1
// and 2t + 8, 2t + 9) and the vector at those columns in every B column.
__device__ __forceinline__ void mma_round(const uint4& w0, const uint4& w1, const unsigned (&h)[8], int src,
                                          float (&d)[4]) {
    unsigned b[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) b[q] = __shfl_sync(0xffffffffu, h[q], src);
    const unsigned a0[4] = {w0.x, w0.y, w0.z, w0.w};
    const unsigned a1[4] = {w1.x, w1.y, w1.z, w1.w};
    d[0] = d[1] = d[2] = d[3] = 0.f;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        mma_f16_f32(d, e4m3x2_f16x2(static_cast<unsigned short>(a0[m])),
                    e4m3x2_f16x2(static_cast<unsigned short>(a1[m])),
                    e4m3x2_f16x2(static_cast<unsigned short>(a0[m] >> 16)),
                    e4m3x2_f16x2(static_cast<unsigned short>(a1[m] >> 16)), b[2 * m], b[2 * m + 1]);
    }
}

// One slot's tile: rows n0 + g and n0 + g + 8 of w ([..][len] e4m3), this
// lane's 16 bytes of each round (zeros past len; nothing when w is null).
__device__ __forceinline__ void down_mma_load(const unsigned char* w, long long n0, int len, int lane,
                                              unsigned long long pol, uint4 (&v)[DOWN_MMA_ROUNDS][2]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < DOWN_MMA_ROUNDS; ++j) {
        const int col = 64 * j + 16 * t;
        const bool ok = w != nullptr && 64 * j < len;
        const unsigned char* p0 = ok ? w + (n0 + g) * len + col : nullptr;
        v[j][0] = ok ? load16w_fp8(p0, p0, true, pol) : make_uint4(0u, 0u, 0u, 0u);
        v[j][1] = ok ? load16w_fp8(p0 + 8LL * len, p0, true, pol) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// The slot's dot for rows g and g + 8 (acc0 / acc1, unscaled by the slot's
// weight): its activations a (len f32, from L2) as f16 times 2^e, each
// round's products times its block scale (sr: the tile's block row of
// scales), the sum times 2^-e.
__device__ __forceinline__ void down_mma_slot(const uint4 (&v)[DOWN_MMA_ROUNDS][2], const float* a, int len,
                                              const float* sr, int lane, float& acc0, float& acc1) {
    const int t = lane & 3;
    // Lane l holds a[16 l .. 16 l + 15] (zeros past len) as 8 f16 pairs.
    float f[16];
    const bool in = 16 * lane < len;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 x = in ? __ldcg(reinterpret_cast<const float4*>(a + 16 * lane) + q) : make_float4(0.f, 0.f, 0.f, 0.f);
        f[4 * q] = x.x;
        f[4 * q + 1] = x.y;
        f[4 * q + 2] = x.z;
        f[4 * q + 3] = x.w;
    }
    // The slot's largest |a| as f32 bits (NaN above inf), then e.
    unsigned mx = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) mx = max(mx, __float_as_uint(f[i]) & 0x7fffffffu);
    mx = __reduce_max_sync(0xffffffffu, mx);
    int e = 0;
    if (mx != 0 && mx < 0x7f800000u) e = min(120, max(-120, 14 - ((int)(mx >> 23) - 127)));
    const float up = __int_as_float((127 + e) << 23);
    unsigned h[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const __half2 p = __floats2half2_rn(f[2 * q] * up, f[2 * q + 1] * up);
        h[q] = *reinterpret_cast<const unsigned*>(&p);
    }
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int j = 0; j < DOWN_MMA_ROUNDS; ++j) {
        if (64 * j >= len) break;  // warp-uniform
        float d[4];
        mma_round(v[j][0], v[j][1], h, 4 * j + t, d);
        const float sc = __ldg(sr + j / 2);
        s0 = fmaf(d[0], sc, s0);
        s1 = fmaf(d[2], sc, s1);
    }
    const float down = __int_as_float((127 - e) << 23);
    acc0 = s0 * down;
    acc1 = s1 * down;
}

#endif  // HEADROOM_E4M3_CVT

}  // namespace headroom_moe_decode

// moe_decode_down_fp8_mma: the parameters of moe_decode_down_fp8. grid
// (hidden / DOWN_MMA_TILE, rows), block DOWN_MMA_THREADS. Needs hidden % 16
// == 0 and inter, shared_inter multiples of 64 up to 64 * DOWN_MMA_ROUNDS
// (decode.rs checks).
// One CTA an SM at least (a slot's tile is 64 registers a lane; at the
// 112 registers of two CTAs an SM the kernel spills).
extern "C" __global__ void __launch_bounds__(headroom_moe_decode::DOWN_MMA_THREADS, 1)
    moe_decode_down_fp8_mma(const float* __restrict__ act, const unsigned char* __restrict__ down,
                            const float* __restrict__ down_s, const unsigned char* __restrict__ shared_down,
                            const float* __restrict__ shared_down_s, const int* __restrict__ topk_expert,
                            const float* __restrict__ topk_weight, const float* __restrict__ logits, int hidden,
                            int experts, int top_k, int inter, int shared_inter, int act_stride,
                            __nv_bfloat16* __restrict__ out) {
#ifndef HEADROOM_E4M3_CVT
    __trap();  // no e4m3 conversion instruction below sm_89: decode.rs never takes this entry there
#else
    using namespace headroom_moe_decode;
    __shared__ const unsigned char* base_s[MAX_TOP_K];
    __shared__ int expert_s[MAX_TOP_K];
    __shared__ float part[DOWN_MMA_WARPS][DOWN_MMA_TILE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = threadIdx.x;
    const int r = blockIdx.y;
    const long long n0 = (long long)blockIdx.x * DOWN_MMA_TILE;
    const unsigned long long pol = weight_policy();
    const int slots = top_k + 1;
    const int kib = (inter + 127) >> 7, sib = (shared_inter + 127) >> 7;
    // The row's experts as gate_up publishes them (before the wait, as
    // moe_decode_down): the routed tiles load before the wait too.
    if (t < top_k) {
        const int e = await_routed(topk_expert + r * top_k + t);
        expert_s[t] = e;
        base_s[t] = e >= 0 ? down + (long long)e * hidden * inter : nullptr;
    }
    __syncthreads();
    // This warp's slots: w, w + DOWN_MMA_WARPS, ... (the first loaded here).
    uint4 v[DOWN_MMA_ROUNDS][2];
    auto tile_of = [&](int s) -> const unsigned char* { return s == top_k ? shared_down : base_s[s]; };
    auto len_of = [&](int s) { return s == top_k ? shared_inter : inter; };
    if (warp < slots) down_mma_load(tile_of(warp), n0, len_of(warp), lane, pol, v);
    wait_prior();
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll 1
    for (int s = warp; s < slots; s += DOWN_MMA_WARPS) {
        if (s != warp) down_mma_load(tile_of(s), n0, len_of(s), lane, pol, v);
        if (tile_of(s) == nullptr) continue;  // another rank's expert (warp-uniform)
        const float* a = act + ((long long)r * slots + s) * act_stride;
        const float* sr = s == top_k ? shared_down_s + (n0 >> 7) * sib
                                     : down_s + (long long)expert_s[s] * ((hidden + 127) >> 7) * kib + (n0 >> 7) * kib;
        float acc0, acc1;
        down_mma_slot(v, a, len_of(s), sr, lane, acc0, acc1);
        const float w = s == top_k ? 1.f / (1.f + expf(-__ldcg(logits + (long long)r * (experts + 1) + experts)))
                                   : topk_weight[r * top_k + s];
        sum0 = fmaf(w, acc0, sum0);
        sum1 = fmaf(w, acc1, sum1);
    }
    if ((lane & 3) == 0) {
        part[warp][lane >> 2] = sum0;
        part[warp][(lane >> 2) + 8] = sum1;
    }
    __syncthreads();
    down_mma_write(part, r, hidden, n0, out);
#endif
}

// The bf16 down kernel on the tensor cores (decode.rs, `down_mma_takes`):
// moe_decode_down's result up to rounding, for slots whose rows are whole
// 64-column rounds, at most 2 * 32 * DOWN_BF_ROUNDS columns. CTA (x, r):
// output columns 8 x .. 8 x + 7 of row r; warp w takes slots w, w +
// DOWN_MMA_WARPS, ... as moe_decode_down_fp8_mma. A slot's 8 x len tile
// is one m16 A: rows 0-7 its 8 rows' first halves (columns [0, len / 2)),
// rows 8-15 their second halves, so a lane (g, t) loads the 16 bytes at
// column 32 j + 8 t of each half of row g for each round j. The f32
// activations go to B as two bf16 terms, hi = bf16(a) and lo = bf16(a -
// hi) (a to 16 bits), in four B columns: 0 hi of the first half, 1 hi of
// the second, 2 lo of the first, 3 lo of the second (4-7 zero), so that D's
// [g][0] + [g + 8][1] + [g][2] + [g + 8][3] is row g's whole dot: lane (g,
// 0) holds the first two (d[0], d[3]), lane (g, 1) the other two. Each warp
// splits its slot's activations (L2) into hi and lo in shared memory first.
// The weight products are exact, the sums the tensor cores' f32; a slot's
// sum times its weight is added to the warp's, the warps' in warp order in
// shared memory, rounded to bf16 once.

namespace headroom_moe_decode {

constexpr int DOWN_BF_TILE = 8;     // output columns a CTA
constexpr int DOWN_BF_ROUNDS = 8;   // 32-column rounds of a half row: intermediates <= 512
constexpr int DOWN_BF_LEN = 64 * DOWN_BF_ROUNDS;

// One slot's tile: each half of row n0 + g of w ([..][len] bf16), this
// lane's chunks of every round (zeros past len / 2; nothing when w is null).
__device__ __forceinline__ void down_bf_load(const bf16* w, long long n0, int len, int lane,
                                             unsigned long long pol, uint4 (&v)[DOWN_BF_ROUNDS][2]) {
    const int g = lane >> 2, t = lane & 3, half = len >> 1;
#pragma unroll
    for (int j = 0; j < DOWN_BF_ROUNDS; ++j) {
        const bool ok = w != nullptr && 32 * j < half;
        const bf16* p = ok ? w + (n0 + g) * len + 32 * j + 8 * t : nullptr;
        v[j][0] = ok ? load8w(p, p, true, pol) : zero4();
        v[j][1] = ok ? load8w(p + half, p, true, pol) : zero4();
    }
}

__device__ __forceinline__ bool finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

// The slot's activations a (len f32, from L2) as hi / lo bf16 in this warp's
// hl[0] / hl[1] (len each; lo 0 where hi is not finite, so that an inf stays
// inf and a NaN NaN).
__device__ __forceinline__ void down_bf_split(const float* a, int len, int lane, bf16 (*hl)[DOWN_BF_LEN]) {
#pragma unroll
    for (int q = 0; q < DOWN_BF_LEN / 128; ++q) {
        const int i = 128 * q + 4 * lane;
        if (i < len) {
            const float4 x = __ldcg(reinterpret_cast<const float4*>(a + i));
            const float f[4] = {x.x, x.y, x.z, x.w};
            unsigned hi[2], lo[2];
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * p], f[2 * p + 1]);
                const float2 hf = __bfloat1622float2(h);
                const float l0 = finite(hf.x) ? f[2 * p] - hf.x : 0.f;
                const float l1 = finite(hf.y) ? f[2 * p + 1] - hf.y : 0.f;
                const __nv_bfloat162 l = __floats2bfloat162_rn(l0, l1);
                hi[p] = *reinterpret_cast<const unsigned*>(&h);
                lo[p] = *reinterpret_cast<const unsigned*>(&l);
            }
            *reinterpret_cast<uint2*>(&hl[0][i]) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2*>(&hl[1][i]) = make_uint2(lo[0], lo[1]);
        }
    }
    __syncwarp();
}

// The slot's dot for row g (in lane (g, 0)), unscaled by its weight.
__device__ __forceinline__ float down_bf_slot(const uint4 (&v)[DOWN_BF_ROUNDS][2], const bf16 (*hl)[DOWN_BF_LEN],
                                              int len, int lane) {
    const int g = lane >> 2, t = lane & 3, half = len >> 1;
    // B column g < 4: hl[g / 2] from half g % 2; columns 4-7 zero.
    const bf16* b = g < 4 ? &hl[g >> 1][(g & 1) * half + 8 * t] : nullptr;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < DOWN_BF_ROUNDS; ++j) {
        if (32 * j >= half) break;  // warp-uniform
        const uint4 bv = b != nullptr ? *reinterpret_cast<const uint4*>(b + 32 * j) : zero4();
        mma_bf16_16816(d, v[j][0].x, v[j][1].x, v[j][0].y, v[j][1].y, bv.x, bv.y);
        mma_bf16_16816(d, v[j][0].z, v[j][1].z, v[j][0].w, v[j][1].w, bv.z, bv.w);
    }
    const float s = d[0] + d[3];                              // lane (g, 0): hi; lane (g, 1): lo
    return s + __shfl_xor_sync(0xffffffffu, s, 1);
}

}  // namespace headroom_moe_decode

// moe_decode_down_mma: the parameters of moe_decode_down. grid (hidden /
// DOWN_BF_TILE, rows), block DOWN_MMA_THREADS. Needs hidden % 8 == 0 and
// inter, shared_inter multiples of 64 up to DOWN_BF_LEN (decode.rs checks),
// mma.sync on bf16 (sm_80+).
extern "C" __global__ void __launch_bounds__(headroom_moe_decode::DOWN_MMA_THREADS, 2)
    moe_decode_down_mma(const float* __restrict__ act, const __nv_bfloat16* __restrict__ down,
                        const __nv_bfloat16* __restrict__ shared_down, const int* __restrict__ topk_expert,
                        const float* __restrict__ topk_weight, const float* __restrict__ logits, int hidden,
                        int experts, int top_k, int inter, int shared_inter, int act_stride,
                        __nv_bfloat16* __restrict__ out) {
    using namespace headroom_moe_decode;
    __shared__ const bf16* base_s[MAX_TOP_K];
    __shared__ float part[DOWN_MMA_WARPS][DOWN_BF_TILE];
    __shared__ __align__(16) bf16 hl_s[DOWN_MMA_WARPS][2][DOWN_BF_LEN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = threadIdx.x;
    const int r = blockIdx.y;
    const long long n0 = (long long)blockIdx.x * DOWN_BF_TILE;
    const unsigned long long pol = weight_policy();
    const int slots = top_k + 1;
    // The row's experts as gate_up publishes them (before the wait, as
    // moe_decode_down): the routed tiles load before the wait too.
    if (t < top_k) {
        const int e = await_routed(topk_expert + r * top_k + t);
        base_s[t] = e >= 0 ? down + (long long)e * hidden * inter : nullptr;
    }
    __syncthreads();
    uint4 v[DOWN_BF_ROUNDS][2];
    auto tile_of = [&](int s) -> const bf16* { return s == top_k ? shared_down : base_s[s]; };
    auto len_of = [&](int s) { return s == top_k ? shared_inter : inter; };
    if (warp < slots) down_bf_load(tile_of(warp), n0, len_of(warp), lane, pol, v);
    wait_prior();
    float sum = 0.f;
#pragma unroll 1
    for (int s = warp; s < slots; s += DOWN_MMA_WARPS) {
        if (s != warp) down_bf_load(tile_of(s), n0, len_of(s), lane, pol, v);
        if (tile_of(s) == nullptr) continue;  // another rank's expert (warp-uniform)
        if (s != warp) __syncwarp();          // the previous slot's reads of hl_s are done
        down_bf_split(act + ((long long)r * slots + s) * act_stride, len_of(s), lane, hl_s[warp]);
        const float acc = down_bf_slot(v, hl_s[warp], len_of(s), lane);
        const float w = s == top_k ? 1.f / (1.f + expf(-__ldcg(logits + (long long)r * (experts + 1) + experts)))
                                   : topk_weight[r * top_k + s];
        sum = fmaf(w, acc, sum);
    }
    if ((lane & 3) == 0) part[warp][lane >> 2] = sum;
    __syncthreads();
    down_mma_write(part, r, hidden, n0, out);
}
