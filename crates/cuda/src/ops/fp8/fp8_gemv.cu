// Block-scaled FP8 GEMV for decode (crates/cuda/src/ops/fp8/gemv.rs): the
// e4m3 weight format (Fp8W) of the GEMV in gemv_body.cuh, which precedes
// this file in the program (after e4m3.cuh) and holds the units, the groups
// loaded one ahead, the warp sums and the scalar path. y_m[r][n] =
// sum_k x[r][k] * W_m[n][k] * s_m[n / 128][k / 128], W float8 e4m3 [n][k]
// (one byte each, row-major), s f32 [ceil(n/128)][ceil(k/128)] (the
// checkpoint's `weight_scale_inv`).
//
// A 16-byte chunk holds 16 weights of one row, inside one 128-column block
// (8 chunks a block), its block scale loaded beside it. At one row one
// output per unit with 8 chunks a lane in flight, or two with 4 of each row
// (wide launches); at more rows two outputs with 2 chunks of each row, where
// the C * R sums and the 16 converted weights a chunk take the registers.
// e4m3 -> f32 times 2^-120 by three integer ops (e4m3.cuh), no conversion
// instruction; a chunk's 16 products in two chains of 8, their sum then
// multiplied by 2^120 (exact) and by the block's scale and added to the
// lane's f32 sum (the block's sum is thus taken in pieces of 16, each
// scaled). The scalar path scales each product by its block's scale.
// `vec` needs k a multiple of 16 and x and every W 16-byte aligned.
//
// fp8_gemv_experts (crates/cuda/src/ops/fp8/experts.rs), the MoE decode's
// variant, runs the same loops on other units (ExpertUnit): one output of
// one (row, expert) pair each, the pair's expert and input row taken from
// the expert ids (written by the routing kernel, so read after the wait:
// WAIT_FIRST) and the stacked experts' matrices; an id out of range writes
// NaN.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace headroom_fp8_gemv {

using headroom_e4m3::e4m3_scaled;
using headroom_e4m3::E4M3_UNSCALE;

constexpr int BLOCK = 128;
// 16-byte chunks per 128-column block.
constexpr int CHUNKS_PER_BLOCK = BLOCK / 16;

__device__ __forceinline__ float fp8_to_float(unsigned char b) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(*reinterpret_cast<const __half*>(&h));
}

// e4m3 weights: 16 a chunk, one f32 scale per 128 x 128 block.
struct Fp8W {
    typedef unsigned char Weight;
    enum { CHUNK_SHIFT = 4, PER_CHUNK = 16, SCALE_BLOCK = BLOCK };

    struct Mat {
        const unsigned char* w;  // [n][k] e4m3
        const float* s;          // [ceil(n/128)][ceil(k/128)]
        void* y;                 // [rows][n], bf16 or f32
        int n;
        int first_unit;          // its first unit (C outputs each)
    };

    static __device__ __forceinline__ const float* mat_scales(const Mat& m) { return m.s; }

    // The scales of weight row `row`'s 128-row block (kb blocks along k).
    static __device__ __forceinline__ const float* block_scales(const float* s, long long row,
                                                                int kb) {
        return s + (row / BLOCK) * kb;
    }

    // Chunk i's scale in its row's scales sr (0 past the row).
    static __device__ __forceinline__ float chunk_scale(const float* sr, int i, bool in) {
        return in ? __ldg(sr + i / CHUNKS_PER_BLOCK) : 0.f;
    }

    // The x rows from the unit (an experts' unit has its own).
    template <class X>
    static __device__ __forceinline__ const X* x_rows(const X*, const bf16* unit) {
        return reinterpret_cast<const X*>(unit);
    }

    // The output type, read where the finish is called.
    template <class P>
    static __device__ __forceinline__ int out_f32(const P& p) {
        return p.out_f32;
    }

    // 16 e4m3 -> f32 times 2^-120 (e4m3.cuh): a chunk's products are summed
    // with these and the sum multiplied by E4M3_UNSCALE.
    static __device__ __forceinline__ void unpack(const uint4& v, float (&f)[16]) {
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            f[4 * j] = e4m3_scaled<0>(u[j]);
            f[4 * j + 1] = e4m3_scaled<1>(u[j]);
            f[4 * j + 2] = e4m3_scaled<2>(u[j]);
            f[4 * j + 3] = e4m3_scaled<3>(u[j]);
        }
    }

    // The 16 x under chunk i: x chunks 2i and 2i + 1 of the row.
    static __device__ __forceinline__ void load_x(const uint4* x4, size_t row, int i,
                                                  float (&xf)[16]) {
        unpack_bf16(__ldg(x4 + row + 2 * i), xf);
        unpack_bf16(__ldg(x4 + row + 2 * i + 1), xf + 8);
    }

    // acc += scale * (the chunk . x): two chains of 8 (even and odd
    // columns), then their sum times 2^120.
    static __device__ __forceinline__ void fma_chunk(const float (&wf)[16], const float (&xf)[16],
                                                     float scale, float& acc) {
        float p0 = 0.f, p1 = 0.f;
#pragma unroll
        for (int e = 0; e < 16; e += 2) {
            p0 = fmaf(wf[e], xf[e], p0);
            p1 = fmaf(wf[e + 1], xf[e + 1], p1);
        }
        acc = fmaf((p0 + p1) * E4M3_UNSCALE, scale, acc);
    }

    // One weight at column kk, times its block's scale (scalar path).
    static __device__ __forceinline__ float weight(unsigned char w, const float* sr, int kk) {
        return fp8_to_float(w) * __ldg(sr + kk / BLOCK);
    }
};

typedef Params<Fp8W> Fp8Params;
static_assert(sizeof(Fp8W::Mat) == 32, "Mat layout (gemv.rs)");
static_assert(sizeof(Fp8Params) == 32 + 32 * MAX_MATS, "Params layout (gemv.rs)");

// The batched-experts launch (MoE decode): pair q (a row and one of its
// experts) multiplies input row q / x_group by expert ids[q]'s matrix into
// y row q. ids are written by the routing kernel: read after the wait.
struct ExpertParams {
    const bf16* x;           // [pairs / x_group][k]
    const int* ids;          // [pairs]
    const unsigned char* w;  // [experts][n][k] e4m3
    const float* s;          // [experts][ceil(n/128)][ceil(k/128)]
    void* y;                 // [pairs][n], bf16 or f32
    int pairs;
    int x_group;             // pairs sharing one input row (top_k, or 1)
    int experts;
    int n;
    int k;
    int out_f32;
    int vec;                 // 16-byte loads (k % 16 == 0, x and w aligned)
    int units;               // pairs * n
};
static_assert(sizeof(ExpertParams) == 72, "ExpertParams layout (gemv.rs)");

// One output of one pair (C = 1); `bad` (an expert index out of range)
// makes it NaN.
struct ExpertUnit {
    const unsigned char* w;
    const float* s;
    void* y;
    const bf16* x;
    int n;
    long long n0;
    bool bad;

    __device__ __forceinline__ ExpertUnit(const ExpertParams& p, int u) {
        const int q = u / p.n;
        const int e = p.ids[q];
        bad = e < 0 || e >= p.experts;
        const long long ee = bad ? 0 : e;
        const long long nb = (p.n + BLOCK - 1) / BLOCK;
        const long long kb = (p.k + BLOCK - 1) / BLOCK;
        w = p.w + ee * p.n * (long long)p.k;
        s = p.s + ee * nb * kb;
        y = static_cast<char*>(p.y) + (size_t)q * p.n * (p.out_f32 ? 4 : 2);
        x = p.x + (size_t)(q / p.x_group) * p.k;
        n = p.n;
        n0 = u - (long long)q * p.n;
    }

    __device__ __forceinline__ long long row(int) const { return n0; }

    __device__ __forceinline__ const float* scales(int, int kb) const {
        return s + (n0 / BLOCK) * kb;
    }
};

}  // namespace headroom_fp8_gemv

// fp8_gemv_c{C}_r{R}: C outputs per unit, U chunks per row in a group, R
// rows: at one row one output per unit (8 chunks a lane in flight), or two
// (4 chunks of each row: whole groups at k = 2048, for wide launches); two
// at 2 ..= MAX_ROWS rows.
#define FP8_GEMV_ENTRY(NAME, C, U, R)                                                      \
    extern "C" __global__ void __launch_bounds__(headroom_fp8_gemv::THREADS,              \
                                                 headroom_fp8_gemv::CTAS_PER_SM)          \
        fp8_gemv_##NAME##_r##R(const headroom_fp8_gemv::Fp8Params p) {                     \
        headroom_fp8_gemv::gemv<headroom_fp8_gemv::Fp8W, R, C, U>(p);                          \
    }

FP8_GEMV_ENTRY(c1, 1, 8, 1)
FP8_GEMV_ENTRY(c2, 2, 4, 1)
FP8_GEMV_ENTRY(c2, 2, 2, 2)
FP8_GEMV_ENTRY(c2, 2, 2, 3)
FP8_GEMV_ENTRY(c2, 2, 2, 4)
FP8_GEMV_ENTRY(c2, 2, 2, 5)
FP8_GEMV_ENTRY(c2, 2, 2, 6)
FP8_GEMV_ENTRY(c2, 2, 2, 7)
FP8_GEMV_ENTRY(c2, 2, 2, 8)

// fp8_gemv_experts: the batched-experts GEMV of MoE decode.
extern "C" __global__ void __launch_bounds__(headroom_fp8_gemv::THREADS,
                                             headroom_fp8_gemv::CTAS_PER_SM)
    fp8_gemv_experts(const headroom_fp8_gemv::ExpertParams p) {
    // One output of one pair a unit (one row, C = 1, 8 chunks in flight).
    using namespace headroom_fp8_gemv;
    run<Fp8W, 1, 1, 8, true, ExpertUnit>(p);
}
