// The Gated DeltaNet layer core for one-row sequences (decode), in one launch:
// causal conv1d (width 4) + SiLU with the conv-state advance, the gating
// (g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)), q/k L2 norms,
// the recurrent gated delta rule step, and the gated RMSNorm with z.
// What backend/conv.rs, dense.rs (gdn_gating), gdn.rs and norm.rs run as five
// launches, with the same math and the same bf16 rounding points: the conv
// output (ops_conv1d.cu's conv1d_silu_k4x8_f32w), the rule output
// (gdn_recurrent.cu) and the normed output (ops_norm.cu's group_norm16<1, true>);
// g and beta stay f32 as gdn_gating_bf16 (ops_pointwise.cu) stores them.
//
// One CTA per (value head h, sequence s); 16 warps: warp = (32-column block,
// key-dim quarter) of the recurrent kernel's layout, so each thread keeps 32
// state entries of one value column in registers. Every global input is
// loaded before any is used (one wait for memory per CTA).
//   mixed: bf16 [n][C] (in_proj_qkv rows, C = 2 hk DK + hv DV); z bf16 [n][hv DV];
//   a, b: bf16 [n][hv]; conv_w f32 [C][4]; a_log, dt_bias f32 [hv]; norm_w f32 [DV];
//   conv_state bf16 [slots][3][C]; state f32 [slots][hv][DK][DV];
//   tickets u32 [slots][hk] (zero between launches); out bf16 [n][hv DV].
// Sequence s is row row0 + s in slot tab.slot[s].
//
// The conv channels of value head h are its own; the q and k channels of key
// head kh are read by the hv / hk CTAs of its value heads, so the one that
// finishes reading last (a ticket per slot and key head: each CTA takes one
// after its reads, the one drawing hv / hk - 1 resets it) advances them.

#include <cuda_bf16.h>

namespace gdn_dec {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;
typedef long long i64;

constexpr int DK = 128;
constexpr int DV = 128;
constexpr int BV = 32;                      // value columns per warp (= lanes)
constexpr int PARTS = 4;                    // key-dim quarters
constexpr int ROWS = DK / PARTS;            // key rows per thread
constexpr int THREADS = (DV / BV) * PARTS * 32;
constexpr int MAX_SEQS = 512;               // sequences per launch (kernel parameter table)
constexpr float L2_EPS = 1e-6f;

struct SlotTable {
    int n;
    int slot[MAX_SEQS];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

extern "C" __global__ void __launch_bounds__(THREADS) gdn_decode_step_bf16(
    const bf16* __restrict__ mixed, const bf16* __restrict__ z, const bf16* __restrict__ b_in,
    const bf16* __restrict__ a_in, const float* __restrict__ conv_w,
    const float* __restrict__ a_log, const float* __restrict__ dt_bias,
    const float* __restrict__ norm_w, bf16* conv_state, float* __restrict__ state,
    unsigned* tickets, bf16* __restrict__ out, int hk, int hv, float eps, int row0,
    SlotTable tab) {
    __shared__ float xs[3 * DK];  // conv outputs of q, k (key head kh) and v (head h), bf16-rounded
    __shared__ float qn[DK], kn[DK];
    __shared__ float red[2][PARTS][DV];
    __shared__ float ob[DV];      // rule output, bf16-rounded
    __shared__ float gate[2];     // exp(g), beta
    __shared__ int advance_qk;    // this CTA advances the q/k conv channels
    wait_prior_then_release_next();

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.x, s = blockIdx.y;
    const int ratio = hv / hk, kh = h / ratio;
    const i64 row = (i64)row0 + s;
    const int slot = tab.slot[s];
    const i64 C = 2LL * hk * DK + (i64)hv * DV;

    // 0. Every global input is loaded up front, so the CTA waits for memory
    // once: this thread's 32 state values (the recurrent step's layout below),
    // its conv channel, the gating inputs, and (warp 0, lanes < 16) z.
    const int part = warp % PARTS;
    const int col = (warp / PARTS) * BV + lane;
    float* S = state + (((i64)slot * hv + h) * DK + part * ROWS) * DV + col;
    float sreg[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) sreg[r] = S[(i64)r * DV];
    uint4 zu = make_uint4(0u, 0u, 0u, 0u);
    const int l = lane & 15, c0 = l * 8;  // the norm's lane and first column
    if (warp == 0 && lane < 16)
        zu = *reinterpret_cast<const uint4*>(z + row * hv * DV + (i64)h * DV + c0);

    // 1. Conv + SiLU: thread t < 3 DK owns one channel (q, k of kh; v of h).
    bf16 keep[3];  // the channel's new state rows (old rows 1, 2 and the input)
    i64 ch = 0;
    bf16* st = conv_state + (i64)slot * 3 * C;
    if (tid < 3 * DK) {
        const int which = tid / DK, e = tid % DK;
        ch = which == 0 ? (i64)kh * DK + e
           : which == 1 ? (i64)hk * DK + (i64)kh * DK + e
                        : 2LL * hk * DK + (i64)h * DV + e;
        const bf16 r0 = st[ch], r1 = st[C + ch], r2 = st[2 * C + ch];
        const bf16 xin = mixed[row * C + ch];
        const float4 w = reinterpret_cast<const float4*>(conv_w)[ch];
        const float a = __bfloat162float(r0), b = __bfloat162float(r1),
                    d = __bfloat162float(r2), v = __bfloat162float(xin);
        const float acc = w.x * a + w.y * b + w.z * d + w.w * v;
        xs[tid] = __bfloat162float(__float2bfloat16(__fdividef(acc, 1.0f + __expf(-acc))));
        keep[0] = r1;
        keep[1] = r2;
        keep[2] = xin;
        if (which == 2 || ratio == 1) {  // channels only this CTA reads
            st[ch] = keep[0];
            st[C + ch] = keep[1];
            st[2 * C + ch] = keep[2];
        }
    } else if (tid == 3 * DK) {
        // 2. Gating (f32, as gdn_gating_bf16), then the rule's decay.
        const i64 i = row * hv + h;
        const float g = -expf(a_log[h]) * softplusf_(__bfloat162float(a_in[i]) + dt_bias[h]);
        gate[0] = __expf(g);
        gate[1] = sigmoidf_(__bfloat162float(b_in[i]));
    }
    __syncthreads();  // this CTA's reads of the old conv state are done (values used)

    // The ticket: issued now, its value first needed after the recurrent step
    // (the atomic's latency overlaps the work below). No fence is needed: the
    // reads it publishes have returned their values before the barrier above.
    unsigned ticket = 0;
    unsigned* tk = tickets + (i64)slot * hk + kh;
    if (tid == 0 && ratio > 1) ticket = atomicAdd(tk, 1u);

    // 3. q, k L2 norms (as gdn_recurrent.cu: lane = 4 consecutive values).
    if (warp < 2) {
        float x[4];
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            x[e] = xs[warp * DK + lane * 4 + e];
            ss += x[e] * x[e];
        }
        ss = warp_sum(ss);
        const float inv = rsqrtf(ss + L2_EPS) * (warp == 0 ? rsqrtf((float)DK) : 1.f);
        float* dst = warp == 0 ? qn : kn;
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[lane * 4 + e] = x[e] * inv;
    }
    __syncthreads();

    // 4. The recurrent step: warp = (column block, key quarter).
    const float decay = gate[0], beta = gate[1];
    const float v = xs[2 * DK + col];
    float kv = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        sreg[r] = sreg[r] * decay;
        kv += sreg[r] * kn[part * ROWS + r];
    }
    red[0][part][col] = kv;
    __syncthreads();
    kv = 0.f;
#pragma unroll
    for (int p = 0; p < PARTS; ++p) kv += red[0][p][col];
    const float delta = (v - kv) * beta;
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        sreg[r] += kn[part * ROWS + r] * delta;
        o += sreg[r] * qn[part * ROWS + r];
        S[(i64)r * DV] = sreg[r];
    }
    red[1][part][col] = o;
    if (tid == 0) {
        const bool last = ratio == 1 || ticket == (unsigned)(ratio - 1);
        if (ratio > 1 && last) atomicExch(tk, 0u);  // zero again for the next launch
        advance_qk = ratio > 1 && last;
    }
    __syncthreads();
    if (part == 0) {
        o = 0.f;
#pragma unroll
        for (int p = 0; p < PARTS; ++p) o += red[1][p][col];
        ob[col] = __bfloat162float(__float2bfloat16(o));
    }
    __syncthreads();
    // The last reader of the key head's q/k channels advances them.
    if (advance_qk && tid < 2 * DK) {
        st[ch] = keep[0];
        st[C + ch] = keep[1];
        st[2 * C + ch] = keep[2];
    }

    // 5. Gated RMSNorm over the head's DV outputs (as group_norm16<1, true>:
    // 16 lanes of 8 values; lanes 16-31 idle but in the shuffles).
    if (warp == 0) {
        const bool ok = lane < 16;
        float x[8], zv[8];
        float ss = 0.f;
        if (ok) {
            const bf162* zp = reinterpret_cast<const bf162*>(&zu);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __bfloat1622float2(zp[i]);
                zv[2 * i] = f.x;
                zv[2 * i + 1] = f.y;
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                x[i] = ob[c0 + i];
                ss += x[i] * x[i];
            }
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        const float inv = rsqrtf(ss / (float)DV + eps);
        if (ok) {
            uint4 u;
            bf162* op = reinterpret_cast<bf162*>(&u);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float r[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int k = 2 * i + j;
                    const float silu = zv[k] / (1.0f + expf(-zv[k]));
                    r[j] = norm_w[c0 + k] * (x[k] * inv) * silu;
                }
                op[i] = __floats2bfloat162_rn(r[0], r[1]);
            }
            *reinterpret_cast<uint4*>(out + row * hv * DV + (i64)h * DV + c0) = u;
        }
    }
}

}  // namespace gdn_dec
