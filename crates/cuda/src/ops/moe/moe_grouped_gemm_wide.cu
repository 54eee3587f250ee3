// Wide-tile grouped GEMMs of the sparse MoE's routed experts on Hopper
// warpgroup MMA (sm_90a only). Same contract, tile list
// and results as moe_grouped_gemm.cu (read its header); what differs:
//
// - Tiles of BM = 128 rows x BN = 256 weight rows x BK = 64: each of the two
//   warpgroups issues wgmma m64n256k16 (A and B from shared memory, SW128
//   K-major), so each byte of B the tensor cores read feeds twice the math of
//   the 128 x 128 tiles (the smem traffic per FLOP was the 128 x 128 kernels'
//   limit). A gate+up tile is 128 gate rows and the 128 up rows of the same
//   columns: SiLU(gate)·up stays in registers (128 act columns per tile).
// - One CTA per SM (192 KiB of stages, 128 accumulator registers a thread),
//   4 cp.async stages loaded 2 k-steps ahead, and one wgmma group left in
//   flight across the CTA barrier (wait_group 1), so the tensor cores work
//   while the CTA waits for the next stage.
// - The loop runs over a CTA's tiles (tile = blockIdx.x + j·gridDim.x) with
//   the load pipeline running on across tile boundaries: a grid of one CTA
//   per tile is the plain kernel; a grid of one CTA per SM is persistent (the
//   next tile's first loads fly during this tile's last k-steps and epilogue).
// - The down GEMM's epilogue is staged per warpgroup through its own 16 KiB of
//   shared memory (named barriers, 16-byte stores of whole 256-byte row
//   pieces of y), so it never touches the stages the next loads fill.
//
// Needs K % BK == 0, gate+up: intermediate % 128 == 0, down: hidden % 256 ==
// 0 (the launcher falls back to the 128 x 128 kernels per GEMM otherwise).

#include <cuda_bf16.h>

namespace headroom_moe_wide {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int AHEAD = STAGES - 2;          // k-steps loaded ahead of the one computed
constexpr int WARPGROUPS = 2;
constexpr int THREADS = WARPGROUPS * 128;  // 256
constexpr int WG_ROWS = BM / WARPGROUPS;   // 64: the wgmma M
constexpr int NI = BN / 8;                 // 32 n8 blocks of the accumulator
constexpr int ACC = NI * 4;                // 128 f32 accumulators a thread
constexpr int CHUNK = 8;
constexpr int ROW_CHUNKS = BK / CHUNK;     // 8: one 128-byte swizzle row
constexpr int A_BYTES = BM * BK * 2;       // 16 KiB
constexpr int B_BYTES = BN * BK * 2;       // 32 KiB
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int EPI_COLS = 128;              // y columns staged per half
constexpr int EPI_BYTES = WG_ROWS * EPI_COLS * 2;  // 16 KiB per warpgroup
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + WARPGROUPS * EPI_BYTES + 1024;  // + alignment slack
constexpr int GATE_UP_COLS = BN / 2;            // 128 act columns per gate+up tile
static_assert(ROW_CHUNKS == 8 && WG_ROWS == 64, "SW128 tiles of 64-element rows");
static_assert(SMEM_BYTES <= 227 * 1024, "one CTA fits an SM");
static_assert(A_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "tiles stay 1024-byte aligned");

using headroom_async::smem_u32;
using headroom_async::cp_async_16;
using headroom_async::cp_async_commit;
using headroom_async::cp_async_wait;
using headroom_async::fence_proxy_async;
using headroom_async::wgmma_fence;
using headroom_async::wgmma_commit;
using headroom_async::wgmma_wait;
// Named barrier of one warpgroup's 128 threads (id 0 is __syncthreads).
__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory"); }
using headroom_async::fence_operands;

// d = A·B + (accumulate ? d : 0): the first k-step of a tile starts from
// zero through the scale-d predicate, so no ordinary instruction writes the
// accumulators while a wgmma may be in flight.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long da, unsigned long long db,
                                                 int accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(accumulate));
}

// moe_tile_list.cuh, moe_gemm_common.cuh and moe_wgmma_common.cuh, compiled
// in front of this file.
using headroom_moe_tiles::Tile;
using headroom_moe_tiles::tile_at;
using headroom_moe_common::source_row;
using headroom_moe_common::weight_halves;
using headroom_moe_common::swizzle16;
using headroom_moe_wgmma_common::desc_sw128;
using headroom_moe_wgmma_common::store_act;
using headroom_moe_wgmma_common::stage_y;
using headroom_moe_wgmma_common::copy_y;

// The down epilogue, per warpgroup through its own EPI_BYTES of shared memory,
// in two halves of 128 columns: bf16 fragments written with 16-byte chunks
// XOR-swizzled by row (conflict-free), then 16-byte stores of whole 256-byte
// row pieces of y.
__device__ __forceinline__ void store_y(const float (&acc)[ACC], bf16* __restrict__ out, const Tile& tl,
                                        int n_out, int wg, int wq, int lane, unsigned char* buf) {
    static_assert(EPI_COLS * 2 == 256 && NI / 2 == 16, "each half stages 256-byte rows");
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        wg_barrier(wg);  // the previous half's (or tile's) reads of buf are done
        stage_y(acc, buf, wq * 16, half * (NI / 2), lane);
        wg_barrier(wg);
        copy_y<WG_ROWS, 128>(buf, out, tl.m0, tl.rows, wg * WG_ROWS, tl.nt * BN, half * EPI_COLS, n_out, t);
    }
}

// The load side of a wide kernel, run by LOADERS threads (loader index t):
// the tile and k-step its next loads belong to, and its 16-byte chunks' source
// pointers (A rows gathered through slot_token for GATE_UP).
// a_src: x [tokens][K] (GATE_UP) or act [rows][K]; w: gate_up [E][2 n_out][K]
// (GATE_UP) or down [E][n_out][K].
template <bool GATE_UP, int LOADERS>
struct Loader {
    static constexpr int STEP = LOADERS / ROW_CHUNKS;  // rows between a thread's chunks
    static constexpr int A_N = BM / STEP;
    static constexpr int B_N = BN / STEP;
    static_assert(B_N % 2 == 0, "gate and up halves of B are whole loads");
    const bf16* a_ptr[A_N];
    bool a_ok[A_N];
    const bf16* b_lo;  // B rows row + q*STEP, q < B_N/2 (gate rows for GATE_UP)
    const bf16* b_hi;  // q >= B_N/2 (up rows for GATE_UP)
    int j = 0, kt = 0, row, chunk;
    unsigned dst0;

    __device__ __forceinline__ void point_at(int tile, int n_tiles, const bf16* __restrict__ a_src,
                                             const int* __restrict__ slot_token, const bf16* __restrict__ w,
                                             const int* __restrict__ expert_offsets,
                                             const int* __restrict__ tile_offsets, int experts, int K, int n_out) {
        const Tile tl = tile_at<BM>(tile, n_tiles, expert_offsets, tile_offsets, experts);
#pragma unroll
        for (int q = 0; q < A_N; ++q) {
            const int r = row + q * STEP;
            a_ok[q] = r < tl.rows;
            a_ptr[q] = a_src + source_row<GATE_UP>(slot_token, tl.m0 + r, a_ok[q]) * K + chunk * CHUNK;
        }
        weight_halves<GATE_UP, BN>(w, tl.e, tl.nt, row, K, n_out, chunk * CHUNK, b_lo, b_hi);
    }

    // Issues the cp.async chunks of k-step kt into the stage at `base` (its
    // 1024-aligned shared address), then moves on (to the CTA's next tile
    // after the last k-step: tile blockIdx.x + j * gridDim.x).
    template <typename Next>
    __device__ __forceinline__ void issue(unsigned base, int K, int k_tiles, int my_tiles, Next&& next_tile) {
        const unsigned dst = base + dst0;
        const long long row_step = (long long)STEP * K;
        const int k0 = kt * BK;
#pragma unroll
        for (int q = 0; q < A_N; ++q) cp_async_16(dst + q * STEP * 128, a_ptr[q] + k0, a_ok[q]);
#pragma unroll
        for (int q = 0; q < B_N / 2; ++q) {
            cp_async_16(dst + A_BYTES + q * STEP * 128, b_lo + q * row_step + k0, true);
            cp_async_16(dst + A_BYTES + (q + B_N / 2) * STEP * 128, b_hi + q * row_step + k0, true);
        }
        if (++kt == k_tiles) {
            kt = 0;
            if (++j < my_tiles) next_tile(j);
        }
    }
};

// One k-step of one warpgroup: 4 wgmma m64n256k16 on the stage at smem
// address `stage_base` (A rows of this warpgroup, then B), one commit group.
__device__ __forceinline__ void mma_step(float (&acc)[ACC], unsigned stage_base, int wg, int kt) {
    constexpr unsigned SBO = 8 * 128;  // 8 rows of 128 bytes
    const unsigned sa = stage_base + wg * WG_ROWS * 128;
    const unsigned sb = stage_base + A_BYTES;
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
        wgmma_m64n256k16(acc, desc_sw128(sa + ks * 32, 16, SBO), desc_sw128(sb + ks * 32, 16, SBO),
                         ks > 0 || kt > 0);  // a tile's first wgmma starts from zero
    }
    wgmma_commit();
}

// The wide kernel: all 256 threads load
// (cp.async) and both warpgroups compute. out: act [rows][n_out] (GATE_UP) or
// y [rows][n_out].
template <bool GATE_UP>
__device__ __forceinline__ void wide_gemm(const bf16* __restrict__ a_src, const int* __restrict__ slot_token,
                                          const bf16* __restrict__ w, bf16* __restrict__ out,
                                          const int* __restrict__ expert_offsets,
                                          const int* __restrict__ tile_offsets, int experts, int K, int n_out) {
    extern __shared__ unsigned char smem_raw[];
    const int n_tiles = GATE_UP ? n_out / GATE_UP_COLS : n_out / BN;
    const int total = tile_offsets[experts] * n_tiles;
    if ((int)blockIdx.x >= total) return;
    const int my_tiles = (total - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const int k_tiles = K / BK;
    const int steps = my_tiles * k_tiles;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wg = warp / 4, wq = warp % 4;
    const unsigned smem0 = (smem_u32(smem_raw) + 1023u) & ~1023u;

    Loader<GATE_UP, THREADS> ld;
    ld.row = tid / ROW_CHUNKS;
    ld.chunk = tid % ROW_CHUNKS;
    ld.dst0 = (unsigned)swizzle16<128>(ld.row, ld.chunk);
    auto next_tile = [&](int j) {
        ld.point_at((int)blockIdx.x + j * (int)gridDim.x, n_tiles, a_src, slot_token, w, expert_offsets,
                    tile_offsets, experts, K, n_out);
    };
    next_tile(0);
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < steps) ld.issue(smem0 + (unsigned)(s * STAGE_BYTES), K, k_tiles, my_tiles, next_tile);
        cp_async_commit();
    }

    float acc[ACC];
#pragma unroll
    for (int q = 0; q < ACC; ++q) acc[q] = 0.f;
    unsigned char* epi = smem_raw + (smem0 - smem_u32(smem_raw)) + STAGES * STAGE_BYTES + wg * EPI_BYTES;

    // Tiles outside, k-steps inside with one uniform wait (wait_group 1): an
    // epilogue inside the k-loop made ptxas wait for every wgmma at the loop's
    // back edge. The load side runs on across tiles (step s is global).
    int s = 0;
    for (int c_j = 0; c_j < my_tiles; ++c_j) {
        const Tile ct =
            tile_at<BM>((int)blockIdx.x + c_j * (int)gridDim.x, n_tiles, expert_offsets, tile_offsets, experts);
        for (int kt = 0; kt < k_tiles; ++kt, ++s) {
            cp_async_wait<AHEAD - 1>();
            fence_proxy_async();  // cp.async writes -> the tensor cores' (async proxy) reads
            __syncthreads();      // step s landed for all; every wgmma up to s-2 is done
            mma_step(acc, smem0 + (unsigned)((s % STAGES) * STAGE_BYTES), wg, kt);
            // The stage of step s - 2 is free: refill it with step s + AHEAD.
            if (s + AHEAD < steps)
                ld.issue(smem0 + (unsigned)(((s + AHEAD) % STAGES) * STAGE_BYTES), K, k_tiles, my_tiles, next_tile);
            cp_async_commit();
            wgmma_wait<1>();
            fence_operands(acc);
        }
        wgmma_wait<0>();
        fence_operands(acc);
        if (GATE_UP) {
            store_act(acc, out, ct.m0, ct.rows, wg * WG_ROWS + wq * 16, ct.nt * GATE_UP_COLS, n_out, lane);
        } else {
            store_y(acc, out, ct, n_out, wg, wq, lane, epi);
        }
    }
    cp_async_wait<0>();
}

HEADROOM_MOE_GATE_UP_ENTRY(moe_gemm_gate_up_wide_bf16, wide_gemm, 1)
HEADROOM_MOE_DOWN_ENTRY(moe_gemm_down_wide_bf16, wide_gemm, 1)

}  // namespace headroom_moe_wide

