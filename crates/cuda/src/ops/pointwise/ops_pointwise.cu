// Element-wise and row-gather kernels of the CUDA backend (bf16 storage, f32
// math): embedding gather (f32 rows), row gather, x *= sigmoid(gate), silu(gate) * up,
// the GDN gating (g, beta in f32) and the MoE output combine.
// Activations exactly as torch defines them: silu(x) = x / (1 + e^-x),
// sigmoid(x) = 1 / (1 + e^-x), softplus with threshold 20.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// out[r] = f32(table[ids[r]]) (rows of `cols`): the residual stream's first
// rows (f32); one CTA per output row. ids are checked against the vocabulary
// on the host.
extern "C" __global__ void embed_bf16_to_f32(const bf16* table, const unsigned* ids, float* out,
                                             int cols) {
    const i64 r = blockIdx.x;
    const bf16* src = table + (i64)ids[r] * cols;
    float* dst = out + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = __bfloat162float(src[c]);
}

// embed_bf16_to_f32 where an id with the top bit set names a row of `drawn`:
// the token the previous step drew on the device and the host has not read
// yet (the engine's step overlap, ops/pointwise/mod.rs `embed_drawn`). A
// drawn token outside the vocabulary (u32::MAX: its row had no finite
// logit) gives a NaN row; the host reports that draw's error when it reads
// it. Host ids are checked on the host.
extern "C" __global__ void embed_drawn_bf16_to_f32(const bf16* table, const unsigned* ids,
                                                   const unsigned* drawn, float* out, int cols,
                                                   int vocab) {
    const i64 r = blockIdx.x;
    unsigned id = ids[r];
    if (id & 0x80000000u) id = drawn[id & 0x7fffffffu];
    float* dst = out + r * cols;
    if (id >= (unsigned)vocab) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = __int_as_float(0x7fc00000);
        return;
    }
    const bf16* src = table + (i64)id * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = __bfloat162float(src[c]);
}

// out[i] = x[rows[i]] for 2-byte elements; one CTA per output row.
extern "C" __global__ void gather_rows_b16(const unsigned short* x, const long long* rows,
                                           unsigned short* out, int cols) {
    const i64 r = blockIdx.x;
    const unsigned short* src = x + rows[r] * cols;
    unsigned short* dst = out + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// out[i] = x[rows[i]] in 16-byte units (rows of `units` x 16 bytes, every row
// 16-byte aligned: the launcher takes it when a row's bytes are a multiple of
// 16); one CTA per output row. A row of logits (the vocabulary, ~0.5 MB in
// bf16) moves at the memory's rate instead of two bytes a thread.
extern "C" __global__ void gather_rows_v16(const uint4* x, const long long* rows, uint4* out,
                                           int units) {
    const i64 r = blockIdx.x;
    const uint4* src = x + rows[r] * units;
    uint4* dst = out + r * units;
    for (int c = threadIdx.x; c < units; c += blockDim.x) dst[c] = src[c];
}

// The same for 4-byte elements.
extern "C" __global__ void gather_rows_b32(const unsigned* x, const long long* rows, unsigned* out,
                                           int cols) {
    const i64 r = blockIdx.x;
    const unsigned* src = x + rows[r] * cols;
    unsigned* dst = out + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// x[i] = bf16(x[i] * sigmoid(gate[i])).
extern "C" __global__ void mul_sigmoid_bf16(bf16* x, const bf16* gate, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(__bfloat162float(x[i]) * sigmoidf_(__bfloat162float(gate[i])));
}

// out[i] = bf16(silu(gate[i]) * up[i]), 8 elements a thread with 16-byte
// loads and stores (all three buffers 16-byte aligned), the n % 8 last ones
// one a thread. Each element's math is the scalar expression's. A 2-byte
// form moved 1.5 TB/s over the shared expert's 8,537 x 512 (ncu, session 17).
extern "C" __global__ void swiglu_v8_bf16(const bf16* gate, const bf16* up, bf16* out, i64 n) {
    const i64 chunks = n / 8, stride = (i64)gridDim.x * blockDim.x;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* g4 = reinterpret_cast<const uint4*>(gate);
    const uint4* u4 = reinterpret_cast<const uint4*>(up);
    uint4* o4 = reinterpret_cast<uint4*>(out);
    for (i64 c = t; c < chunks; c += stride) {
        const uint4 gv = g4[c], uv = u4[c];
        const __nv_bfloat162* gb = reinterpret_cast<const __nv_bfloat162*>(&gv);
        const __nv_bfloat162* ub = reinterpret_cast<const __nv_bfloat162*>(&uv);
        uint4 ov;
        __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 g = __bfloat1622float2(gb[j]), u = __bfloat1622float2(ub[j]);
            ob[j] = __floats2bfloat162_rn(siluf_(g.x) * u.x, siluf_(g.y) * u.y);
        }
        o4[c] = ov;
    }
    const i64 i = chunks * 8 + t;
    if (i < n) out[i] = __float2bfloat16(siluf_(__bfloat162float(gate[i])) * __bfloat162float(up[i]));
}

// g = -exp(A_log[h]) * softplus(a + dt_bias[h]), beta = sigmoid(b), f32 [rows][heads].
extern "C" __global__ void gdn_gating_bf16(const bf16* a, const bf16* b, const float* a_log,
                                           const float* dt_bias, float* g, float* beta, i64 n,
                                           int heads) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const int h = (int)(i % heads);
        g[i] = -expf(a_log[h]) * softplusf_(__bfloat162float(a[i]) + dt_bias[h]);
        beta[i] = sigmoidf_(__bfloat162float(b[i]));
    }
}

// MoE output: out[t][c] = bf16(routed[t][c] + sigmoid(gate_logit[t]) * shared[t][c]);
// `routed` (f32) may be null (no routed experts).
extern "C" __global__ void moe_combine_bf16(const float* routed, const bf16* shared,
                                            const float* gate_logit, bf16* out, i64 n, int hidden) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const float s = sigmoidf_(gate_logit[i / hidden]) * __bfloat162float(shared[i]);
        out[i] = __float2bfloat16(routed ? routed[i] + s : s);
    }
}
