// Token sampling on the device, one CTA per row of logits [rows][vocab]
// (vocab up to 2^31), with the semantics of the CPU backend's sample_row:
//   * candidates are the finite logits; none -> token 0xFFFFFFFF (an error on the host);
//   * temperature <= 0: the largest logit, lowest index on ties;
//   * else p_i = exp((x_i - max) / T); tokens ordered by p descending, index
//     ascending; keep the first top_k (0 = all); keep the shortest prefix whose
//     mass reaches top_p * (mass kept so far); draw u * kept and walk the order.
// The order is made total by a 64-bit key (order-preserving logit bits, then
// the inverted index), and each cut is found by radix descent over the key's
// bytes: 8 passes, each a 256-bin histogram of the candidates under the
// current prefix. Masses are 2^-40 fixed point in u64, so every sum is exact
// and the result does not depend on thread timing.
// params[4 r .. 4 r + 4] = (temperature, top_p, top_k, uniform in [0, 1)).
// A batch whose rows are all greedy takes the split argmax below instead:
// argmax_slices_* gives each CTA one ARGMAX_SLICE-wide slice of a row (grid
// (slices, rows)) and writes its best (value, index); argmax_finish picks a
// row's best slice — the same rule as above: finite logits only, the largest,
// lowest index on ties, 0xFFFFFFFF when none is finite.

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef long long i64;
typedef unsigned long long u64;

constexpr int SAMPLE_THREADS = 1024;
constexpr double FIXED_ONE = 1099511627776.0;  // 2^40

__device__ __forceinline__ float load(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, i64 i) { return __bfloat162float(p[i]); }

__device__ __forceinline__ bool finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

__device__ __forceinline__ u64 order_key(float x, unsigned i) {
    const unsigned b = __float_as_uint(x);
    const unsigned k = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((u64)k << 32) | (u64)(0xFFFFFFFFu - i);
}

struct Row {
    float max;
    float inv_t;
    int vocab;
};

template <typename T>
__device__ __forceinline__ u64 weight(const T* x, int i, const Row& r, bool mass, u64 lower,
                                      u64* key_out) {
    const float v = load(x, i);
    if (!finite(v)) return 0;
    const u64 k = order_key(v, (unsigned)i);
    *key_out = k;
    if (k < lower) return 0;
    return mass ? (u64)((double)expf((v - r.max) * r.inv_t) * FIXED_ONE) : 1ull;
}

// Sum of the weights of candidates with key >= lower.
template <typename T>
__device__ u64 total_above(const T* x, const Row& r, bool mass, u64 lower) {
    __shared__ u64 acc;
    if (threadIdx.x == 0) acc = 0;
    __syncthreads();
    u64 mine = 0;
    for (int i = threadIdx.x; i < r.vocab; i += blockDim.x) {
        u64 k = 0;
        const u64 w = weight(x, i, r, mass, lower, &k);
        if (k >= lower) mine += w;
    }
    atomicAdd(&acc, mine);
    __syncthreads();
    const u64 t = acc;
    __syncthreads();
    return t;
}

// The key of the first candidate (key >= lower, in descending key order) at
// which the inclusive running weight reaches `target` (> target when strict);
// the last candidate when it never does.
template <typename T>
__device__ u64 select_key(const T* x, const Row& r, bool mass, u64 lower, u64 target, bool strict) {
    __shared__ u64 hist[256];
    __shared__ unsigned count[256];
    __shared__ u64 prefix, above;
    if (threadIdx.x == 0) {
        prefix = 0;
        above = 0;
    }
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            hist[b] = 0;
            count[b] = 0;
        }
        __syncthreads();
        const u64 high = shift == 56 ? 0ull : (~0ull << (shift + 8));
        const u64 pre = prefix;
        for (int i = threadIdx.x; i < r.vocab; i += blockDim.x) {
            u64 k = 0;
            const u64 w = weight(x, i, r, mass, lower, &k);
            if (k == 0 || k < lower || (k & high) != pre) continue;
            const int b = (int)((k >> shift) & 255);
            if (w) atomicAdd(&hist[b], w);
            atomicAdd(&count[b], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 a = above;
            int chosen = -1, last = -1;
            for (int b = 255; b >= 0; --b) {
                if (count[b] == 0) continue;
                last = b;
                const u64 next = a + hist[b];
                if (strict ? next > target : next >= target) {
                    chosen = b;
                    break;
                }
                a = next;
            }
            if (chosen < 0 && last >= 0) {
                chosen = last;
                a -= hist[last];
            }
            above = a;
            prefix = pre | ((u64)(chosen < 0 ? 0 : chosen) << shift);
        }
        __syncthreads();
    }
    return prefix;
}

template <typename T>
__device__ void sample_rows(const T* logits, int vocab, const double* params, unsigned* out) {
    const i64 row = blockIdx.x;
    const T* x = logits + row * (i64)vocab;
    const float temperature = (float)params[4 * row];
    const double top_p = params[4 * row + 1];
    const double top_k = params[4 * row + 2];
    const double uniform = params[4 * row + 3];

    // Largest finite logit, lowest index on ties.
    float best = 0.0f;
    int best_i = -1;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = load(x, i);
        if (finite(v) && (best_i < 0 || v > best)) {
            best = v;
            best_i = i;
        }
    }
    __shared__ float wbest[SAMPLE_THREADS / 32];
    __shared__ int widx[SAMPLE_THREADS / 32];
    __shared__ float row_max;
    __shared__ int row_arg;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (oi >= 0 && (best_i < 0 || ov > best || (ov == best && oi < best_i))) {
            best = ov;
            best_i = oi;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        wbest[threadIdx.x >> 5] = best;
        widx[threadIdx.x >> 5] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = 0.0f;
        int bi = -1;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
            if (widx[w] >= 0 && (bi < 0 || wbest[w] > b || (wbest[w] == b && widx[w] < bi))) {
                b = wbest[w];
                bi = widx[w];
            }
        }
        row_max = b;
        row_arg = bi;
    }
    __syncthreads();
    if (row_arg < 0) {
        if (threadIdx.x == 0) out[row] = 0xFFFFFFFFu;
        return;
    }
    if (!(temperature > 0.0f)) {
        if (threadIdx.x == 0) out[row] = (unsigned)row_arg;
        return;
    }
    Row r;
    r.max = row_max;
    r.inv_t = 1.0f / temperature;
    r.vocab = vocab;
    u64 lower = 1;  // every candidate key is >= 1
    if (top_k >= 1.0) {
        const u64 finite_count = total_above(x, r, false, lower);
        if ((double)finite_count > top_k)
            lower = select_key(x, r, false, lower, (u64)top_k, false);
    }
    u64 kept = total_above(x, r, true, lower);
    if (top_p < 1.0) {
        const u64 target = (u64)(top_p * (double)kept);
        lower = select_key(x, r, true, lower, target, false);
        kept = total_above(x, r, true, lower);
    }
    const u64 u = (u64)(uniform * (double)kept);
    const u64 key = select_key(x, r, true, lower, u, true);
    if (threadIdx.x == 0) out[row] = 0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull);
}

extern "C" __global__ void sample_bf16(const bf16* logits, int vocab, const double* params,
                                       unsigned* out) {
    sample_rows<bf16>(logits, vocab, params, out);
}

extern "C" __global__ void sample_f32(const float* logits, int vocab, const double* params,
                                      unsigned* out) {
    sample_rows<float>(logits, vocab, params, out);
}

constexpr int ARGMAX_THREADS = 256;
constexpr int ARGMAX_SLICE = 8192;

// `cand` beats `(best, best_i)`: finite candidates only (best_i < 0 = none yet).
__device__ __forceinline__ bool better(float v, int i, float best, int best_i) {
    return i >= 0 && (best_i < 0 || v > best || (v == best && i < best_i));
}

// The block's best (value, index) over its threads' candidates, in thread 0.
__device__ __forceinline__ void block_best(float& best, int& best_i) {
    __shared__ float wv[ARGMAX_THREADS / 32];
    __shared__ int wi[ARGMAX_THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (better(ov, oi, best, best_i)) {
            best = ov;
            best_i = oi;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        wv[threadIdx.x >> 5] = best;
        wi[threadIdx.x >> 5] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < ARGMAX_THREADS / 32; ++w) {
            if (better(wv[w], wi[w], best, best_i)) {
                best = wv[w];
                best_i = wi[w];
            }
        }
    }
}

template <typename T>
__device__ void argmax_slice(const T* logits, int vocab, float* part_v, int* part_i) {
    const i64 row = blockIdx.y;
    const T* x = logits + row * (i64)vocab;
    const int begin = blockIdx.x * ARGMAX_SLICE;
    const int end = min(vocab, begin + ARGMAX_SLICE);
    float best = 0.0f;
    int best_i = -1;
    for (int i = begin + threadIdx.x; i < end; i += ARGMAX_THREADS) {
        const float v = load(x, i);
        if (finite(v) && better(v, i, best, best_i)) {
            best = v;
            best_i = i;
        }
    }
    block_best(best, best_i);
    if (threadIdx.x == 0) {
        const i64 at = row * (i64)gridDim.x + blockIdx.x;
        part_v[at] = best;
        part_i[at] = best_i;
    }
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_slices_bf16(const bf16* logits, int vocab, float* part_v, int* part_i) {
    argmax_slice<bf16>(logits, vocab, part_v, part_i);
}

// argmax_slices_bf16 with 16-byte loads (8 logits a load, the load's logits
// taken in index order): for vocab % 8 == 0 and a 16-byte aligned logits
// buffer (every row then starts aligned). The same partials: the rule
// (largest finite value, lowest index on ties) does not depend on the order
// in which a CTA visits its slice. The scalar kernel issues 32 two-byte loads
// a thread and moved 1.1 TB/s over 512 rows of 248k logits (ncu, session 13).
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_slices_v8_bf16(const bf16* logits, int vocab, float* part_v, int* part_i) {
    const i64 row = blockIdx.y;
    const uint4* x = reinterpret_cast<const uint4*>(logits + row * (i64)vocab);
    const int begin = blockIdx.x * (ARGMAX_SLICE / 8);
    const int end = min(vocab / 8, begin + ARGMAX_SLICE / 8);
    constexpr int PER = ARGMAX_SLICE / 8 / ARGMAX_THREADS;  // loads a thread, all in flight
    uint4 v[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int u = begin + threadIdx.x + k * ARGMAX_THREADS;
        if (u < end) v[k] = __ldcs(x + u);
    }
    float best = 0.0f;
    int best_i = -1;
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int u = begin + threadIdx.x + k * ARGMAX_THREADS;
        if (u >= end) continue;
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v[k]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            const int i = u * 8 + 2 * j;
            if (finite(f.x) && better(f.x, i, best, best_i)) {
                best = f.x;
                best_i = i;
            }
            if (finite(f.y) && better(f.y, i + 1, best, best_i)) {
                best = f.y;
                best_i = i + 1;
            }
        }
    }
    block_best(best, best_i);
    if (threadIdx.x == 0) {
        const i64 at = row * (i64)gridDim.x + blockIdx.x;
        part_v[at] = best;
        part_i[at] = best_i;
    }
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_slices_f32(const float* logits, int vocab, float* part_v, int* part_i) {
    argmax_slice<float>(logits, vocab, part_v, part_i);
}

// One CTA per row over its `slices` partials.
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_finish(const float* part_v, const int* part_i, int slices, unsigned* out) {
    const i64 row = blockIdx.x;
    float best = 0.0f;
    int best_i = -1;
    for (int s = threadIdx.x; s < slices; s += ARGMAX_THREADS) {
        const i64 at = row * (i64)slices + s;
        if (better(part_v[at], part_i[at], best, best_i)) {
            best = part_v[at];
            best_i = part_i[at];
        }
    }
    block_best(best, best_i);
    if (threadIdx.x == 0) out[row] = best_i < 0 ? 0xFFFFFFFFu : (unsigned)best_i;
}
