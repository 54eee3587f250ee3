// Causal depthwise conv1d + SiLU over packed varlen rows with per-slot state
// (transformers' causal_conv1d_fn / causal_conv1d_update, no bias).
//   x, out: bf16 [rows][C]; weight [C][K] (f32 or bf16); state: bf16
//   [slots][K-1][C], the last K-1 input rows each slot has seen (zeros at first).
// conv1d_silu_*: out[t][c] = silu(sum_j w[c][j] * in(t - (K-1) + j)), where rows
//   before the sequence's first come from its slot's state (f32 math).
// conv_state_advance_bf16: then each sequence's state becomes the last K-1 rows
//   of concat(state, its rows). Run after the conv (stream order).

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }

// grid (rows, ceil(C / blockDim.x)); row_start[t] = first row of t's sequence,
// row_slot[t] = its slot.
template <typename W>
__device__ void conv1d_silu(const bf16* x, const W* w, const bf16* state, bf16* out,
                            const int* row_start, const int* row_slot, int C, int K) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const i64 t = blockIdx.x;
    const i64 start = row_start[t];
    const bf16* st = state + (i64)row_slot[t] * (K - 1) * C;
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
        const i64 s = t - (K - 1) + j;  // absolute packed row
        float v;
        if (s >= start) {
            v = __bfloat162float(x[s * C + c]);
        } else {
            const i64 r = (K - 1) + (s - start);  // row of the state, >= 0
            v = __bfloat162float(st[r * C + c]);
        }
        acc += to_f(w[(i64)c * K + j]) * v;
    }
    out[t * C + c] = __float2bfloat16(acc / (1.0f + expf(-acc)));
}

// The same conv for kernel width 4 (Qwen3.5/3.6), a strip of CONV_STRIP rows
// per thread: the weights stay in registers and the previous three inputs in
// a sliding window, so each input row is loaded once per strip (the one-row
// kernel above was instruction bound: 2.8 ms for 32k x 8192 on the H200).
// grid (ceil(C / blockDim.x), ceil(rows / CONV_STRIP)).
#define CONV_STRIP 32
extern "C" __global__ void conv1d_silu_k4_f32w(const bf16* __restrict__ x,
                                               const float* __restrict__ w,
                                               const bf16* __restrict__ state,
                                               bf16* __restrict__ out,
                                               const int* __restrict__ row_start,
                                               const int* __restrict__ row_slot, int C,
                                               int rows) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int t0 = blockIdx.y * CONV_STRIP;
    const int t1 = min(t0 + CONV_STRIP, rows);
    const float4 wc = reinterpret_cast<const float4*>(w)[c];
    float a = 0.f, b = 0.f, d = 0.f;  // inputs at t-3, t-2, t-1
    int cur_start = -1;
    for (int t = t0; t < t1; ++t) {
        const int start = row_start[t];
        if (start != cur_start || t == t0) {
            // (Re)load the window for row t: rows before `start` from the slot's state.
            const bf16* st = state + (i64)row_slot[t] * 3 * C;
            float win[3];
#pragma unroll
            for (int j = 0; j < 3; ++j) {
                const int s = t - 3 + j;
                win[j] = s >= start ? __bfloat162float(x[(i64)s * C + c])
                                    : __bfloat162float(st[(i64)(3 + (s - start)) * C + c]);
            }
            a = win[0];
            b = win[1];
            d = win[2];
            cur_start = start;
        }
        const float v = __bfloat162float(x[(i64)t * C + c]);
        const float acc = wc.x * a + wc.y * b + wc.z * d + wc.w * v;
        out[(i64)t * C + c] = __float2bfloat16(acc / (1.0f + __expf(-acc)));
        a = b;
        b = d;
        d = v;
    }
}

extern "C" __global__ void conv1d_silu_f32w(const bf16* x, const float* w, const bf16* state,
                                            bf16* out, const int* row_start, const int* row_slot,
                                            int C, int K) {
    conv1d_silu<float>(x, w, state, out, row_start, row_slot, C, K);
}

extern "C" __global__ void conv1d_silu_bf16w(const bf16* x, const bf16* w, const bf16* state,
                                             bf16* out, const int* row_start, const int* row_slot,
                                             int C, int K) {
    conv1d_silu<bf16>(x, w, state, out, row_start, row_slot, C, K);
}

// grid (ceil(C / blockDim.x), sequences); seqs[3 i .. 3 i + 3] = (slot, first row, rows).
// Each thread owns one channel and writes state rows in increasing order: new
// row r reads old row r + len (> r) or an input row, never a row already rewritten.
extern "C" __global__ void conv_state_advance_bf16(const bf16* x, bf16* state, const int* seqs,
                                                   int C, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int slot = seqs[3 * blockIdx.y], first = seqs[3 * blockIdx.y + 1],
              len = seqs[3 * blockIdx.y + 2];
    bf16* st = state + (i64)slot * (K - 1) * C;
    for (int r = 0; r < K - 1; ++r) {
        const int s = len - (K - 1) + r;  // row of the sequence, < 0 = old state
        st[(i64)r * C + c] = s >= 0 ? x[((i64)first + s) * C + c] : st[(i64)(K - 1 + s) * C + c];
    }
}
