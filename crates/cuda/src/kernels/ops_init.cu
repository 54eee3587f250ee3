// Synthetic weight draws on the device: element i (row-major) of a matrix is
// mean + std * normal(seed, i), where normal is headroom_core::ops::rng::normal
// (SplitMix64 of (seed, i), Box-Muller over its high and low 24-bit halves, in
// f32). The value depends only on (seed, i), never on the launch layout.

#include <cuda_bf16.h>

typedef unsigned long long u64;

__device__ __forceinline__ u64 mix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ float normal_of(u64 seed_mixed, u64 i) {
    const u64 r = mix64(seed_mixed ^ i);
    const float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = (float)(r & 0xFFFFFFull) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

// out[i] = bf16(mean + std * normal(seed, c(i))) for i < n; grid-stride. c(i) = i
// for a whole matrix (full_cols == 0); for a window of `cols` columns at
// (row0, col0) of a matrix of `full_cols` columns (a tensor-parallel shard),
// the element's position in that matrix: (row0 + i / cols) * full_cols + col0 + i % cols.
extern "C" __global__ void init_normal_bf16(__nv_bfloat16* out, u64 n, u64 seed, float mean,
                                            float std, u64 cols, u64 row0, u64 col0,
                                            u64 full_cols) {
    const u64 sm = mix64(seed);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 c = full_cols == 0 ? i : (row0 + i / cols) * full_cols + col0 + i % cols;
        out[i] = __float2bfloat16(mean + std * normal_of(sm, c));
    }
}
