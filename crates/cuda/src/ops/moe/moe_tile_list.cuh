// moe_tile_list.cuh: the grouped GEMMs' tile list (moe_grouped_gemm.cu's
// header describes it) as the kernels read it: the expert of a row tile (the
// binary search over tile_offsets), a row tile's rows, and tile t of the list
// for the kernels that walk it by index. Compiled in front of the grouped-GEMM
// sources moe_grouped_gemm_{wgmma,fp8,ws,stream}.cu (no warpgroup-MMA text
// here: the sm_80 stream source includes it). moe_grouped_gemm.cu keeps its
// own copy of the search: calling expert_of there changes its cubins (the
// loop's registers are numbered the other way round).

namespace headroom_moe_tiles {

// The expert that owns row tile rt (rt < tile_offsets[experts]).
__device__ __forceinline__ int expert_of(int rt, const int* __restrict__ tile_offsets, int experts) {
    int lo = 0, hi = experts;  // tile_offsets[lo] <= rt < tile_offsets[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tile_offsets[mid] <= rt) lo = mid; else hi = mid;
    }
    return lo;
}

// One tile of the list: expert, first sorted row, valid rows, column tile.
struct Tile {
    int e, m0, rows, nt;
};

// Row tile rt of BM rows, column tile nt.
template <int BM>
__device__ __forceinline__ Tile row_tile(int rt, int nt, const int* __restrict__ expert_offsets,
                                         const int* __restrict__ tile_offsets, int experts) {
    Tile tl;
    tl.e = expert_of(rt, tile_offsets, experts);
    tl.m0 = expert_offsets[tl.e] + (rt - tile_offsets[tl.e]) * BM;
    tl.rows = min(BM, expert_offsets[tl.e + 1] - tl.m0);
    tl.nt = nt;
    return tl;
}

// Tile t of the list of BM-row tiles, each split into n_tiles column tiles
// (t = row tile * n_tiles + column tile).
template <int BM>
__device__ __forceinline__ Tile tile_at(int t, int n_tiles, const int* __restrict__ expert_offsets,
                                        const int* __restrict__ tile_offsets, int experts) {
    return row_tile<BM>(t / n_tiles, t % n_tiles, expert_offsets, tile_offsets, experts);
}

}  // namespace headroom_moe_tiles
