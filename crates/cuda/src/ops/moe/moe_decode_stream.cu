// The MoE block's experts for a few rows (decode) as two weight streams,
// after moe_decode_route (moe_decode.cu, compiled in front of this file: its
// helpers are used here). Where moe_decode_gate_up / moe_decode_down have
// each warp load a few columns in dependent rounds, and every routed CTA
// rank the experts before its first load, here:
//
// - Persistent grids (one or two CTAs of 8 warps per SM): unit u of gate_up
//   goes to CTA u % grid, warp (u / grid) % 8, so every SM gets the same
//   bytes to within one unit (down: the same over each row's CTAs).
// - Each warp streams its units' weight rows through a ring of `stages`
//   stages of its own in shared memory (cp.async, L2 evict-first): while it
//   multiplies stage s, stages s + 1 .. s + stages - 1 are in flight.
//   A lane reads back only the 16-byte chunks it copied itself, so a stage
//   needs no barrier: cp.async.wait_group alone.
// - The shared expert's stages (no routing needed) are issued before
//   griddepcontrol.wait, while the router runs. After the wait each CTA takes
//   the top-k of every row from the logits, one warp a row (rounds of a warp
//   arg-max, as moe_route: softmax in f32, ties -> lower index, NaN last,
//   renormalised in rank order when asked), then issues its routed stages.
// - gate_up asks L2 for the routed experts' down matrices (cp.async.bulk
//   prefetch, each distinct expert once, while their bytes stay under the
//   launcher's prefetch_max, 24 MiB by default) and for the shared expert's
//   before its wait, so the down kernel reads them from L2.
//
// moe_decode_gate_up_stream: unit = one column c of one expert (gate row c
//   and up row c): the shared expert's columns first (each for every row: its
//   weights are read once for all rows), then (row, slot, column) of the
//   routed experts. A stage is GU_SPAN elements of K of both rows.
//   act[row][slot][c] = silu(x . gate[c]) * (x . up[c]), slot top_k the shared expert.
// moe_decode_down_stream: unit = output column n of one row; its pieces are
//   (slot, K part) of the shared expert's down row n (first: needs no
//   routing) and of each routed expert's, DN_SPAN elements each, DN_PIECES
//   pieces a stage. out = bf16(sum over the routed ranks in order of
//   w_t * bf16(down_t[n] . act_t), then + w_shared * bf16(shared_down[n] . act_shared)),
//   w_shared = sigmoid(its gate logit); act = bf16(silu(g) * u): the rounding
//   points of the GEMV kernels and of the grouped path.
//
// Needs hidden, intermediate and the shared intermediate to be multiples of
// 8 (16-byte chunks), rows * hidden <= MAX_X, rows <= MAX_ROWS, experts <=
// MAX_EXPERTS, top_k <= min(experts, MAX_TOP_K).

namespace headroom_moe_decode {
namespace stream {

// Chunks (8 bf16) a lane copies of a gate row and of an up row per stage.
constexpr int GU_CH = 4;
constexpr int GU_SPAN = GU_CH * 32 * 8;    // K elements a gate_up stage covers (1024)
constexpr int GU_STAGE = 2 * GU_SPAN;      // bf16 a warp's gate_up stage holds (4 KiB)
// Chunks a lane copies of one down row per piece, and pieces per down stage.
constexpr int DN_CH = 2;
constexpr int DN_SPAN = DN_CH * 32 * 8;    // K elements of a piece (512)
constexpr int DN_PIECES = 4;
constexpr int DN_STAGE = DN_PIECES * DN_SPAN;  // bf16 a warp's down stage holds (4 KiB)
// Most stages of a warp's ring (the launcher picks 2, 3 or 4: `stages`).
constexpr int RING_STAGES = 4;
// Largest rows * hidden (x staged in shared memory by gate_up).
constexpr int MAX_X = 32768;
// Bytes of one L2 prefetch instruction.
constexpr int PREFETCH_PIECE = 4096;
static_assert(GU_STAGE == DN_STAGE, "both kernels' stages are STAGE_BYTES");
constexpr int STAGE_BYTES = GU_STAGE * 2;  // 4 KiB a warp

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes of weights from global src to shared dst (L2 policy pol).
__device__ __forceinline__ void cp_w16(unsigned dst, const void* src, unsigned long long pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Returns once at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Returns once the oldest of `stages` committed ring stages has landed (2..4).
__device__ __forceinline__ void ring_wait(int stages) {
    if (stages >= 4) {
        cp_wait<3>();
    } else if (stages == 3) {
        cp_wait<2>();
    } else {
        cp_wait<1>();
    }
}

// Asks L2 for bytes [0, n) of p (16-byte aligned, n a multiple of 16):
// PREFETCH_PIECE pieces, piece q issued by thread q of the grid counted
// CTA-fastest (thread t of CTA c is t * grid + c), so each SM issues about
// 1/grid of them (pieces q from `base`: the caller deals several matrices in
// one sequence). Run 1 dealt them to the first threads, i.e. a few SMs' bulk
// units, which held those CTAs back.
__device__ __forceinline__ void prefetch_l2(const void* p, long long n, long long base) {
    const long long nt = (long long)gridDim.x * blockDim.x;
    const long long gt = (long long)threadIdx.x * gridDim.x + blockIdx.x;
    const long long pieces = (n + PREFETCH_PIECE - 1) / PREFETCH_PIECE;
    // This thread's pieces q (q ≡ gt mod nt) of base .. base + pieces.
    long long q = base + ((gt - base) % nt + nt) % nt;
    for (; q < base + pieces; q += nt) {
        const long long off = (q - base) * PREFETCH_PIECE;
        const long long len = min((long long)PREFETCH_PIECE, n - off);
        const char* a = static_cast<const char*>(p) + off;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)len) : "memory");
#else
        for (long long b = 0; b < len; b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + b));
#endif
    }
}

// Routing key: 0 taken (or no expert), 1 NaN, else the probability's bits + 2
// (p >= 0: its bits order as unsigned).
__device__ __forceinline__ unsigned rkey(float p) { return p != p ? 1u : __float_as_uint(p) + 2u; }

// The top-k of one row's `experts` logits (row, f32, from L2) by softmax
// probability, by one warp: sel_e[t] the local index of the expert of rank t
// (-1: another rank's), sel_w[t] its weight (probability, over the top-k's
// sum in rank order when renormalise). EPL >= experts / 32.
template <int EPL>
__device__ __forceinline__ void route_warp(const float* __restrict__ row, int experts, int top_k,
                                           int renormalise, int first, int local, int* sel_e,
                                           float* sel_w) {
    const int lane = threadIdx.x % 32;
    float p[EPL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
        const int j = lane + 32 * i;
        p[i] = j < experts ? __ldcg(row + j) : -INFINITY;
        mx = fmaxf(mx, p[i]);  // fmaxf skips NaN
    }
    mx = warp_max(mx);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
        if (lane + 32 * i < experts) {
            p[i] = expf(p[i] - mx);
            sum += p[i];
        }
    }
    sum = warp_sum(sum);
    unsigned key[EPL];
#pragma unroll
    for (int i = 0; i < EPL; ++i) key[i] = lane + 32 * i < experts ? rkey(p[i] / sum) : 0u;
    float kept = 0.f, my_p = 0.f;
    int my_e = -1;
    for (int kk = 0; kk < top_k; ++kk) {
        // This lane's best (strictly greater: the lowest of its equal keys).
        unsigned bk = 0u;
        int bi = 0;
#pragma unroll
        for (int i = 0; i < EPL; ++i) {
            if (key[i] > bk) {
                bk = key[i];
                bi = i;
            }
        }
        const unsigned wk = __reduce_max_sync(0xffffffffu, bk);
        const int be = __reduce_min_sync(0xffffffffu, bk == wk ? lane + 32 * bi : 0x7fffffff);
#pragma unroll
        for (int i = 0; i < EPL; ++i) {
            if (lane + 32 * i == be) key[i] = 0u;
        }
        const float bp = wk == 1u ? __int_as_float(0x7fffffff) : __uint_as_float(wk - 2u);
        kept += bp;  // in rank order
        if (lane == kk) {
            my_e = be;
            my_p = bp;
        }
    }
    if (lane < top_k) {
        const int le = my_e - first;
        sel_e[lane] = le >= 0 && le < local ? le : -1;
        sel_w[lane] = renormalise ? my_p / kept : my_p;
    }
}

// Every row's top-k (warp r routes row r) into sel_e / sel_w.
__device__ __forceinline__ void route_rows(const float* __restrict__ logits, int rows, int experts, int top_k,
                                           int renormalise, int first, int local,
                                           int (&sel_e)[MAX_ROWS][MAX_TOP_K],
                                           float (&sel_w)[MAX_ROWS][MAX_TOP_K]) {
    const int r = threadIdx.x / 32;
    if (r >= rows) return;
    const float* row = logits + (long long)r * (experts + 1);
    if (experts <= 256) {
        route_warp<8>(row, experts, top_k, renormalise, first, local, sel_e[r], sel_w[r]);
    } else {
        route_warp<MAX_EXPERTS / 32>(row, experts, top_k, renormalise, first, local, sel_e[r], sel_w[r]);
    }
}

// Which stages of a warp's sequence an issue call copies.
enum Kind { SHARED_ONLY = 0, ROUTED_ONLY = 1, ANY = 2 };

// A gate_up stage: its unit's column, row and slot (routed), first K element.
struct GuStage {
    int c, r, t, kb;
    bool shared;
};

// Units gw, gw + nw, ... of a warp; stage s is K part s % parts of its unit s / parts.
__device__ __forceinline__ GuStage gu_stage(int s, int parts, int gw, int nw, int shared_inter, int inter,
                                            int top_k) {
    GuStage st;
    const int j = s / parts;
    st.kb = (s - j * parts) * GU_SPAN;
    const int u = gw + j * nw;
    st.shared = u < shared_inter;
    if (st.shared) {
        st.c = u;
        st.r = 0;
        st.t = 0;
    } else {
        const int v = u - shared_inter;
        const int pair = v / inter;
        st.c = v - pair * inter;
        st.r = pair / top_k;
        st.t = pair - st.r * top_k;
    }
    return st;
}

// act: [rows][top_k + 1][act_stride] f32; topk_expert / topk_weight:
// [rows][top_k] (local expert or -1, weight), written by CTA 0 for the down
// kernel. grid: (units / WARPS, at most 1 or 2 a SM); block THREADS; dynamic
// shared memory WARPS * stages * STAGE_BYTES + rows * hidden * 2. prefetch_max
// 0: no L2 prefetch at all.
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // <= 128 registers: 2 CTAs an SM when they fit
moe_decode_gate_up_stream(const bf16* __restrict__ x, const bf16* __restrict__ gate_up,
                          const bf16* __restrict__ shared_gate_proj, const bf16* __restrict__ shared_up_proj,
                          const bf16* __restrict__ down, const bf16* __restrict__ shared_down,
                          const float* __restrict__ logits, int rows, int hidden, int experts, int top_k,
                          int renormalise, int first, int local, int inter, int shared_inter, int act_stride,
                          long long prefetch_max, int stages, int* __restrict__ topk_expert,
                          float* __restrict__ topk_weight, float* __restrict__ act) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int sel_e[MAX_ROWS][MAX_TOP_K];
    __shared__ float sel_w[MAX_ROWS][MAX_TOP_K];
    __shared__ int pf_e[MAX_ROWS * MAX_TOP_K];
    __shared__ int pf_n;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int nw = gridDim.x * WARPS;
    const int gw = warp * gridDim.x + blockIdx.x;
    const int n_units = shared_inter + rows * top_k * inter;
    const int my_units = gw < n_units ? (n_units - 1 - gw) / nw + 1 : 0;
    const int parts = (hidden + GU_SPAN - 1) / GU_SPAN;
    const int n_stages = my_units * parts;
    bf16* ring = reinterpret_cast<bf16*>(smem) + warp * stages * GU_STAGE;
    bf16* xs = reinterpret_cast<bf16*>(smem + WARPS * stages * STAGE_BYTES);
    const unsigned ring_s = smem_u32(ring);
    const unsigned long long pol = weight_policy();

    // Copies stage s of this warp (if it exists and is of `kind`) into ring slot s % stages.
    auto issue = [&](int s, Kind kind) {
        if (s >= n_stages) return;
        const GuStage st = gu_stage(s, parts, gw, nw, shared_inter, inter, top_k);
        if ((kind == SHARED_ONLY && !st.shared) || (kind == ROUTED_ONLY && st.shared)) return;
        const bf16* g;
        if (st.shared) {
            g = shared_gate_proj + (long long)st.c * hidden;
        } else {
            const int e = sel_e[st.r][st.t];
            if (e < 0) return;  // another rank's expert: nothing to read
            g = gate_up + ((long long)e * 2 * inter + st.c) * hidden;
        }
        const bf16* u = st.shared ? shared_up_proj + (long long)st.c * hidden : g + (long long)inter * hidden;
        const unsigned dst = ring_s + (unsigned)((s % stages) * STAGE_BYTES);
#pragma unroll
        for (int i = 0; i < GU_CH; ++i) {
            const int k = st.kb + (i * 32 + lane) * 8;
            if (k < hidden) {
                cp_w16(dst + (unsigned)(i * 32 + lane) * 16, g + k, pol);
                cp_w16(dst + (unsigned)((GU_CH + i) * 32 + lane) * 16, u + k, pol);
            }
        }
    };

    // Before the wait: weights only (the shared expert's first stages, and
    // its down matrix into L2).
    for (int s = 0; s < stages; ++s) issue(s, SHARED_ONLY);
    if (prefetch_max > 0) prefetch_l2(shared_down, (long long)hidden * shared_inter * 2, 0);
    wait_prior();
    // x into shared memory, eight 16-byte loads a thread at a time; the
    // first eight are in flight while warps 0 .. rows - 1 route their rows.
    {
        const int n8 = rows * hidden / 8;
        const uint4* src = reinterpret_cast<const uint4*>(x);
        uint4* dst = reinterpret_cast<uint4*>(xs);
        for (int c0 = 0; c0 < n8; c0 += 8 * THREADS) {
            uint4 v[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int c = c0 + i * THREADS + tid;
                if (c < n8) v[i] = __ldcg(src + c);
            }
            if (c0 == 0) route_rows(logits, rows, experts, top_k, renormalise, first, local, sel_e, sel_w);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int c = c0 + i * THREADS + tid;
                if (c < n8) dst[c] = v[i];
            }
        }
    }
    __syncthreads();
    launch_next();  // the down CTAs take SMs as these CTAs leave
    if (blockIdx.x == 0 && tid < rows * top_k) {
        const int r = tid / top_k, t = tid - r * top_k;
        topk_expert[tid] = sel_e[r][t];
        topk_weight[tid] = sel_w[r][t];
    }
    for (int s = 0; s < stages; ++s) {
        issue(s, ROUTED_ONLY);
        cp_commit();  // one group a stage (the first also holds the shared stages issued before)
    }
    // The routed experts' down matrices into L2, each distinct one once, in
    // (row, rank) order while under prefetch_max bytes.
    if (tid == 0) {
        int n = 0;
        long long bytes = 0;
        const long long mat = (long long)hidden * inter * 2;
        for (int p = 0; p < rows * top_k; ++p) {
            const int e = sel_e[p / top_k][p % top_k];
            bool seen = e < 0;
            for (int q = 0; q < n && !seen; ++q) seen = pf_e[q] == e;
            if (bytes + mat > prefetch_max) break;  // the budget is full
            if (!seen) {
                pf_e[n++] = e;
                bytes += mat;
            }
        }
        pf_n = n;
    }
    __syncthreads();
    {
        const long long mat = (long long)hidden * inter * 2;
        const long long per = (mat + PREFETCH_PIECE - 1) / PREFETCH_PIECE;
        for (int q = 0; q < pf_n; ++q) prefetch_l2(down + (long long)pf_e[q] * hidden * inter, mat, q * per);
    }

    float ga[MAX_ROWS], ua[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) ga[r] = ua[r] = 0.f;
    const int slots = top_k + 1;
    for (int s = 0; s < n_stages; ++s) {
        ring_wait(stages);
        const GuStage st = gu_stage(s, parts, gw, nw, shared_inter, inter, top_k);
        const bool live = st.shared || sel_e[st.r][st.t] >= 0;  // warp-uniform
        if (live) {
            const bf16* sl = ring + (s % stages) * GU_STAGE;
            uint4 wg[GU_CH], wu[GU_CH];
#pragma unroll
            for (int i = 0; i < GU_CH; ++i) {
                wg[i] = *reinterpret_cast<const uint4*>(sl + (i * 32 + lane) * 8);
                wu[i] = *reinterpret_cast<const uint4*>(sl + ((GU_CH + i) * 32 + lane) * 8);
            }
            const int r0 = st.shared ? 0 : st.r;
            const int nr = st.shared ? rows : 1;
#pragma unroll
            for (int r = 0; r < MAX_ROWS; ++r) {
                if (r < nr) {
                    const bf16* xr = xs + (long long)(r0 + r) * hidden;
#pragma unroll
                    for (int i = 0; i < GU_CH; ++i) {
                        const int k = st.kb + (i * 32 + lane) * 8;
                        if (k < hidden) {
                            const uint4 xv = *reinterpret_cast<const uint4*>(xr + k);
                            ga[r] += dot8(wg[i], xv);
                            ua[r] += dot8(wu[i], xv);
                        }
                    }
                }
            }
            if (st.kb + GU_SPAN >= hidden) {  // the unit's last stage
                const int slot = st.shared ? top_k : st.t;
#pragma unroll
                for (int r = 0; r < MAX_ROWS; ++r) {
                    if (r < nr) {
                        const float g = warp_sum(ga[r]);
                        const float u = warp_sum(ua[r]);
                        if (lane == 0) {
                            act[((long long)(r0 + r) * slots + slot) * act_stride + st.c] =
                                round_bf16(g / (1.f + expf(-g)) * u);
                        }
                    }
                    ga[r] = ua[r] = 0.f;
                }
            }
        }
        // Slot s % stages is read (the dots used its values): refill it.
        issue(s + stages, ANY);
        cp_commit();
    }
    cp_wait<0>();
}

// out: [rows][hidden] bf16. grid: at least rows CTAs (CTA c serves row
// c % rows: its activations, (top_k + 1) * act_stride floats, staged in shared
// memory after the ring; each row's CTAs split its columns as above); block
// THREADS; dynamic shared memory WARPS * stages * STAGE_BYTES + the
// activations. act_stride % 4 == 0. (Run 1 read the activations from global
// memory in the multiply loop: every SM hit the same lines of L2, a round
// trip a piece.)
extern "C" __global__ void __launch_bounds__(THREADS, 2)
moe_decode_down_stream(const float* __restrict__ act, const bf16* __restrict__ down,
                       const bf16* __restrict__ shared_down, const int* __restrict__ topk_expert,
                       const float* __restrict__ topk_weight, const float* __restrict__ logits, int rows,
                       int hidden, int experts, int top_k, int inter, int shared_inter, int act_stride,
                       int stages, bf16* __restrict__ out) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int se[MAX_TOP_K];
    __shared__ float sw[MAX_TOP_K + 1];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int r = blockIdx.x % rows;  // this CTA's row
    const int cr = blockIdx.x / rows, row_ctas = (gridDim.x - r + rows - 1) / rows;
    const int nw = row_ctas * WARPS;
    const int gw = warp * row_ctas + cr;  // columns gw, gw + nw, ... of row r
    const int my_units = gw < hidden ? (hidden - 1 - gw) / nw + 1 : 0;
    const int kparts = (max(inter, shared_inter) + DN_SPAN - 1) / DN_SPAN;
    const int slots = top_k + 1;
    const int per_unit = slots * kparts;  // pieces: slot 0 the shared expert, 1 + t routed rank t
    const int n_pieces = my_units * per_unit;
    const int n_stages = (n_pieces + DN_PIECES - 1) / DN_PIECES;
    bf16* ring = reinterpret_cast<bf16*>(smem) + warp * stages * DN_STAGE;
    float* act_s = reinterpret_cast<float*>(smem + WARPS * stages * STAGE_BYTES);
    const unsigned ring_s = smem_u32(ring);
    const unsigned long long pol = weight_policy();

    // Piece q of this warp: its column, slot (0 shared), K part.
    auto piece = [&](int q, int& n, int& sl, int& kb) {
        const int j = q / per_unit;
        const int rem = q - j * per_unit;
        sl = rem / kparts;
        kb = (rem - sl * kparts) * DN_SPAN;
        n = gw + j * nw;
    };
    auto issue = [&](int s, Kind kind) {
        const unsigned dst = ring_s + (unsigned)((s % stages) * STAGE_BYTES);
#pragma unroll
        for (int p = 0; p < DN_PIECES; ++p) {
            const int q = s * DN_PIECES + p;
            if (q >= n_pieces) break;
            int n, sl, kb;
            piece(q, n, sl, kb);
            if ((kind == SHARED_ONLY && sl != 0) || (kind == ROUTED_ONLY && sl == 0)) continue;
            const bf16* row;
            int len;
            if (sl == 0) {
                row = shared_down + (long long)n * shared_inter;
                len = shared_inter;
            } else {
                const int e = se[sl - 1];
                if (e < 0) continue;
                row = down + ((long long)e * hidden + n) * inter;
                len = inter;
            }
#pragma unroll
            for (int i = 0; i < DN_CH; ++i) {
                const int k = kb + (i * 32 + lane) * 8;
                if (k < len) cp_w16(dst + (unsigned)((p * DN_CH + i) * 32 + lane) * 16, row + k, pol);
            }
        }
    };

    for (int s = 0; s < stages; ++s) issue(s, SHARED_ONLY);  // weights: before the wait
    wait_prior();
    // The row's activations into shared memory (cp.async: in the first
    // group, with the first stage).
    {
        const float* a_r = act + (long long)r * slots * act_stride;
        const unsigned a_s = smem_u32(act_s);
        for (int i = tid; i < slots * act_stride / 4; i += THREADS) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a_s + 16u * i), "l"(a_r + 4 * i)
                         : "memory");
        }
    }
    if (tid < top_k) {
        se[tid] = topk_expert[r * top_k + tid];
        sw[tid] = topk_weight[r * top_k + tid];
    } else if (tid == top_k) {
        sw[top_k] = 1.f / (1.f + expf(-__ldcg(logits + (long long)r * (experts + 1) + experts)));
    }
    __syncthreads();
    for (int s = 0; s < stages; ++s) {
        issue(s, ROUTED_ONLY);
        cp_commit();
    }
    ring_wait(stages);  // the first group: this thread's activation chunks
    __syncthreads();    // everyone's
    // Each expert's output y = down[n] . act is completed over its K parts
    // and rounded to bf16 before it is weighted; out = bf16(sum in rank order
    // of w_t * y_t, then + w_shared * y_shared): the GEMV kernels' and the
    // grouped path's rounding points and order.
    float acc = 0.f, part_slot = 0.f, y_shared = 0.f;
    for (int s = 0; s < n_stages; ++s) {
        ring_wait(stages);
        const bf16* stg = ring + (s % stages) * DN_STAGE;
#pragma unroll
        for (int p = 0; p < DN_PIECES; ++p) {
            const int q = s * DN_PIECES + p;
            if (q >= n_pieces) break;
            int n, sl, kb;
            piece(q, n, sl, kb);
            const int t = sl == 0 ? top_k : sl - 1;  // act slot and weight index
            const bool live = sl == 0 || se[t] >= 0;  // dead slots' act may be NaN
            const int len = sl == 0 ? shared_inter : inter;
            if (live) {
                const float* a = act_s + t * act_stride;
                float part = 0.f;
#pragma unroll
                for (int i = 0; i < DN_CH; ++i) {
                    const int k = kb + (i * 32 + lane) * 8;
                    if (k < len) {
                        float fw[8];
                        bf16x8(*reinterpret_cast<const uint4*>(stg + ((p * DN_CH + i) * 32 + lane) * 8), fw);
                        const float4 a0 = *reinterpret_cast<const float4*>(a + k);
                        const float4 a1 = *reinterpret_cast<const float4*>(a + k + 4);
                        part = fmaf(fw[0], a0.x, part);
                        part = fmaf(fw[1], a0.y, part);
                        part = fmaf(fw[2], a0.z, part);
                        part = fmaf(fw[3], a0.w, part);
                        part = fmaf(fw[4], a1.x, part);
                        part = fmaf(fw[5], a1.y, part);
                        part = fmaf(fw[6], a1.z, part);
                        part = fmaf(fw[7], a1.w, part);
                    }
                }
                part_slot += part;
            }
            if (kb + DN_SPAN >= max(inter, shared_inter)) {  // the slot's last K part
                const float y = round_bf16(warp_sum(part_slot));  // every lane: warp-uniform
                part_slot = 0.f;
                if (sl == 0) {
                    y_shared = y;
                } else if (live) {
                    acc = fmaf(sw[t], y, acc);
                }
                if (sl == slots - 1) {  // the unit's last piece
                    acc = fmaf(sw[top_k], y_shared, acc);
                    if (lane == 0) out[(long long)r * hidden + n] = __float2bfloat16_rn(acc);
                    acc = 0.f;
                }
            }
        }
        issue(s + stages, ANY);
        cp_commit();
    }
    cp_wait<0>();
}

}  // namespace stream
}  // namespace headroom_moe_decode
