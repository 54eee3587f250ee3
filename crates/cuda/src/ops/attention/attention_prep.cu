// A full-attention layer's prep for one-row sequences (decode), in one launch:
// the zero-centred per-head RMSNorm of q and k (x / sqrt(mean(x^2) + eps) * (1 + w)),
// partial RoPE (rotate_half) at each sequence's position, and the KV write of
// k and v into the slot's cache at that position. What backend/norm.rs,
// rope.rs and kv.rs run as five launches, with the same math and rounding:
// the normed values rounded to bf16 (ops_norm.cu's group_norm16<2, false>,
// same lanes and summation order), then RoPE on them rounded again
// (ops_rope.cu's rope_seq_bf16, angle = (float)pos * inv_freq[i] in f32).
//
// One warp per (head, sequence): grid (heads + kv_heads, n); heads < `heads`
// are q's, the rest k's (which also copy v's head to the cache).
//   q bf16 [n][heads D], k, v bf16 [n][kv_heads D] (q, k normed and rotated in
//   place); kc, vc the KV block pool bf16 [blocks][kv_heads][KV_ROWS][D];
//   D % 8 == 0, D <= 256.
// Sequence s is row s at position tab.pos[s]; its new row goes to row
// tab.pos[s] % KV_ROWS of block tab.block[s] (the host read it from the
// sequence's block table).

#include <cuda_bf16.h>

namespace attn_prep {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;
typedef long long i64;

constexpr int MAX_D = 256;
constexpr int MAX_FREQ = MAX_D / 2;
constexpr int MAX_SEQS = 256;     // sequences per launch (kernel parameter table)
constexpr int KV_ROWS = 64;       // token rows per KV block

struct PrepTable {
    float inv_freq[MAX_FREQ];      // theta^(-2i / rotary_dim), from the host (as rope.rs)
    int block[MAX_SEQS];
    int pos[MAX_SEQS];
};

extern "C" __global__ void __launch_bounds__(32) attention_prep_decode_bf16(
    bf16* __restrict__ q, bf16* __restrict__ k, const bf16* __restrict__ v,
    const float* __restrict__ q_norm, const float* __restrict__ k_norm, bf16* __restrict__ kc,
    bf16* __restrict__ vc, int heads, int kv_heads, int d, int rotary_dim,
    float eps, PrepTable tab) {
    __shared__ float hs[MAX_D];
    wait_prior_then_release_next();
    const int lane = threadIdx.x;
    const int hh = blockIdx.x, s = blockIdx.y;
    const bool is_q = hh < heads;
    const int h = is_q ? hh : hh - heads;
    bf16* x = is_q ? q + ((i64)s * heads + h) * d : k + ((i64)s * kv_heads + h) * d;
    const float* w = is_q ? q_norm : k_norm;

    // The norm: 16 lanes of 8 values, two chunks (group_norm16<2, false>).
    const int l = lane & 15;
    const bool ok = lane < 16;
    float val[2][8];
    float ss = 0.f;
#pragma unroll
    for (int c8 = 0; c8 < 2; ++c8) {
        const int c = (l + 16 * c8) * 8;
        if (ok && c < d) {
            load8(x + c, val[c8]);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss += val[c8][i] * val[c8][i];
        }
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / (float)d + eps);
#pragma unroll
    for (int c8 = 0; c8 < 2; ++c8) {
        const int c = (l + 16 * c8) * 8;
        if (ok && c < d) {
#pragma unroll
            for (int i = 0; i < 8; ++i)
                hs[c + i] = __bfloat162float(__float2bfloat16(val[c8][i] * inv * (1.0f + w[c + i])));
        }
    }
    __syncwarp();

    // RoPE on the rounded normed values (rope_seq_bf16).
    const int half = rotary_dim / 2;
    const float pos = (float)tab.pos[s];
    for (int i = lane; i < half; i += 32) {
        const float angle = pos * tab.inv_freq[i];
        float sn, cs;
        sincosf(angle, &sn, &cs);
        const float x1 = hs[i], x2 = hs[i + half];
        hs[i] = __bfloat162float(__float2bfloat16(x1 * cs - x2 * sn));
        hs[i + half] = __bfloat162float(__float2bfloat16(x2 * cs + x1 * sn));
    }
    __syncwarp();

    // Store back (8 values a lane) and, for k, into the cache with v.
    const i64 blk = tab.block[s];
    const i64 dst = ((blk * kv_heads + h) * KV_ROWS + tab.pos[s] % KV_ROWS) * d;
    for (int c = lane * 8; c < d; c += 32 * 8) {
        uint4 u;
        bf162* p = reinterpret_cast<bf162*>(&u);
#pragma unroll
        for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(hs[c + 2 * i], hs[c + 2 * i + 1]);
        *reinterpret_cast<uint4*>(x + c) = u;
        if (!is_q) {
            *reinterpret_cast<uint4*>(kc + dst + c) = u;
            *reinterpret_cast<uint4*>(vc + dst + c) =
                *reinterpret_cast<const uint4*>(v + ((i64)s * kv_heads + h) * d + c);
        }
    }
}

}  // namespace attn_prep
