// Gated delta rule, recurrent step for decode: one row per sequence, the
// whole batch in one launch.
//
// Semantics as gdn_chunked.cu: q, k L2-normalised (x * rsqrt(sum x^2 + 1e-6)),
// q scaled by 1/sqrt(DK); value head h reads key head h / (hv/hk);
// S *= exp(g); delta = (v - S^T k) * beta; S += k (x) delta; o = S^T q.
// f32 state and arithmetic.
//
// One CTA per (32 value columns, value head, sequence); lane = value column,
// warp = a quarter of the key dim: each thread keeps 32 state entries of its
// column in registers; the two column sums (S^T k, S^T q) are reduced over
// the four warps through shared memory.

#include <cuda_bf16.h>

namespace gdn_rec {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;

constexpr int DK = 128;
constexpr int DV = 128;
constexpr int BV = 32;                 // value columns per CTA (= lanes)
constexpr int PARTS = 4;               // warps: key-dim quarters
constexpr int ROWS = DK / PARTS;       // key rows per thread
constexpr int THREADS = PARTS * 32;
constexpr int MAX_SEQS = 384;          // sequences per launch (kernel parameter table)
constexpr float L2_EPS = 1e-6f;

struct DecodeTable {
    int n;
    int slot[MAX_SEQS];
    int row[MAX_SEQS];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS) gdn_recurrent_step_bf16(
    const bf16* __restrict__ qkv, const float* __restrict__ gdec, const float* __restrict__ beta,
    float* __restrict__ state, bf16* __restrict__ out, int hk, int hv, DecodeTable tab) {
    __shared__ float qn[DK], kn[DK], red[2][PARTS][BV];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int vb = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    const int kh = h / (hv / hk);
    const long long row = tab.row[s];
    const long long ld_qkv = 2LL * hk * DK + (long long)hv * DV;
    const bf16* base = qkv + row * ld_qkv;

    if (warp < 2) {  // warp 0 normalises q, warp 1 k
        const bf16* src = base + (warp == 0 ? 0LL : (long long)hk * DK) + kh * DK + lane * 4;
        float x[4];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float2 f = __bfloat1622float2(reinterpret_cast<const bf162*>(src)[e]);
            x[2 * e] = f.x;
            x[2 * e + 1] = f.y;
        }
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) ss += x[e] * x[e];
        ss = warp_sum(ss);
        const float inv = rsqrtf(ss + L2_EPS) * (warp == 0 ? rsqrtf((float)DK) : 1.f);
        float* dst = warp == 0 ? qn : kn;
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[lane * 4 + e] = x[e] * inv;
    }
    __syncthreads();

    const int col = vb * BV + lane;
    const float decay = __expf(gdec[row * hv + h]);
    const float b = beta[row * hv + h];
    const float v = __bfloat162float(base[2LL * hk * DK + (long long)h * DV + col]);
    float* S = state + (((size_t)tab.slot[s] * hv + h) * DK + warp * ROWS) * DV + col;

    float sreg[ROWS];
    float kv = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        sreg[r] = S[(size_t)r * DV] * decay;
        kv += sreg[r] * kn[warp * ROWS + r];
    }
    red[0][warp][lane] = kv;
    __syncthreads();
    kv = 0.f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) kv += red[0][p][lane];
    const float delta = (v - kv) * b;
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        sreg[r] += kn[warp * ROWS + r] * delta;
        o += sreg[r] * qn[warp * ROWS + r];
        S[(size_t)r * DV] = sreg[r];
    }
    red[1][warp][lane] = o;
    __syncthreads();
    if (warp == 0) {
        o = 0.f;
#pragma unroll
        for (int p = 0; p < PARTS; ++p) o += red[1][p][lane];
        out[row * hv * DV + (long long)h * DV + col] = __float2bfloat16(o);
    }
}

}  // namespace gdn_rec
