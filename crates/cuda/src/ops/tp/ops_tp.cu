// Tensor-parallel partial sums kept in f32 (backend::comm, backend::moe_partial):
// the f32 MoE combine of one rank's local experts and shared-expert shard, and the
// one rounding of an all-reduced f32 sum to bf16.
// Rounding is round-to-nearest-even (__float2bfloat16), as every bf16 output of
// the other kernels and cuBLAS; NaN stays NaN, overflow goes to +-inf.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

__device__ __forceinline__ float tp_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// The MoE output of the rank that adds the shared expert, in f32 and not rounded:
// out[t][c] = routed[t][c] + sigmoid(gate_logit[t]) * shared[t][c], `routed` f32 (its local
// experts' weighted sum), `shared` the whole shared expert's bf16 output (rounded as one GPU
// rounds it: moe_combine_shared computes acc + s * shared the same way); `out` may alias `routed`.
extern "C" __global__ void moe_combine_partial_f32(const float* routed, const bf16* shared,
                                                   const float* gate_logit, float* out, i64 n,
                                                   int hidden) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = routed[i] + tp_sigmoidf(gate_logit[i / hidden]) * __bfloat162float(shared[i]);
}

// out[i] = bf16(x[i]): the reduced f32 sum rounded once (four per thread where aligned).
extern "C" __global__ void round_f32_to_bf16(const float* x, bf16* out, i64 n) {
    const i64 quads = n / 4;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 q = (i64)blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
        const float4 v = reinterpret_cast<const float4*>(x)[q];
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
        __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 o;
        o.x = *reinterpret_cast<unsigned*>(&lo);
        o.y = *reinterpret_cast<unsigned*>(&hi);
        reinterpret_cast<uint2*>(out)[q] = o;
    }
    for (i64 i = quads * 4 + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __float2bfloat16(x[i]);
}
