// Shape-general fallbacks of the two model ops whose fast kernels are built
// for the production shapes only (the chunked gated delta rule for head dim
// 128, the grouped-GEMM experts for hidden % 128 and intermediate % 64):
// small models and the transformers fixtures run through these instead.
// Correct for any shape within the stated bounds, not fast.
#include <cuda_bf16.h>
#include <math_constants.h>

#define FALLBACK_MAX_DK 256
#define FALLBACK_MAX_EXPERTS 1024

// The recurrent gated delta rule, one CTA per (value head, sequence), one
// thread per state column j (blockDim.x >= dv), rows of the sequence in order.
// seqs: [n][3] int64 (slot, first row, rows). State f32 [slots][hv][dk][dv].
extern "C" __global__ void gdn_recurrent_any_bf16(
    const __nv_bfloat16* __restrict__ qkv, const float* __restrict__ g,
    const float* __restrict__ beta, float* __restrict__ state,
    __nv_bfloat16* __restrict__ out, const long long* __restrict__ seqs,
    int hk, int hv, int dk, int dv)
{
    __shared__ float qs[FALLBACK_MAX_DK];
    __shared__ float ks[FALLBACK_MAX_DK];
    __shared__ float norms[2];
    const int h = blockIdx.x;
    const long long slot = seqs[3 * blockIdx.y];
    const long long row0 = seqs[3 * blockIdx.y + 1];
    const long long rows = seqs[3 * blockIdx.y + 2];
    const int kh = h / (hv / hk);
    const long long conv = 2LL * hk * dk + (long long)hv * dv;
    float* S = state + (slot * hv + h) * (long long)dk * dv;
    const int j = threadIdx.x;
    const float scale = rsqrtf((float)dk);
    for (long long r = row0; r < row0 + rows; ++r) {
        const __nv_bfloat16* row = qkv + r * conv;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            qs[i] = __bfloat162float(row[kh * dk + i]);
            ks[i] = __bfloat162float(row[(long long)hk * dk + kh * dk + i]);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float sq = 0.f, sk = 0.f;
            for (int i = 0; i < dk; ++i) { sq += qs[i] * qs[i]; sk += ks[i] * ks[i]; }
            norms[0] = scale / sqrtf(sq + 1e-6f);
            norms[1] = 1.f / sqrtf(sk + 1e-6f);
        }
        __syncthreads();
        const float qn = norms[0], kn = norms[1];
        const float decay = expf(g[r * hv + h]);
        const float b = beta[r * hv + h];
        if (j < dv) {
            const float v = __bfloat162float(row[2LL * hk * dk + (long long)h * dv + j]);
            float kv = 0.f;
            for (int i = 0; i < dk; ++i) {
                float s = S[(long long)i * dv + j] * decay;
                S[(long long)i * dv + j] = s;
                kv += s * ks[i] * kn;
            }
            const float delta = (v - kv) * b;
            float o = 0.f;
            for (int i = 0; i < dk; ++i) {
                float s = S[(long long)i * dv + j] + ks[i] * kn * delta;
                S[(long long)i * dv + j] = s;
                o += s * qs[i] * qn;
            }
            out[r * (long long)hv * dv + (long long)h * dv + j] = __float2bfloat16(o);
        }
        __syncthreads();
    }
}

// Router softmax (f32) + top-k (ties to the lower index, NaN last) +
// optional renormalisation, one thread per token, into a dense weight row
// [t][e]: the weight of each chosen expert, -inf for the others.
extern "C" __global__ void moe_dense_route(
    const float* __restrict__ logits, float* __restrict__ w,
    long long t, int e, int top_k, int renormalise)
{
    long long tok = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tok >= t) return;
    const float* l = logits + tok * e;
    float* out = w + tok * e;
    float mx = -CUDART_INF_F;
    for (int i = 0; i < e; ++i) mx = fmaxf(mx, l[i]);
    float sum = 0.f;
    for (int i = 0; i < e; ++i) sum += expf(l[i] - mx);
    unsigned char chosen[FALLBACK_MAX_EXPERTS];
    for (int i = 0; i < e; ++i) { chosen[i] = 0; out[i] = -CUDART_INF_F; }
    float kept = 0.f;
    for (int k = 0; k < top_k; ++k) {
        int best = -1;
        float pb = 0.f;
        for (int i = 0; i < e; ++i) {
            if (chosen[i]) continue;
            float p = expf(l[i] - mx) / sum;
            if (best < 0 || (!isnan(p) && (isnan(pb) || p > pb))) { best = i; pb = p; }
        }
        chosen[best] = 1;
        out[best] = pb;
        kept += pb;
    }
    if (renormalise)
        for (int i = 0; i < e; ++i)
            if (chosen[i]) out[i] = out[i] / kept;
}

// silu(gate) * up of a [t][2i] gate|up product into [t][i] (f32 math).
extern "C" __global__ void swiglu_halves_bf16(
    const __nv_bfloat16* __restrict__ gu, __nv_bfloat16* __restrict__ out,
    long long t, int inter)
{
    long long n = t * inter;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx / inter;
        int c = (int)(idx % inter);
        float gv = __bfloat162float(gu[r * 2 * inter + c]);
        float uv = __bfloat162float(gu[r * 2 * inter + inter + c]);
        out[idx] = __float2bfloat16(gv / (1.f + expf(-gv)) * uv);
    }
}

// acc[r][c] += w[r][expert] * y[r][c] for the rows routed to `expert`
// (w = -inf marks rows not routed there: left untouched).
extern "C" __global__ void moe_dense_accumulate(
    float* __restrict__ acc, const float* __restrict__ y, const float* __restrict__ w,
    long long t, int hidden, int e, int expert)
{
    long long n = t * hidden;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (long long)gridDim.x * blockDim.x) {
        long long r = idx / hidden;
        float wt = w[r * e + expert];
        if (wt != -CUDART_INF_F) acc[idx] += wt * y[idx];
    }
}
