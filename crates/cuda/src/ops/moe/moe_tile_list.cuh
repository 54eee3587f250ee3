// moe_tile_list.cuh: the grouped GEMMs' tile list as the kernels that walk it
// by index read it (moe_grouped_gemm_wide.cu, moe_grouped_gemm_stream.cu; the
// list itself: moe_grouped_gemm.cu's header). Each of those sources is
// compiled with this text in front of it.

namespace headroom_moe_tiles {

// One tile of the list: expert, first sorted row, valid rows, column tile.
struct Tile {
    int e, m0, rows, nt;
};

// Tile t of the list of BM-row tiles, each split into n_tiles column tiles
// (t = row tile * n_tiles + column tile).
template <int BM>
__device__ __forceinline__ Tile tile_at(int t, int n_tiles, const int* __restrict__ expert_offsets,
                                        const int* __restrict__ tile_offsets, int experts) {
    const int rt = t / n_tiles;
    int lo = 0, hi = experts;  // tile_offsets[lo] <= rt < tile_offsets[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tile_offsets[mid] <= rt) lo = mid; else hi = mid;
    }
    Tile tl;
    tl.e = lo;
    tl.m0 = expert_offsets[lo] + (rt - tile_offsets[lo]) * BM;
    tl.rows = min(BM, expert_offsets[lo + 1] - tl.m0);
    tl.nt = t % n_tiles;
    return tl;
}

}  // namespace headroom_moe_tiles
