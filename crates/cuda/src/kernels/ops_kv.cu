// KV cache writes and the token-major <-> head-major transposes around attention.
//   kv_write_bf16: rows of k, v [rows][kv_heads * D] go to the per-slot cache
//     [slots][kv_heads][capacity][D] at (row_slot[t], row_pos[t]); one CTA per row.
//   tokens_to_heads_bf16: x [t][H][D] -> out [H][t][D]; heads_to_tokens_bf16 the
//     inverse; grid (t, H), threads over D.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

extern "C" __global__ void kv_write_bf16(const bf16* k, const bf16* v, bf16* kc, bf16* vc,
                                         const int* row_slot, const int* row_pos, int kv_heads,
                                         int d, int capacity) {
    const i64 t = blockIdx.x;
    const i64 slot = row_slot[t], pos = row_pos[t];
    const int width = kv_heads * d;
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        const int h = j / d, e = j % d;
        const i64 dst = ((slot * kv_heads + h) * capacity + pos) * d + e;
        kc[dst] = k[t * width + j];
        vc[dst] = v[t * width + j];
    }
}

extern "C" __global__ void tokens_to_heads_bf16(const bf16* x, bf16* out, int t_len, int heads,
                                                int d) {
    const i64 t = blockIdx.x, h = blockIdx.y;
    const bf16* src = x + (t * heads + h) * d;
    bf16* dst = out + (h * t_len + t) * d;
    for (int e = threadIdx.x; e < d; e += blockDim.x) dst[e] = src[e];
}

extern "C" __global__ void heads_to_tokens_bf16(const bf16* x, bf16* out, int t_len, int heads,
                                                int d) {
    const i64 t = blockIdx.x, h = blockIdx.y;
    const bf16* src = x + (h * t_len + t) * d;
    bf16* dst = out + (t * heads + h) * d;
    for (int e = threadIdx.x; e < d; e += blockDim.x) dst[e] = src[e];
}
