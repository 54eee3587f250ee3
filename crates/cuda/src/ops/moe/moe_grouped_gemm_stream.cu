// Weight-streaming grouped GEMMs of the sparse MoE's routed experts, for
// passes where every expert has only a few rows (decode of many sequences,
// short prefill steps): there the expert weights dominate the bytes and the
// 128 x 128 tiles pad each expert's handful of rows to 128 and pay a pipeline
// prologue and epilogue per CTA. Same contract, tile list and results (up to
// rounding) as moe_grouped_gemm.cu (read its header); what differs:
//
// - Operands swapped: the weights are the MMA's M side (each of the 8 warps
//   owns 16 weight rows: mma.sync m16n8k16 A fragments), the expert's rows are
//   its N side in n8 blocks (NMAX = 32 rows per pass; blocks past the pass's
//   rows are skipped). Any sm_80+ GPU.
// - An item is (row tile of the 128-row tile list, column tile): BW = 128
//   weight rows (gate+up: 64 gate rows and the 64 up rows of the same act
//   columns, interleaved 8 + 8 per warp so SiLU(gate)·up pairs sit in one
//   thread's accumulators; down: 128 output columns of y). A tile of more than
//   NMAX rows runs ceil(rows / NMAX) passes over K (the weights again, from L2).
// - Persistent grid (2 CTAs per SM): CTA b walks items b, b + grid, ... with
//   one 5-stage cp.async ring that runs on across passes and items, so the
//   next item's weights stream in while this one finishes and stores. Weight
//   loads carry an L2 evict-first policy (each weight byte is read once per
//   pass). The tile and row offsets are copied to shared memory once per CTA.
// - Shared memory: stages of 16-byte chunks XOR-swizzled by row (conflict-free
//   ldmatrix), on a 1024-byte aligned base (the swizzle period).
//
// Needs K % BK == 0, gate+up: n_out % (BW / 2) == 0, down: n_out % BW == 0
// (the 128 x 128 kernels' conditions, checked by the launcher).

#include <cuda_bf16.h>

namespace headroom_moe_stream {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128;                  // rows per tile of the tile list (GEMM_BM)
constexpr int BW = 128;                  // weight rows per item
constexpr int BK = 64;                   // K per stage
constexpr int NMAX = 32;                 // rows per pass
constexpr int NB = NMAX / 8;             // n8 blocks per pass
constexpr int WARPS = BW / 16;           // 8
constexpr int THREADS = WARPS * 32;      // 256
constexpr int CHUNK = 8;                 // bf16 per 16-byte chunk
constexpr int ROW_CHUNKS = BK / CHUNK;   // 8
constexpr int W_BYTES = BW * BK * 2;     // 16 KiB
constexpr int T_BYTES = NMAX * BK * 2;   // 4 KiB
constexpr int STAGE_BYTES = W_BYTES + T_BYTES;
constexpr int W_LOADS = BW * ROW_CHUNKS / THREADS;  // 4
constexpr int ROW_STEP = THREADS / ROW_CHUNKS;      // 32
constexpr int GATE_UP_COLS = BW / 2;                // act columns per gate+up item
static_assert(NMAX * ROW_CHUNKS == THREADS, "one row chunk per thread per stage");
static_assert(NB % 2 == 0, "n8 blocks are loaded in pairs");
static_assert(ROW_STEP % 8 == 0, "a thread's chunks share one swizzle phase");

constexpr int MAX_EXPERTS = 1024;                   // the routing kernels' limit
constexpr int TABLE_BYTES = 2 * (MAX_EXPERTS + 1) * 4;  // tile and row offsets, after the stages

constexpr int STAGES = 5;                              // 4 stages loaded ahead
constexpr int ACC = NB * 4;                            // f32 accumulators a thread
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + TABLE_BYTES + 1024;  // 111624: + alignment slack
static_assert(2 * (SMEM_BYTES + 1024) <= 228 * 1024, "two CTAs share an SM");
static_assert(W_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "tiles stay 1024-byte aligned");

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
using headroom_async::cp_async_wait;
// Activation rows take cp_async_16 (0 bytes read when !valid); weight rows
// this, L2 evict-first.
__device__ __forceinline__ void cp_async_16_stream(unsigned dst, const void* src, unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "l"(policy));
}
__device__ __forceinline__ unsigned long long evict_first_policy() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
// moe_gemm_common.cuh, compiled in front of this file.
using headroom_moe_common::source_row;
using headroom_moe_common::silu_mul;
using headroom_moe_common::ldmatrix_x4;

// Byte offset of 16-byte chunk c of row r in a BK-wide tile (128-byte rows),
// XOR-swizzled by row mod 8: the 8 rows an ldmatrix reads in 8 bank groups.
__device__ __forceinline__ unsigned swz(int r, int c) { return (unsigned)headroom_moe_common::swizzle16<BK * 2>(r, c); }

// One stage on mma.sync m16n8k16: A = the warp's 16 weight rows (ldmatrix
// from the swizzled stage at sw), B = the pass's rows (stage at st) in n8
// blocks, blocks past n_rows skipped. acc[4b + q] is weight row warp*16 +
// lane/4 (+ 8 for q >= 2) and pass row b*8 + (lane%4)*2 + q%2.
__device__ __forceinline__ void mma_stage(float (&acc)[ACC], unsigned sw, unsigned st, int warp, int lane,
                                          int n_rows) {
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
        unsigned af[4];
        ldmatrix_x4(af, sw + swz(warp * 16 + (lane % 16), ks * 2 + lane / 16));
#pragma unroll
        for (int b = 0; b < NB; b += 2) {
            if (b * 8 >= n_rows) break;
            unsigned t[4];
            ldmatrix_x4(t, st + swz(b * 8 + (lane % 8) + (lane / 16) * 8, ks * 2 + (lane / 8) % 2));
            mma_bf16_16816(acc + 4 * b, af, t[0], t[1]);
            if ((b + 1) * 8 < n_rows) mma_bf16_16816(acc + 4 * (b + 1), af, t[2], t[3]);
        }
    }
}

// An item is a tile of the tile list (moe_tile_list.cuh, compiled in front of
// this file): expert, first sorted row, rows of its tile, column tile.
typedef headroom_moe_tiles::Tile Item;
__device__ __forceinline__ Item item_at(int t, int n_tiles, const int* __restrict__ expert_offsets,
                                        const int* __restrict__ tile_offsets, int experts) {
    return headroom_moe_tiles::tile_at<BM>(t, n_tiles, expert_offsets, tile_offsets, experts);
}

// Global weight row of the item's tile row s. Gate+up: warp w's 16 rows are
// gate rows nt*64 + w*8 + 0..7, then the up rows of the same columns.
template <bool GATE_UP>
__device__ __forceinline__ long long weight_row(const Item& it, int s, int n_out) {
    if (GATE_UP) {
        const int w = s / 16, i = s % 16;
        const int col = it.nt * GATE_UP_COLS + w * 8 + (i % 8);
        return (long long)it.e * 2 * n_out + (i < 8 ? col : n_out + col);
    }
    return (long long)it.e * n_out + it.nt * BW + s;
}

// The load side: the (item, pass, k-step) its next stage belongs to and the
// source pointers of this thread's chunks (W_LOADS weight chunks of rows
// row + q*ROW_STEP, one chunk of activation row `row`).
template <bool GATE_UP>
struct Loader {
    const bf16* w_ptr[W_LOADS];
    const bf16* t_ptr;
    bool t_ok;
    Item it;
    int j = 0, pass = 0, kt = 0, row, chunk;
    bool done = false;

    __device__ __forceinline__ void point_pass(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                               int K) {
        const int r = pass * NMAX + row;
        t_ok = r < it.rows;
        t_ptr = a_src + source_row<GATE_UP>(slot_token, it.m0 + r, t_ok) * K + chunk * CHUNK;
    }

    __device__ __forceinline__ void point_item(int item, int n_tiles, const bf16* __restrict__ a_src,
                                               const int* __restrict__ slot_token, const bf16* __restrict__ w,
                                               const int* __restrict__ expert_offsets,
                                               const int* __restrict__ tile_offsets, int experts, int K, int n_out) {
        it = item_at(item, n_tiles, expert_offsets, tile_offsets, experts);
#pragma unroll
        for (int q = 0; q < W_LOADS; ++q) {
            w_ptr[q] = w + weight_row<GATE_UP>(it, row + q * ROW_STEP, n_out) * K + chunk * CHUNK;
        }
        point_pass(a_src, slot_token, K);
    }
};

// The kernel body. a_src: x [tokens][K] (GATE_UP, rows through slot_token) or
// act [rows][K]; w: gate_up [E][2 n_out][K] (GATE_UP) or down [E][n_out][K];
// out: act [rows][n_out] (GATE_UP) or y [rows][n_out].
template <bool GATE_UP>
__device__ __forceinline__ void stream_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                            const bf16* __restrict__ w, bf16* __restrict__ out,
                                            const int* __restrict__ expert_offsets,
                                            const int* __restrict__ tile_offsets, int experts, int K, int n_out) {
    constexpr int AHEAD = STAGES - 1;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BW;
    const int total = tile_offsets[experts] * n_tiles;
    if ((int)blockIdx.x >= total) return;
    const int my_items = (total - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const int k_tiles = K / BK;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const unsigned smem0 = (smem_u32(smem_raw) + 1023u) & ~1023u;
    // The offsets in shared memory: each item's binary search runs there.
    int* s_tiles = reinterpret_cast<int*>(smem_raw + (smem0 - smem_u32(smem_raw)) + STAGES * STAGE_BYTES);
    int* s_rows = s_tiles + MAX_EXPERTS + 1;
    for (int i = tid; i <= experts; i += THREADS) {
        s_tiles[i] = tile_offsets[i];
        s_rows[i] = expert_offsets[i];
    }
    __syncthreads();
    expert_offsets = s_rows;
    tile_offsets = s_tiles;
    const unsigned long long policy = evict_first_policy();

    Loader<GATE_UP> ld;
    ld.row = tid / ROW_CHUNKS;
    ld.chunk = tid % ROW_CHUNKS;
    const unsigned dst0 = swz(ld.row, ld.chunk);  // (row + q*ROW_STEP) & 7 == row & 7
    ld.point_item((int)blockIdx.x, n_tiles, a_src, slot_token, w, expert_offsets, tile_offsets, experts, K, n_out);

    // Issues the next stage's chunks into stage `stage` and moves the loader on.
    auto issue = [&](int stage) {
        if (ld.done) return;
        const unsigned base = smem0 + (unsigned)(stage * STAGE_BYTES) + dst0;
        const int k0 = ld.kt * BK;
#pragma unroll
        for (int q = 0; q < W_LOADS; ++q) {
            cp_async_16_stream(base + q * ROW_STEP * BK * 2, ld.w_ptr[q] + k0, policy);
        }
        cp_async_16(base + W_BYTES, ld.t_ptr + k0, ld.t_ok);
        if (++ld.kt < k_tiles) return;
        ld.kt = 0;
        if (++ld.pass * NMAX < ld.it.rows) {
            ld.point_pass(a_src, slot_token, K);
            return;
        }
        ld.pass = 0;
        if (++ld.j < my_items) {
            ld.point_item((int)blockIdx.x + ld.j * (int)gridDim.x, n_tiles, a_src, slot_token, w, expert_offsets,
                          tile_offsets, experts, K, n_out);
        } else {
            ld.done = true;
        }
    };
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        issue(s);
        cp_async_commit();
    }

    int s = 0;  // the CTA's step (a stage is step % STAGES)
    for (int j = 0; j < my_items; ++j) {
        const Item it =
            item_at((int)blockIdx.x + j * (int)gridDim.x, n_tiles, expert_offsets, tile_offsets, experts);
        for (int p0 = 0; p0 < it.rows; p0 += NMAX) {
            const int n_rows = min(NMAX, it.rows - p0);  // rows of this pass (CTA-uniform)
            float acc[ACC];
#pragma unroll
            for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
            for (int kt = 0; kt < k_tiles; ++kt, ++s) {
                cp_async_wait<AHEAD - 1>();
                __syncthreads();  // step s landed for all; step s-1's stage is free
                issue((s + AHEAD) % STAGES);
                cp_async_commit();
                const unsigned sw = smem0 + (unsigned)((s % STAGES) * STAGE_BYTES);
                mma_stage(acc, sw, sw + W_BYTES, warp, lane, n_rows);
            }
            // Epilogue: acc[4b + {0, 1}] is weight row warp*16 + lane/4,
            // acc[4b + {2, 3}] the row 8 below; rows of the pass b*8 + (lane%4)*2 + {0, 1}.
#pragma unroll
            for (int b = 0; b < NB; ++b) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int r = p0 + b * 8 + (lane % 4) * 2 + c;
                    if (r >= it.rows) continue;
                    bf16* orow = out + (long long)(it.m0 + r) * n_out;
                    if (GATE_UP) {
                        const float g = acc[4 * b + c], u = acc[4 * b + 2 + c];
                        const int col = it.nt * GATE_UP_COLS + warp * 8 + lane / 4;
                        orow[col] = __float2bfloat16_rn(silu_mul(g, u));
                    } else {
                        const int col = it.nt * BW + warp * 16 + lane / 4;
                        orow[col] = __float2bfloat16_rn(acc[4 * b + c]);
                        orow[col + 8] = __float2bfloat16_rn(acc[4 * b + 2 + c]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
}

HEADROOM_MOE_GATE_UP_ENTRY(moe_gemm_gate_up_stream_bf16, stream_gemm, 2)
HEADROOM_MOE_DOWN_ENTRY(moe_gemm_down_stream_bf16, stream_gemm, 2)

}  // namespace headroom_moe_stream
