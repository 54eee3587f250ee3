// FP8 conversions around the block-scaled GEMM (crates/cuda/src/ops/fp8/quant.rs):
//   fp8_quant_bf16      bf16 x [m][k] -> e4m3 q [m][k] and f32 scales, one per
//                       (row, 128-column group): scale = amax / 448 (1 for an
//                       all-zero group), q = e4m3(x / scale) rounded to nearest,
//                       saturated to +-448 (as vLLM's and DeepSeek's per-token-group
//                       quantization). Scale (r, g) goes to s[r * s_row + g * s_group]
//                       (row-major [m][kb], or transposed for the GEMM's layout).
//                       One warp per (row, group); lane l holds the group's
//                       columns 4l .. 4l + 3 (8-byte loads, 4-byte stores when
//                       `vec`: k % 4 == 0 and x, q aligned; else byte by byte).
//   fp8_quant_bf16_v16  the same codes and scales where k % 8 == 0, x is 16- and
//                       q 8-byte aligned: a half-warp per (row, group), lane l
//                       holding columns 8l .. 8l + 7 (one 16-byte load, one
//                       8-byte store); a warp takes 2 · QUANT_GROUPS consecutive
//                       groups (row-major over (row, group)), all its loads
//                       issued before the first is used (the bytes in flight
//                       that make it bandwidth-bound).
//   fp8_dequant_bf16    e4m3 W [n][k] with scale_inv [ceil(n/128)][ceil(k/128)] ->
//                       bf16 [n][k] (W * scale, rounded once): the GEMM's fallback.
//                       CTAs stride over rows, a thread takes 4 columns at once.
//   fp8_transpose_f32   f32 src [a][b] -> dst[j * ld + i] (a scale table in the
//                       other major order, its leading dimension ld >= a).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace headroom_fp8_quant {

using headroom_e4m3_quant::e4m3_scale;
using headroom_e4m3_quant::e4m3x2;
typedef __nv_bfloat16 bf16;

constexpr int BLOCK = 128;
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
// Groups a half-warp of fp8_quant_bf16_v16 quantizes.
constexpr int QUANT_GROUPS = 4;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

}  // namespace headroom_fp8_quant

extern "C" __global__ void __launch_bounds__(headroom_fp8_quant::THREADS)
    fp8_quant_bf16(const __nv_bfloat16* __restrict__ x, unsigned char* __restrict__ q,
                   float* __restrict__ s, long long m, int k, long long s_row, long long s_group,
                   int vec) {
    using namespace headroom_fp8_quant;
    wait_prior();
    const int lane = threadIdx.x & 31;
    const int kb = (k + BLOCK - 1) / BLOCK;
    const long long warp = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (warp >= m * kb) {
        launch_next();
        return;
    }
    const long long row = warp / kb;
    const int g = (int)(warp % kb);
    // This lane's 4 consecutive columns of the group.
    const int col0 = g * BLOCK + 4 * lane;
    const __nv_bfloat16* xr = x + row * k;
    float v[4];
    if (vec) {
        // k % 4 == 0: the 4 columns are all in the row or all past it.
        uint2 raw = make_uint2(0u, 0u);
        if (col0 < k) raw = __ldg(reinterpret_cast<const uint2*>(xr + col0));
        v[0] = __uint_as_float(raw.x << 16);
        v[1] = __uint_as_float(raw.x & 0xffff0000u);
        v[2] = __uint_as_float(raw.y << 16);
        v[3] = __uint_as_float(raw.y & 0xffff0000u);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = col0 + j < k ? __bfloat162float(xr[col0 + j]) : 0.f;
    }
    launch_next();
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = warp_max(amax);
    const float scale = e4m3_scale(amax);
    unsigned char c[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        c[j] = __nv_cvt_float_to_fp8(__fdiv_rn(v[j], scale), __NV_SATFINITE, __NV_E4M3);
    unsigned char* qr = q + row * k;
    if (vec) {
        if (col0 < k) {
            *reinterpret_cast<unsigned*>(qr + col0) =
                c[0] | (c[1] << 8) | (c[2] << 16) | ((unsigned)c[3] << 24);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (col0 + j < k) qr[col0 + j] = c[j];
    }
    if (lane == 0) s[row * s_row + g * s_group] = scale;
}

extern "C" __global__ void __launch_bounds__(headroom_fp8_quant::THREADS)
    fp8_quant_bf16_v16(const __nv_bfloat16* __restrict__ x, unsigned char* __restrict__ q,
                       float* __restrict__ s, long long m, int k, long long s_row,
                       long long s_group) {
    using namespace headroom_fp8_quant;
    wait_prior();
    const int lane = threadIdx.x & 31;
    const int half = lane >> 4;
    const int l16 = lane & 15;
    const int kb = (k + BLOCK - 1) / BLOCK;
    const long long total = m * kb;
    const long long warp = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    const long long g0 = warp * (2 * QUANT_GROUPS);
    if (g0 >= total) {
        launch_next();
        return;
    }
    // Group i of this half-warp: (row, group) number g0 + 2 i + half.
    uint4 raw[QUANT_GROUPS];
    long long row[QUANT_GROUPS];
    int grp[QUANT_GROUPS];
    bool in[QUANT_GROUPS];
#pragma unroll
    for (int i = 0; i < QUANT_GROUPS; ++i) {
        const long long gid = g0 + 2 * i + half;
        row[i] = gid / kb;
        grp[i] = (int)(gid - row[i] * kb);
        const int col = grp[i] * BLOCK + 8 * l16;
        // k % 8 == 0: the 8 columns are all in the row or all past it.
        in[i] = gid < total && col < k;
        raw[i] = in[i] ? __ldg(reinterpret_cast<const uint4*>(x + row[i] * k + col))
                       : make_uint4(0u, 0u, 0u, 0u);
    }
    launch_next();
#pragma unroll
    for (int i = 0; i < QUANT_GROUPS; ++i) {
        const unsigned u[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
        float v[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float scale = e4m3_scale(amax);
        unsigned c[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            c[j] = e4m3x2(v[2 * j], v[2 * j + 1], scale);
        }
        const long long gid = g0 + 2 * i + half;
        if (in[i]) {
            *reinterpret_cast<uint2*>(q + row[i] * k + grp[i] * BLOCK + 8 * l16) =
                make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
        }
        if (l16 == 0 && gid < total) s[row[i] * s_row + grp[i] * s_group] = scale;
    }
}

extern "C" __global__ void __launch_bounds__(256)
    fp8_dequant_bf16(const unsigned char* __restrict__ w, const float* __restrict__ scale_inv,
                     __nv_bfloat16* __restrict__ out, long long n, int k, int vec,
                     long long grid_rows) {
    using namespace headroom_fp8_quant;
    wait_prior_then_release_next();
    const int kb = (k + BLOCK - 1) / BLOCK;
    // The block grid restarts every grid_rows rows (stacked matrices).
    const long long gr = (grid_rows + BLOCK - 1) / BLOCK;
    // CTAs stride over rows, threads over 4 columns each (4-byte loads and
    // 8-byte stores with `vec`: k % 4 == 0, W 4- and out 8-byte aligned; a
    // quad never straddles a scale block).
    for (long long r = blockIdx.x; r < n; r += gridDim.x) {
        const float* sr = scale_inv + ((r / grid_rows) * gr + (r % grid_rows) / BLOCK) * kb;
        const unsigned char* wr = w + r * k;
        __nv_bfloat16* outr = out + r * k;
        for (int c = 4 * threadIdx.x; c < k; c += 4 * blockDim.x) {
            if (vec) {
                const unsigned u = *reinterpret_cast<const unsigned*>(wr + c);
                const float s = sr[c / BLOCK];
                unsigned short o[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const __half_raw h = __nv_cvt_fp8_to_halfraw(
                        (__nv_fp8_storage_t)((u >> (8 * j)) & 0xffu), __NV_E4M3);
                    const float f = __half2float(*reinterpret_cast<const __half*>(&h));
                    const __nv_bfloat16 b = __float2bfloat16_rn(f * s);
                    o[j] = *reinterpret_cast<const unsigned short*>(&b);
                }
                *reinterpret_cast<uint2*>(outr + c) =
                    make_uint2(o[0] | ((unsigned)o[1] << 16), o[2] | ((unsigned)o[3] << 16));
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (c + j >= k) break;
                    const __half_raw h =
                        __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)wr[c + j], __NV_E4M3);
                    const float f = __half2float(*reinterpret_cast<const __half*>(&h));
                    outr[c + j] = __float2bfloat16_rn(f * sr[(c + j) / BLOCK]);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    fp8_transpose_f32(const float* __restrict__ src, float* __restrict__ dst, long long a,
                      long long b, long long ld) {
    wait_prior_then_release_next();
    const long long total = a * b;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long i = t / b;
        const long long j = t % b;
        dst[j * ld + i] = src[t];
    }
}
