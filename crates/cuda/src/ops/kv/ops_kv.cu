// KV cache writes, the paged-KV gather and the token-major <-> head-major
// transposes around attention. The KV cache is a block pool
// [blocks][kv_heads][KV_ROWS][D]: token p of a sequence is row p % KV_ROWS of
// block table[p / KV_ROWS].
//   kv_write_bf16: rows of k, v [rows][kv_heads * D] go to row row_off[t] of
//     block row_block[t]; one CTA per row.
//   tokens_to_heads_bf16: x [t][H][D] -> out [H][t][D]; heads_to_tokens_bf16 the
//     inverse; grid (t, H), threads over D.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

constexpr int KV_ROWS = 64;  // token rows per KV block (headroom_core::ops::KV_BLOCK_ROWS)

extern "C" __global__ void kv_write_bf16(const bf16* k, const bf16* v, bf16* kc, bf16* vc,
                                         const int* row_block, const int* row_off, int kv_heads,
                                         int d) {
    const i64 t = blockIdx.x;
    const i64 blk = row_block[t], r = row_off[t];
    const int width = kv_heads * d;
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        const int h = j / d, e = j % d;
        const i64 dst = ((blk * kv_heads + h) * KV_ROWS + r) * d + e;
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

// The transposes 8 values (16 bytes) per thread, for d % 8 == 0: grid
// (ceil(t * d / 8 / blockDim.x), H); thread j of head h moves chunk e = j % (d / 8)
// of token t = j / (d / 8). The head-major side is contiguous per head, the
// token-major side in runs of d values (the one-value-per-thread kernels above
// move 2 bytes per thread: ≈ 0.5 ms each way for 32k x 16 x 256).
// heads_to_tokens_gated_v8_bf16 also applies the attention output gate:
//   out[t][h][:] = bf16(x[h][t][:] * sigmoid(gate[t][h][:]))  (gate token-major).
__device__ __forceinline__ uint4 gate8(const uint4 xv, const uint4 gv) {
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);
    const __nv_bfloat162* gp = reinterpret_cast<const __nv_bfloat162*>(&gv);
    uint4 o;
    __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 a = __bfloat1622float2(xp[i]);
        const float2 g = __bfloat1622float2(gp[i]);
        op[i] = __floats2bfloat162_rn(a.x * (1.0f / (1.0f + expf(-g.x))),
                                      a.y * (1.0f / (1.0f + expf(-g.y))));
    }
    return o;
}

extern "C" __global__ void tokens_to_heads_v8_bf16(const bf16* x, bf16* out, int t_len, int heads,
                                                   int d) {
    const int cw = d >> 3;
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (i64)t_len * cw) return;
    const i64 h = blockIdx.y, t = j / cw, e = j % cw;
    const uint4 v = reinterpret_cast<const uint4*>(x)[(t * heads + h) * cw + e];
    reinterpret_cast<uint4*>(out)[h * t_len * cw + j] = v;
}

extern "C" __global__ void heads_to_tokens_v8_bf16(const bf16* x, bf16* out, int t_len, int heads,
                                                   int d) {
    const int cw = d >> 3;
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (i64)t_len * cw) return;
    const i64 h = blockIdx.y, t = j / cw, e = j % cw;
    const uint4 v = reinterpret_cast<const uint4*>(x)[h * t_len * cw + j];
    reinterpret_cast<uint4*>(out)[(t * heads + h) * cw + e] = v;
}

extern "C" __global__ void heads_to_tokens_gated_v8_bf16(const bf16* x, const bf16* gate, bf16* out,
                                                         int t_len, int heads, int d) {
    const int cw = d >> 3;
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (i64)t_len * cw) return;
    const i64 h = blockIdx.y, t = j / cw, e = j % cw;
    const i64 at = (t * heads + h) * cw + e;
    const uint4 v = reinterpret_cast<const uint4*>(x)[h * t_len * cw + j];
    const uint4 g = reinterpret_cast<const uint4*>(gate)[at];
    reinterpret_cast<uint4*>(out)[at] = gate8(v, g);
}

// kv_write from the sequence table instead of per-row tables, 16 bytes per
// thread (d % 8 == 0): seq[0..n] the packed row offsets (seq[n] = rows),
// seq[n + 1 + i] the slot of sequence i, seq[2n + 1 + i] its history (the
// position of its first row); bt[0..n] the block-table starts of the
// sequences, bt[n + 1 + bt[i] + j] block j of sequence i. One CTA per row;
// grid (rows).
__device__ __forceinline__ int seq_of_row(const int* cu, int n, int t) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

extern "C" __global__ void kv_write_seq_v8_bf16(const bf16* k, const bf16* v, bf16* kc, bf16* vc,
                                                const int* seq, const int* bt, int n,
                                                int kv_heads, int d) {
    const int t = blockIdx.x;
    const int i = seq_of_row(seq, n, t);
    const int pos = seq[2 * n + 1 + i] + (t - seq[i]);
    const i64 blk = bt[n + 1 + bt[i] + pos / KV_ROWS];
    const int r = pos % KV_ROWS;
    const int cw = d >> 3, width = kv_heads * cw;
    const uint4* k8 = reinterpret_cast<const uint4*>(k) + (i64)t * width;
    const uint4* v8 = reinterpret_cast<const uint4*>(v) + (i64)t * width;
    uint4* kc8 = reinterpret_cast<uint4*>(kc);
    uint4* vc8 = reinterpret_cast<uint4*>(vc);
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        const int h = j / cw, e = j - h * cw;
        const i64 dst = ((blk * kv_heads + h) * KV_ROWS + r) * cw + e;
        kc8[dst] = k8[j];
        vc8[dst] = v8[j];
    }
}

// Gathers sequences' keys and values from the block pool into a contiguous
// workspace, head-major per sequence: sequence i's K (and V) are
// [kv_heads][kv_len_i][D] at element cu[i] * kv_heads * D of kw (vw), where
// cu[0..n] are the prefix sums of the kv lengths (cu[n] = all rows). The
// block tables follow: bt[0..n] their starts, bt[n + 1 + bt[i] + j] block j
// of sequence i. One CTA per (key row, kv head); grid (cu[n], kv_heads).
// 16 bytes a thread when d % 8 == 0, else 2.
extern "C" __global__ void kv_gather_bf16(const bf16* kc, const bf16* vc, bf16* kw, bf16* vw,
                                          const int* cu, const int* bt, int n, int kv_heads,
                                          int d) {
    const int t = blockIdx.x, h = blockIdx.y;
    const int i = seq_of_row(cu, n, t);
    const int p = t - cu[i];
    const i64 len = cu[i + 1] - cu[i];
    const i64 blk = bt[n + 1 + bt[i] + p / KV_ROWS];
    const i64 src = ((blk * kv_heads + h) * KV_ROWS + p % KV_ROWS) * d;
    const i64 dst = (i64)cu[i] * kv_heads * d + ((i64)h * len + p) * d;
    if ((d & 7) == 0) {
        const uint4* ks = reinterpret_cast<const uint4*>(kc + src);
        const uint4* vs = reinterpret_cast<const uint4*>(vc + src);
        uint4* kd = reinterpret_cast<uint4*>(kw + dst);
        uint4* vd = reinterpret_cast<uint4*>(vw + dst);
        for (int e = threadIdx.x; e < (d >> 3); e += blockDim.x) {
            kd[e] = ks[e];
            vd[e] = vs[e];
        }
    } else {
        for (int e = threadIdx.x; e < d; e += blockDim.x) {
            kw[dst + e] = kc[src + e];
            vw[dst + e] = vc[src + e];
        }
    }
}
