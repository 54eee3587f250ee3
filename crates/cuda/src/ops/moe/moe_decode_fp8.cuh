// The FP8 weight format of the MoE decode kernels (moe_decode.cu, which
// follows this file in the program): block-scaled e4m3, W [n][k] one byte an
// element, f32 scale_inv [ceil(n/128)][ceil(k/128)], real weight W[n][k] *
// scale_inv[n/128][k/128] (crates/cuda/src/ops/fp8/mod.rs). A chunk is 16
// e4m3 (one 16-byte load) at a multiple of 16 columns, so it never straddles
// a 128-column block: its 16 products are summed in f32 and the sum is
// multiplied by its block's scale (loaded beside the chunk, through L1: a
// warp's chunks share a few scales). e4m3 -> f32 by integer ops, times
// 2^-120 (e4m3.cuh), a chunk's sum then times 2^120, as fp8_gemv.cu. Needs
// k (hidden, intermediates) a multiple of 16.

namespace headroom_moe_decode {

// 16-byte chunks of one pass of a hidden-length dot (KSPAN = 2048 elements,
// as the bf16 format's 8 chunks of 8) and of the down kernel's
// intermediate-length dot (DSPAN = 512, as bf16's 2 chunks of 8).
constexpr int F8_KCH = 4;
constexpr int F8_DCH = 1;

// One e4m3 weight row: its bytes and its block row of scales.
struct Fp8Row {
    const unsigned char* w;
    const float* s;
};

// The chunks (and their scales) of one pass of this lane's share of a dot.
template <int N>
struct Fp8Pass {
    uint4 v[N];
    float s[N];
};

// 16 e4m3 weights at p when ok, else zeros; the load always goes out (to
// `safe` when not ok), evict-first in L2 (`pol`), as load8w.
__device__ __forceinline__ uint4 load16w_fp8(const unsigned char* p, const void* safe, bool ok,
                                             unsigned long long pol) {
    uint4 v;
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ok ? static_cast<const void*>(p) : safe), "l"(pol));
    return ok ? v : make_uint4(0u, 0u, 0u, 0u);
}

using headroom_e4m3::e4m3_scaled;
using headroom_e4m3::E4M3_UNSCALE;

// sum over 16 e4m3 of v times x (16 bf16 in shared memory, 32-byte aligned).
__device__ __forceinline__ float fp8_dot16_bf16(const uint4& v, const bf16* x) {
    const uint4 xa = *reinterpret_cast<const uint4*>(x);
    const uint4 xb = *reinterpret_cast<const uint4*>(x + 8);
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    const unsigned xx[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        // bf16 pair j of x: elements 2j (low half) and 2j + 1.
        const float x0 = __uint_as_float(xx[j] << 16), x1 = __uint_as_float(xx[j] & 0xffff0000u);
        const unsigned wj = w[j / 2];
        const float w0 = j % 2 ? e4m3_scaled<2>(wj) : e4m3_scaled<0>(wj);
        const float w1 = j % 2 ? e4m3_scaled<3>(wj) : e4m3_scaled<1>(wj);
        if (j < 4) {
            s0 = fmaf(w0, x0, s0);
            s0 = fmaf(w1, x1, s0);
        } else {
            s1 = fmaf(w0, x0, s1);
            s1 = fmaf(w1, x1, s1);
        }
    }
    return (s0 + s1) * E4M3_UNSCALE;
}

// sum over 16 e4m3 of v times a (16 f32 in shared memory, 16-byte aligned).
__device__ __forceinline__ float fp8_dot16_f32(const uint4& v, const float* a) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 aq = *reinterpret_cast<const float4*>(a + 4 * q);
        float& s = q < 2 ? s0 : s1;
        s = fmaf(e4m3_scaled<0>(w[q]), aq.x, s);
        s = fmaf(e4m3_scaled<1>(w[q]), aq.y, s);
        s = fmaf(e4m3_scaled<2>(w[q]), aq.z, s);
        s = fmaf(e4m3_scaled<3>(w[q]), aq.w, s);
    }
    return (s0 + s1) * E4M3_UNSCALE;
}

// The scale of the chunk at column k of a row (0 <= k < its length), or
// of column 0 when not ok (the load still in bounds).
__device__ __forceinline__ float chunk_scale(const float* srow, int k, bool ok) {
    return __ldg(srow + (ok ? k >> 7 : 0));
}

// One pass (F8_KCH * 32 * 16 = KSPAN elements from base) of this lane's
// share of a dot over hidden: chunks of row r, zeros past hidden.
__device__ __forceinline__ void fp8_load_pass(const Fp8Row& r, int base, int hidden, int lane,
                                              unsigned long long pol, Fp8Pass<F8_KCH>& p) {
#pragma unroll
    for (int i = 0; i < F8_KCH; ++i) {
        const int k = base + (i * 32 + lane) * 16;
        const bool ok = k < hidden;
        p.v[i] = load16w_fp8(r.w + k, r.w, ok, pol);
        p.s[i] = chunk_scale(r.s, k, ok);
    }
}

// sum over the pass of w . x, x bf16 in shared memory.
__device__ __forceinline__ float fp8_dot_pass(const Fp8Pass<F8_KCH>& p, const bf16* xs, int base,
                                              int hidden, int lane) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < F8_KCH; ++i) {
        const int k = base + (i * 32 + lane) * 16;
        if (k < hidden) s = fmaf(p.s[i], fp8_dot16_bf16(p.v[i], xs + k), s);
    }
    return s;
}

// The down kernel's chunks of one pass (F8_DCH per lane from cb) of row r
// (len long), reading `safe` / `safe_s` when not ok.
__device__ __forceinline__ void fp8_load_act_pass(const Fp8Row& r, int cb, int len, int lane, bool ok,
                                                  const void* safe, const float* safe_s,
                                                  unsigned long long pol, Fp8Pass<F8_DCH>& p) {
#pragma unroll
    for (int i = 0; i < F8_DCH; ++i) {
        const int k = cb + (i * 32 + lane) * 16;
        const bool in = ok && k < len;
        p.v[i] = load16w_fp8(r.w + k, safe, in, pol);
        p.s[i] = __ldg(in ? r.s + (k >> 7) : safe_s);
    }
}

// One pass of this lane's share of w . a (a f32 in shared memory, len long).
__device__ __forceinline__ float fp8_dot_act(const Fp8Pass<F8_DCH>& p, const float* a_slot, int cb, int len,
                                             int lane) {
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < F8_DCH; ++i) {
        const int k = cb + (i * 32 + lane) * 16;
        if (k < len) part = fmaf(p.s[i], fp8_dot16_f32(p.v[i], a_slot + k), part);
    }
    return part;
}

// The weight formats the expert kernels are instantiated for (compile-time
// only: each entry point's loops are its format's). bf16: a chunk is 8
// weights (KCH / DCH a lane a pass); FP8: block-scaled e4m3
// (moe_decode_fp8.cuh), a chunk 16 weights with its block's scale. A Row is
// one weight row (with its block row of scales), a Pass the chunks of one
// pass of a hidden-length dot, a DPass of an intermediate-length one.
struct Bf16W {
    typedef bf16 T;
    typedef const bf16* Row;
    struct Pass {
        uint4 v[KCH];
    };
    struct DPass {
        uint4 v[DCH];
    };
    static constexpr bool FP8 = false;
};

struct Fp8W {
    typedef unsigned char T;
    typedef Fp8Row Row;
    typedef Fp8Pass<F8_KCH> Pass;
    typedef Fp8Pass<F8_DCH> DPass;
    static constexpr bool FP8 = true;
};
static_assert(F8_KCH * 16 == KCH * 8 && F8_DCH * 16 == DCH * 8, "both formats' passes span KSPAN / DSPAN");

// Row `row` of the matrix m [..][cols] (its scales s: ceil(cols / 128) a block row).
template <class F>
__device__ __forceinline__ typename F::Row row_of(const typename F::T* m, const float* s, long long row,
                                                  int cols) {
    if constexpr (F::FP8) {
        return Fp8Row{m + row * cols, s + (row >> 7) * ((cols + 127) >> 7)};
    } else {
        return m + row * cols;
    }
}

template <class F>
__device__ __forceinline__ void load_pass_f(const typename F::Row& r, int base, int hidden, int lane,
                                            unsigned long long pol, typename F::Pass& p) {
    if constexpr (F::FP8) {
        fp8_load_pass(r, base, hidden, lane, pol, p);
    } else {
        load_pass(r, base, hidden, lane, pol, p.v);
    }
}

template <class F>
__device__ __forceinline__ float dot_pass_f(const typename F::Pass& p, const bf16* xs, int base, int hidden,
                                            int lane) {
    if constexpr (F::FP8) {
        return fp8_dot_pass(p, xs, base, hidden, lane);
    } else {
        return dot_pass(p.v, xs, base, hidden, lane);
    }
}

template <class F>
__device__ __forceinline__ void load_shared_f(const typename F::Row& row, int cb, int len, int lane,
                                              unsigned long long pol, typename F::DPass& p) {
    if constexpr (F::FP8) {
        fp8_load_act_pass(row, cb, len, lane, true, row.w, row.s, pol, p);
    } else {
        load_shared(row, cb, len, lane, pol, p.v);
    }
}

template <class F>
__device__ __forceinline__ float dot_act_f(const typename F::DPass& p, const float* a_slot, int cb, int len,
                                           int lane) {
    if constexpr (F::FP8) {
        return fp8_dot_act(p, a_slot, cb, len, lane);
    } else {
        return dot_act(p.v, a_slot, cb, len, lane);
    }
}

// SiLU(x . g_row) * (x . u_row) over hidden, x in shared memory; the first
// pass's weight chunks already in av / bv when `loaded`.
template <class F>
__device__ __forceinline__ float swiglu_col(const typename F::Row& g_row, const typename F::Row& u_row,
                                            const bf16* xs, int hidden, int lane, unsigned long long pol,
                                            bool loaded, typename F::Pass& av, typename F::Pass& bv) {
    float g = 0.f, u = 0.f;
    for (int base = 0; base < hidden; base += KSPAN) {
        if (base > 0 || !loaded) {
            load_pass_f<F>(g_row, base, hidden, lane, pol, av);
            load_pass_f<F>(u_row, base, hidden, lane, pol, bv);
        }
        g += dot_pass_f<F>(av, xs, base, hidden, lane);
        u += dot_pass_f<F>(bv, xs, base, hidden, lane);
    }
    g = warp_sum(g);
    u = warp_sum(u);
    return g / (1.f + expf(-g)) * u;
}

// FP8 gate_up columns col0 + i * WARPS (i < COLS, < n) of the gate
// rows g_off + c of gm and the up rows u_off + c of um, into act_r[c]; av /
// bv hold column col0's first pass. Each column's first pass loads before
// the previous column's dots (an FP8 row is half a bf16 row's bytes: two in
// flight per warp keep as many bytes loading as the bf16 loop's one).
template <int COLS>
__device__ __forceinline__ void swiglu_cols_fp8(const unsigned char* gm, const float* gs, int g_off,
                                                const unsigned char* um, const float* us, int u_off, int n,
                                                int col0, const bf16* xs, int hidden, int lane,
                                                unsigned long long pol, float* act_r, Fp8W::Pass& av,
                                                Fp8W::Pass& bv) {
#pragma unroll 1
    for (int i = 0; i < COLS; ++i) {
        const int c = col0 + i * WARPS;
        if (c >= n) break;  // warp-uniform; no barrier below
        const int cn = c + WARPS;
        Fp8W::Pass an, bn;
        if (i + 1 < COLS && cn < n) {
            fp8_load_pass(row_of<Fp8W>(gm, gs, g_off + cn, hidden), 0, hidden, lane, pol, an);
            fp8_load_pass(row_of<Fp8W>(um, us, u_off + cn, hidden), 0, hidden, lane, pol, bn);
        }
        const float v = swiglu_col<Fp8W>(row_of<Fp8W>(gm, gs, g_off + c, hidden),
                                         row_of<Fp8W>(um, us, u_off + c, hidden), xs, hidden, lane, pol,
                                         true, av, bv);
        if (lane == 0) act_r[c] = v;
        av = an;
        bv = bn;
    }
}
}  // namespace headroom_moe_decode
