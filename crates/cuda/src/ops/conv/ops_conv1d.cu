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
// kernel above is instruction bound at long prompts).
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

// The width-4 conv over 8 channels per thread (16-byte loads and stores) and
// a strip of `strip` rows (the host's choice, crates/cuda/src/ops/conv:
// 32, fewer when that would leave SMs idle), reading the sequence table directly (no per-row
// tables): cu[0..n] are the packed row offsets of the n sequences (cu[n] =
// rows), slots[i] the state slot of sequence i. Each strip finds its first
// row's sequence by binary search and walks across later sequence starts,
// reloading the window from that slot's state. Rows are loaded CONV8_AHEAD at
// a time before any is used, so several loads are in flight per thread (the
// one-channel strip kernel above has one 2-byte load in flight). Same math (f32,
// the same order of the four products) as the kernels above, but SiLU's
// division is __fdividef (within 2 ulp of f32; the output is bf16).
// Needs C % 8 == 0 (16-byte aligned rows). grid (ceil(C / 8 / blockDim.x),
// ceil(rows / strip)).
#define CONV8_AHEAD 8

__device__ __forceinline__ void unpack8(const uint4 u, float* f) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = __bfloat1622float2(p[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

extern "C" __global__ void conv1d_silu_k4x8_f32w(const bf16* __restrict__ x,
                                                 const float* __restrict__ w,
                                                 const bf16* __restrict__ state,
                                                 bf16* __restrict__ out,
                                                 const int* __restrict__ cu,
                                                 const int* __restrict__ slots, int n_seqs,
                                                 int C, int rows, int strip) {
    const int c8 = blockIdx.x * blockDim.x + threadIdx.x;  // group of 8 channels
    if (c8 * 8 >= C) return;
    const int t0 = blockIdx.y * strip;
    if (t0 >= rows) return;
    const int t1 = min(t0 + strip, rows);
    // Last sequence starting at or before t0 (empty sequences skipped: cu[seq + 1] > t0).
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= t0) lo = mid; else hi = mid - 1;
    }
    int seq = lo;
    int start = cu[seq], end = cu[seq + 1];
    float wt[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 v = reinterpret_cast<const float4*>(w)[c8 * 8 + i];
        wt[i][0] = v.x;
        wt[i][1] = v.y;
        wt[i][2] = v.z;
        wt[i][3] = v.w;
    }
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    uint4* o8 = reinterpret_cast<uint4*>(out);
    const int cw = C >> 3;  // uint4 per row
    // Window: inputs at t-3, t-2, t-1 for the next row t.
    float a[8], b[8], d[8];
    {
        // Row s of the window: from x inside the sequence, else from the state.
        const uint4* st = reinterpret_cast<const uint4*>(state + (i64)slots[seq] * 3 * C);
        const int s0 = t0 - 3, s1 = t0 - 2, s2 = t0 - 1;
        const uint4 u0 = s0 >= start ? x8[(i64)s0 * cw + c8] : st[(i64)(3 + (s0 - start)) * cw + c8];
        const uint4 u1 = s1 >= start ? x8[(i64)s1 * cw + c8] : st[(i64)(3 + (s1 - start)) * cw + c8];
        const uint4 u2 = s2 >= start ? x8[(i64)s2 * cw + c8] : st[(i64)(3 + (s2 - start)) * cw + c8];
        unpack8(u0, a);
        unpack8(u1, b);
        unpack8(u2, d);
    }
    for (int t = t0; t < t1; t += CONV8_AHEAD) {
        uint4 in[CONV8_AHEAD];
#pragma unroll
        for (int u = 0; u < CONV8_AHEAD; ++u)
            if (t + u < t1) in[u] = x8[(i64)(t + u) * cw + c8];
#pragma unroll
        for (int u = 0; u < CONV8_AHEAD; ++u) {
            const int tt = t + u;
            if (tt >= t1) break;
            if (tt == end) {
                // A new sequence starts here: its window comes from its slot's state.
                do { ++seq; } while (cu[seq + 1] <= tt);
                start = cu[seq];
                end = cu[seq + 1];
                const uint4* st = reinterpret_cast<const uint4*>(state + (i64)slots[seq] * 3 * C);
                unpack8(st[c8], a);
                unpack8(st[cw + c8], b);
                unpack8(st[2 * cw + c8], d);
            }
            float v[8];
            unpack8(in[u], v);
            __align__(16) __nv_bfloat162 res[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float r[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int ch = 2 * i + h;
                    const float acc =
                        wt[ch][0] * a[ch] + wt[ch][1] * b[ch] + wt[ch][2] * d[ch] + wt[ch][3] * v[ch];
                    // Fast division (2 ulp; the output is bf16): the IEEE one
                    // was a third of the kernel's instructions.
                    r[h] = __fdividef(acc, 1.0f + __expf(-acc));
                }
                res[i] = __floats2bfloat162_rn(r[0], r[1]);
            }
            o8[(i64)tt * cw + c8] = *reinterpret_cast<const uint4*>(res);
#pragma unroll
            for (int ch = 0; ch < 8; ++ch) {
                a[ch] = b[ch];
                b[ch] = d[ch];
                d[ch] = v[ch];
            }
        }
    }
}

// The state advance of the width-4 conv from the sequence table (as
// conv1d_silu_k4x8_f32w takes it), 8 channels a thread (16-byte loads and
// stores; C % 8 == 0): the three new rows are all loaded before any is
// stored (new row r reads old row r + len > r or an input row), so a thread
// has its three loads in flight at once (a one-channel form with three
// dependent 2-byte round trips took 27 µs a layer at W1's 354 sequences,
// ncu session 13). grid (ceil(C / 8 / blockDim.x), n_seqs).
extern "C" __global__ void conv_state_advance_cu_k4x8_bf16(const bf16* x, bf16* state, const int* cu,
                                                           const int* slots, int C) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    const int first = cu[blockIdx.y], len = cu[blockIdx.y + 1] - first;
    bf16* st = state + (i64)slots[blockIdx.y] * 3 * C;
    uint4 v[3];
#pragma unroll
    for (int r = 0; r < 3; ++r) {
        const int s = len - 3 + r;  // row of the sequence, < 0 = old state
        const bf16* src = s >= 0 ? x + ((i64)first + s) * C + c : st + (i64)(3 + s) * C + c;
        v[r] = *reinterpret_cast<const uint4*>(src);
    }
#pragma unroll
    for (int r = 0; r < 3; ++r) *reinterpret_cast<uint4*>(st + (i64)r * C + c) = v[r];
}
