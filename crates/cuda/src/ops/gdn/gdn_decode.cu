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
// One entry point, gdn_decode_step_bf16: grid (hv, n), one CTA per (value
// head h, sequence s) owning the head's f32 state [DK][DV], two CTAs per SM.
//
// A thread holds R rows x 4 consecutive columns of the state (16-byte loads
// and stores with streaming hints: the state is read once and written once).
// The step is computed in one pass over the state: with a = S^T k, b = S^T q
// of the undecayed state and d = exp(g),
//   delta = (v - d a) beta,   S' = d S + k delta^T,   o = S'^T q = d b + delta (k . q),
// so one reduction over the key rows gives both a and b.
//   mixed: bf16 [n][C] (in_proj_qkv rows, C = 2 hk DK + hv DV); z bf16 [n][hv DV];
//   a, b: bf16 [n][hv]; conv_w f32 [C][4]; a_log, dt_bias f32 [hv]; norm_w f32 [DV];
//   conv_state bf16 [slots][3][C]; state f32 [slots][hv][DK][DV];
//   tickets u32 [slots][hk] (zero between launches); out bf16 [n][hv DV].
// Sequence s is row row0 + s in slot tab.slot[s].
//
// The v conv channels of a CTA's head are its own; the q and k channels of
// key head kh are read by the hv / hk CTAs of its value heads, so the one
// that finishes reading last (a ticket per slot and key head: each CTA takes
// one after its reads, the one drawing the last resets it) advances them.

#include <cuda_bf16.h>

namespace gdn_dec {

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf162;
typedef long long i64;

constexpr int DK = 128;
constexpr int DV = 128;
constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
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

__device__ __forceinline__ float4 f4_fma(float4 s, float d, float k, float4 dl) {
    return make_float4(fmaf(k, dl.x, s.x * d), fmaf(k, dl.y, s.y * d), fmaf(k, dl.z, s.z * d),
                       fmaf(k, dl.w, s.w * d));
}

// The end of the conv-state advance, called by every thread of the CTA:
// thread 0 reads its ticket; the CTA that drew the last of `readers` zeroes
// the counter for the next launch and writes key head kh's q/k channels'
// new rows (`keep`) to the slot's conv state `st`.
__device__ __forceinline__ void advance_if_last(unsigned ticket, unsigned* tk, int readers,
                                                bf16* st, i64 C, int hk, int kh,
                                                const bf16 (*keep)[2 * DK]) {
    if (readers == 1) return;  // the CTA advanced them after its reads
    __shared__ int last;
    const int tid = threadIdx.x;
    if (tid == 0) {
        last = ticket == (unsigned)(readers - 1);
        if (last) atomicExch(tk, 0u);
    }
    __syncthreads();
    if (last && tid < 2 * DK) {
        const i64 ch = tid < DK ? (i64)kh * DK + tid : (i64)hk * DK + (i64)kh * DK + (tid - DK);
        st[ch] = keep[0][tid];
        st[C + ch] = keep[1][tid];
        st[2 * C + ch] = keep[2][tid];
    }
}

__device__ __forceinline__ void step(
    const bf16* __restrict__ mixed, const bf16* __restrict__ z, const bf16* __restrict__ b_in,
    const bf16* __restrict__ a_in, const float* __restrict__ conv_w,
    const float* __restrict__ a_log, const float* __restrict__ dt_bias,
    const float* __restrict__ norm_w, bf16* conv_state, float* __restrict__ state,
    unsigned* tickets, bf16* __restrict__ out, int hk, int hv, float eps, int row0,
    const SlotTable& tab) {
    constexpr int CW = DV;               // value columns of this CTA: the whole head
    constexpr int CG = CW / 4;           // 4-column groups
    constexpr int RG = THREADS / CG;     // row groups
    constexpr int R = DK / RG;           // rows per thread
    constexpr int WARP_RG = 32 / CG;     // row groups per warp
    constexpr int NCH = 2 * DK + CW;     // conv channels read: q, k, the head's v
    constexpr int NORM_WARP = WARPS - 1; // lanes < CW / 4 own 4 output columns each
    static_assert(NCH < NORM_WARP * 32, "conv, gating and norm threads apart");
    static_assert(R * RG == DK && CG * 4 == CW && WARP_RG * CG == 32, "thread layout");

    __shared__ float xs[NCH];  // conv outputs (q, k of kh; v of the head), bf16-rounded
    __shared__ float qn[DK], kn[DK];
    __shared__ float red[2][WARPS][CW];  // per-warp partial S^T k, S^T q
    __shared__ __align__(16) float dl[CW];  // delta per column (read as float4)
    __shared__ float ob[CW];             // rule output, bf16-rounded
    __shared__ float gate[2];            // exp(g), beta
    __shared__ float qk[3];              // q scale, k scale (inverse norms), raw q . k
    __shared__ bf16 keep[3][2 * DK];     // the q/k channels' new conv state rows

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.x;
    const int s = blockIdx.y, slot = tab.slot[s];
    const int ratio = hv / hk, kh = h / ratio;
    const int readers = ratio;  // CTAs reading key head kh's q/k channels
    const i64 row = (i64)row0 + s;
    const i64 C = 2LL * hk * DK + (i64)hv * DV;

    // 0. Every global input is loaded up front, so the CTA waits for memory
    // once. Before the wait for the previous kernel: what no kernel of this
    // step writes — this thread's R x 4 state values and its conv channel's
    // old rows (a decode row's slot was last written by this layer in the
    // previous step, which ended with the host's read-back of its tokens;
    // launches of one call take distinct slots) — so
    // the state's 64 KiB stream overlaps the previous kernel's tail. After
    // it: the rows the previous kernels wrote (mixed, z, a, b).
    const int cg = lane % CG, rg = warp * WARP_RG + lane / CG;
    float4* S = reinterpret_cast<float4*>(
        state + (((i64)slot * hv + h) * DK + (i64)rg * R) * DV + cg * 4);
    float4 sreg[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sreg[r] = __ldcs(S + (i64)r * (DV / 4));
    bf16* st = conv_state + (i64)slot * 3 * C;
    const i64 ch = tid < DK       ? (i64)kh * DK + tid
                   : tid < 2 * DK ? (i64)hk * DK + (i64)kh * DK + (tid - DK)
                                  : 2LL * hk * DK + (i64)h * DV + (tid - 2 * DK);
    bf16 r0, r1, r2;
    if (tid < NCH) {
        r0 = st[ch];
        r1 = st[C + ch];
        r2 = st[2 * C + ch];
    }
    wait_prior_then_release_next();
    const bool norm_lane = warp == NORM_WARP && lane < CW / 4;
    const int oc = lane * 4;  // the norm lane's first column in the head
    uint2 zu = make_uint2(0u, 0u);
    if (norm_lane) zu = *reinterpret_cast<const uint2*>(z + row * hv * DV + (i64)h * DV + oc);

    // 1. Conv + SiLU: thread t < NCH owns one channel; its new state rows
    // are the old rows 1, 2 and the input.
    if (tid < NCH) {
        const bf16 xin = mixed[row * C + ch];
        const float4 w = reinterpret_cast<const float4*>(conv_w)[ch];
        const float a = __bfloat162float(r0), b = __bfloat162float(r1),
                    d = __bfloat162float(r2), v = __bfloat162float(xin);
        const float acc = w.x * a + w.y * b + w.z * d + w.w * v;
        xs[tid] = __bfloat162float(__float2bfloat16(__fdividef(acc, 1.0f + __expf(-acc))));
        if (tid >= 2 * DK || readers == 1) {  // channels only this CTA reads
            st[ch] = r1;
            st[C + ch] = r2;
            st[2 * C + ch] = xin;
        } else {
            keep[0][tid] = r1;
            keep[1][tid] = r2;
            keep[2][tid] = xin;
        }
    } else if (tid == NCH) {
        // 2. Gating (f32, as gdn_gating_bf16), then the rule's decay.
        const i64 i = row * hv + h;
        const float g = -expf(a_log[h]) * softplusf_(__bfloat162float(a_in[i]) + dt_bias[h]);
        gate[0] = __expf(g);
        gate[1] = sigmoidf_(__bfloat162float(b_in[i]));
    }
    __syncthreads();  // this CTA's reads of the old conv state are done (values used)

    // The ticket: issued now, its value first needed in advance_if_last. No
    // fence is needed: the reads it publishes have returned their values
    // before the barrier above.
    unsigned ticket = 0;
    unsigned* tk = tickets + (i64)slot * hk + kh;
    if (tid == 0 && readers > 1) ticket = atomicAdd(tk, 1u);

    // 3. q, k L2 norms (as gdn_recurrent.cu: lane = 4 consecutive values);
    // warp 2 takes the raw q . k (scaled by both norms below).
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
        if (lane == 0) qk[warp] = inv;
    } else if (warp == 2) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) dot += xs[lane * 4 + e] * xs[DK + lane * 4 + e];
        dot = warp_sum(dot);
        if (lane == 0) qk[2] = dot;
    }
    __syncthreads();

    // 4. a = S^T k and b = S^T q over this thread's rows, reduced over the
    // row groups of the warp (shuffles), then of the CTA (shared memory).
    float ka[R], qa[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        ka[r] = kn[rg * R + r];
        qa[r] = qn[rg * R + r];
    }
    float a4[4] = {0.f, 0.f, 0.f, 0.f}, b4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float sv[4] = {sreg[r].x, sreg[r].y, sreg[r].z, sreg[r].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            a4[j] = fmaf(sv[j], ka[r], a4[j]);
            b4[j] = fmaf(sv[j], qa[r], b4[j]);
        }
    }
#pragma unroll
    for (int o = CG; o < 32; o <<= 1) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            a4[j] += __shfl_xor_sync(0xffffffffu, a4[j], o);
            b4[j] += __shfl_xor_sync(0xffffffffu, b4[j], o);
        }
    }
    if (lane < CG) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            red[0][warp][cg * 4 + j] = a4[j];
            red[1][warp][cg * 4 + j] = b4[j];
        }
    }
    __syncthreads();

    // 5. Per column: delta and the rule output.
    const float decay = gate[0];
    if (tid < CW) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            a += red[0][w][tid];
            b += red[1][w][tid];
        }
        const float kq = qk[2] * qk[0] * qk[1];
        const float delta = (xs[2 * DK + tid] - decay * a) * gate[1];
        dl[tid] = delta;
        ob[tid] = __bfloat162float(__float2bfloat16(fmaf(delta, kq, decay * b)));
    }
    __syncthreads();

    // 6. The new state: S' = d S + k delta^T.
    const float4 d4 = *reinterpret_cast<const float4*>(&dl[cg * 4]);
#pragma unroll
    for (int r = 0; r < R; ++r) __stcs(S + (i64)r * (DV / 4), f4_fma(sreg[r], decay, ka[r], d4));

    advance_if_last(ticket, tk, readers, st, C, hk, kh, keep);

    // 7. Gated RMSNorm over the head's DV outputs (as group_norm16<1, true>).
    float x[4] = {0.f, 0.f, 0.f, 0.f};
    float ss = 0.f;
    if (warp == NORM_WARP) {
        if (norm_lane) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                x[j] = ob[lane * 4 + j];
                ss += x[j] * x[j];
            }
        }
        ss = warp_sum(ss);
    }
    if (norm_lane) {
        // The norm weights (the same for every CTA: L2 hits) read where used.
        const float4 nw = *reinterpret_cast<const float4*>(norm_w + oc);
        const float inv = rsqrtf(ss / (float)DV + eps);
        const bf162* zp = reinterpret_cast<const bf162*>(&zu);
        const float2 z01 = __bfloat1622float2(zp[0]), z23 = __bfloat1622float2(zp[1]);
        const float zv[4] = {z01.x, z01.y, z23.x, z23.y};
        const float wv[4] = {nw.x, nw.y, nw.z, nw.w};
        float r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float silu = zv[j] / (1.0f + expf(-zv[j]));
            r[j] = wv[j] * (x[j] * inv) * silu;
        }
        uint2 u;
        bf162* op = reinterpret_cast<bf162*>(&u);
        op[0] = __floats2bfloat162_rn(r[0], r[1]);
        op[1] = __floats2bfloat162_rn(r[2], r[3]);
        *reinterpret_cast<uint2*>(out + row * hv * DV + (i64)h * DV + oc) = u;
    }
}

}  // namespace gdn_dec

extern "C" __global__ void __launch_bounds__(gdn_dec::THREADS, 2)
    gdn_decode_step_bf16(const gdn_dec::bf16* __restrict__ mixed, const gdn_dec::bf16* __restrict__ z,
                         const gdn_dec::bf16* __restrict__ b_in, const gdn_dec::bf16* __restrict__ a_in,
                         const float* __restrict__ conv_w, const float* __restrict__ a_log,
                         const float* __restrict__ dt_bias, const float* __restrict__ norm_w,
                         gdn_dec::bf16* conv_state, float* __restrict__ state, unsigned* tickets,
                         gdn_dec::bf16* __restrict__ out, int hk, int hv, float eps, int row0,
                         gdn_dec::SlotTable tab) {
    gdn_dec::step(mixed, z, b_in, a_in, conv_w, a_log, dt_bias, norm_w, conv_state, state, tickets,
                  out, hk, hv, eps, row0, tab);
}
