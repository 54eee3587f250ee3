// Partial rotary embedding, transformers' rotate_half convention, in place on
// bf16 x [rows][heads * head_dim]. Row r sits at its sequence's position; dim i < half of
// the rotary part pairs with i + half, angle = (float)pos * inv_freq[i] in f32
// (as transformers computes it); dims >= rotary_dim pass through untouched.
// One CTA per row; threads loop over (head, i).

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

// Each row's position comes from the sequence table (as kv_write_seq_v8_bf16
// takes it: seq[0..n] row offsets, seq[2n + 1 + i] the history of sequence i).
extern "C" __global__ void rope_seq_bf16(bf16* x, const int* seq, int n, const float* inv_freq,
                                         int heads, int head_dim, int rotary_dim) {
    const int t = blockIdx.x;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (seq[mid] <= t) lo = mid; else hi = mid - 1;
    }
    const int half = rotary_dim / 2;
    bf16* row = x + (i64)t * heads * head_dim;
    const float pos = (float)(seq[2 * n + 1 + lo] + (t - seq[lo]));
    for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        const float angle = pos * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        bf16* head = row + h * head_dim;
        const float x1 = __bfloat162float(head[i]);
        const float x2 = __bfloat162float(head[i + half]);
        head[i] = __float2bfloat16(x1 * c - x2 * s);
        head[i + half] = __float2bfloat16(x2 * c + x1 * s);
    }
}
