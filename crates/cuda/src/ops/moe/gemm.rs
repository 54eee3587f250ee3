//! Which grouped-GEMM kernels a pass runs ([`GemmImpl`]: chosen per pass by
//! [`GemmImpl::for_pass`]), and for one call's shape the entry point, shared
//! memory and grid of each of the two GEMMs ([`GemmKernel`]).

use super::{GEMM_BN, GEMM_SMEM_BYTES, GEMM_THREADS, MAX_EXPERTS};

/// The grouped-GEMM kernels of one pass (same tile list and results up to
/// rounding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmImpl {
    /// `moe_grouped_gemm.cu`: mma.sync m16n8k16, any sm_80+ GPU.
    MmaSync,
    /// `moe_grouped_gemm_wgmma.cu`: 128 x 128 tiles on warpgroup MMA, the
    /// down GEMM's epilogue staged through shared memory (16-byte stores of
    /// y). Hopper (`sm_90a`) only.
    Wgmma,
    /// `moe_grouped_gemm_stream.cu`: the few-rows-per-expert regime, where
    /// the expert weights dominate the bytes: weights on the MMA's M side
    /// (128 weight rows per item), the expert's rows on N in n8 blocks (up to
    /// 32 a pass), a persistent grid of two CTAs per SM with one 5-stage
    /// cp.async ring running across items. mma.sync: any sm_80+ GPU.
    Stream,
    /// `moe_grouped_gemm_ws.cu`: 128 x 256 tiles (wgmma m64n256k16) on a
    /// persistent grid (one CTA per SM walking the tiles), warp-specialised:
    /// a producer warpgroup gathers A (cp.async) and loads B by TMA on
    /// full/empty mbarriers, the two MMA warpgroups wait on the full ones
    /// only (no CTA barrier in the k-loop). A GEMM whose shape the 128 x 256
    /// tiles do not divide runs on [`GemmImpl::Wgmma`], and so does a pass
    /// over more than [`WS_MAX_EXPERTS`] local experts. Hopper only.
    Ws,
}

/// Pairs per pass from which [`GemmImpl::for_pass`] runs [`GemmImpl::Ws`]
/// (2,048 tokens of top-8): on the H200 the warp-specialised kernels beat the
/// 128 x 128 wgmma ones and every other 128 x 256 form at 2,048, 8,192 and
/// 32,768 tokens of the 35B-A3B shape (docs/perf/cuda-moe.md, session 12:
/// both GEMMs 0.437 / 0.858 / 3.018 ms, the 128 x 128 tiles ≈ 0.488 ms at
/// 2,048 in moe5).
pub const WS_PAIRS: usize = 16_384;

/// Average (token, k) pairs per expert up to which [`GemmImpl::for_pass`]
/// runs the streaming kernels on Hopper (512 tokens of top-8 over 256 experts).
pub const STREAM_ROWS_PER_EXPERT: usize = 16;

/// Dynamic shared memory of a streaming CTA (`SMEM_BYTES` in
/// `moe_grouped_gemm_stream.cu`: 5 stages of 128 weight rows and 32 rows of 64 K
/// on a 1024-byte aligned base, then the tile and row offsets of up to
/// `MAX_EXPERTS` experts).
pub const STREAM_SMEM_BYTES: usize = 5 * (128 + 32) * 64 * 2 + 2 * (MAX_EXPERTS + 1) * 4 + 1024;

/// Architecture of the wgmma kernels.
const HOPPER: &str = "sm_90a";

/// Weight rows per warp-specialised tile (`BN` in `moe_grouped_gemm_ws.cu`
/// and in its FP8 form `moe_grouped_gemm_ws_fp8.cu`).
pub const WS_BN: usize = 256;

/// Whether the warp-specialised kernels' units (bf16 and FP8 alike: `WS_BN`
/// weight rows, i.e. `WS_BN / 2` act columns of gate+up or `WS_BN` y columns
/// of down) tile `n_out` output columns of the GEMM (`gate_up`: act's
/// intermediate, else y's hidden). Where they do not, that GEMM runs on its
/// family's narrower kernels.
pub fn ws_unit_fits(gate_up: bool, n_out: usize) -> bool {
    n_out.is_multiple_of(if gate_up { WS_BN / 2 } else { WS_BN })
}
/// Most local experts of the warp-specialised kernels (`MAX_EXPERTS` there:
/// their tile table in shared memory).
pub const WS_MAX_EXPERTS: usize = 256;
/// Dynamic shared memory of a warp-specialised gate+up CTA (`SMEM_GATE_UP`:
/// 4 stages of 128 x 64 A and 256 x 64 B, 8 mbarriers, the tile table,
/// alignment slack).
pub const WS_SMEM_GATE_UP: usize =
    4 * (128 + WS_BN) * 64 * 2 + 2 * 4 * 8 + (WS_MAX_EXPERTS + 1) * 4 + 1024;
/// Dynamic shared memory of a warp-specialised down CTA (`SMEM_DOWN`: the
/// gate+up layout and two 16 KiB epilogue buffers).
pub const WS_SMEM_DOWN: usize = WS_SMEM_GATE_UP + 2 * 64 * 128 * 2;
/// Threads of a warp-specialised CTA (`THREADS` in `moe_grouped_gemm_ws.cu`:
/// two MMA warpgroups and the producer warpgroup).
pub const WS_THREADS: usize = 3 * 128;

/// One grouped GEMM's kernel for a call: entry point, dynamic shared memory,
/// output columns per tile, CTAs per row tile and whether the grid is
/// persistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmKernel {
    pub entry: &'static str,
    pub smem: usize,
    /// Threads per CTA.
    pub threads: usize,
    /// Output columns (act for gate+up, y for down) one tile covers.
    pub tile_cols: usize,
    /// `ctas_per_sm` CTAs per SM walking the tiles (else one CTA per tile).
    pub persistent: bool,
    /// CTAs per SM of a persistent grid.
    pub ctas_per_sm: usize,
    /// Whether the kernel takes the weights' tensor map (rows of K, boxes of
    /// 128 rows, SW128) as its last parameter instead of the weights' pointer.
    pub tma_map: bool,
    /// CTAs per routing row tile of [`GEMM_BM`](super::GEMM_BM) rows (one
    /// tile's rows, or a share of them each).
    pub row_ctas: usize,
}

impl GemmKernel {
    /// `entry`'s kernel of `threads` threads and `smem` bytes of dynamic
    /// shared memory, `tile_cols` output columns a tile: one CTA a tile,
    /// the weights by pointer.
    pub(super) const fn new(
        entry: &'static str,
        smem: usize,
        threads: usize,
        tile_cols: usize,
    ) -> GemmKernel {
        GemmKernel {
            entry,
            smem,
            threads,
            tile_cols,
            persistent: false,
            ctas_per_sm: 1,
            tma_map: false,
            row_ctas: 1,
        }
    }

    /// The kernel on a persistent grid of `ctas_per_sm` CTAs per SM.
    const fn persistent_grid(self, ctas_per_sm: usize) -> GemmKernel {
        GemmKernel {
            persistent: true,
            ctas_per_sm,
            ..self
        }
    }

    /// The kernel taking the weights' tensor map instead of their pointer.
    const fn with_tma_map(self) -> GemmKernel {
        GemmKernel {
            tma_map: true,
            ..self
        }
    }

    /// The kernel with `row_ctas` CTAs a routing row tile.
    pub(super) const fn with_row_ctas(self, row_ctas: usize) -> GemmKernel {
        GemmKernel { row_ctas, ..self }
    }

    /// A warp-specialised kernel (`moe_grouped_gemm_ws.cu`, `_ws_fp8.cu`):
    /// [`WS_THREADS`] threads, one persistent CTA an SM, the weights' tensor
    /// map.
    pub(super) const fn warp_specialized(
        entry: &'static str,
        smem: usize,
        tile_cols: usize,
    ) -> GemmKernel {
        GemmKernel::new(entry, smem, WS_THREADS, tile_cols)
            .persistent_grid(1)
            .with_tma_map()
    }

    /// CTAs for `row_tiles` row tiles of `cols` output columns on `sms` SMs
    /// (a last column tile narrower than `tile_cols` counts: the FP8 down
    /// kernel's CTAs take up to two 128-column tiles).
    pub fn grid(&self, row_tiles: usize, cols: usize, sms: usize) -> usize {
        let tiles = row_tiles * self.row_ctas * cols.div_ceil(self.tile_cols);
        if self.persistent {
            tiles.min(sms.max(1) * self.ctas_per_sm)
        } else {
            tiles
        }
    }
}

impl GemmImpl {
    /// The kernels a pass of `pairs` (token, k) pairs routed over `experts`
    /// experts runs on `arch`: on `sm_90a` the streaming kernels up to
    /// [`STREAM_ROWS_PER_EXPERT`] pairs per expert on average, the
    /// warp-specialised 128 x 256 tiles from [`WS_PAIRS`] pairs up and the
    /// 128 x 128 wgmma tiles between; mma.sync elsewhere.
    pub fn for_pass(arch: &str, pairs: usize, experts: usize) -> GemmImpl {
        if arch != HOPPER {
            GemmImpl::MmaSync
        } else if pairs <= STREAM_ROWS_PER_EXPERT.saturating_mul(experts) {
            GemmImpl::Stream
        } else if pairs >= WS_PAIRS {
            GemmImpl::Ws
        } else {
            GemmImpl::Wgmma
        }
    }

    /// Whether the kernels need `sm_90a`.
    pub fn hopper_only(self) -> bool {
        matches!(self, GemmImpl::Wgmma | GemmImpl::Ws)
    }

    /// Entry points of the 128 x 128 kernels (gate+up, down).
    pub fn entries(self) -> (&'static str, &'static str) {
        match self {
            GemmImpl::MmaSync | GemmImpl::Stream => ("moe_gemm_gate_up_bf16", "moe_gemm_down_bf16"),
            GemmImpl::Wgmma | GemmImpl::Ws => {
                ("moe_gemm_gate_up_wgmma_bf16", "moe_gemm_down_wgmma_s_bf16")
            }
        }
    }

    /// Dynamic shared memory of one 128 x 128 CTA (the wgmma tiles need a
    /// 1024-byte aligned base; the streaming families run no 128 x 128 CTA
    /// and have their family's size).
    pub fn smem_bytes(self) -> usize {
        match self {
            GemmImpl::MmaSync | GemmImpl::Stream => GEMM_SMEM_BYTES,
            GemmImpl::Wgmma | GemmImpl::Ws => GEMM_SMEM_BYTES + 1024,
        }
    }

    fn narrow(self, entry: &'static str, tile_cols: usize) -> GemmKernel {
        GemmKernel::new(entry, self.smem_bytes(), GEMM_THREADS, tile_cols)
    }

    fn warp_specialized(entry: &'static str, smem: usize, tile_cols: usize) -> GemmKernel {
        GemmKernel::warp_specialized(entry, smem, tile_cols)
    }

    /// The family a pass over `local` experts runs: [`GemmImpl::Wgmma`] for
    /// [`GemmImpl::Ws`] past [`WS_MAX_EXPERTS`], else `self`.
    pub fn for_experts(self, local: usize) -> GemmImpl {
        if self == GemmImpl::Ws && local > WS_MAX_EXPERTS {
            GemmImpl::Wgmma
        } else {
            self
        }
    }

    /// The streaming kernel of this family (gate+up or down), or `None` for
    /// the other families.
    fn stream(self, gate_up: bool, tile_cols: usize) -> Option<GemmKernel> {
        let entry = match (self, gate_up) {
            (GemmImpl::Stream, true) => "moe_gemm_gate_up_stream_bf16",
            (GemmImpl::Stream, false) => "moe_gemm_down_stream_bf16",
            _ => return None,
        };
        Some(GemmKernel::new(entry, STREAM_SMEM_BYTES, GEMM_THREADS, tile_cols).persistent_grid(2))
    }

    /// The gate+up kernel for `intermediate` columns of act (the 128 x 256
    /// tiles need a multiple of 128).
    pub fn gate_up(self, intermediate: usize) -> GemmKernel {
        if let Some(k) = self.stream(true, GEMM_BN / 2) {
            k
        } else if self == GemmImpl::Ws && ws_unit_fits(true, intermediate) {
            Self::warp_specialized("moe_gemm_gate_up_ws_bf16", WS_SMEM_GATE_UP, WS_BN / 2)
        } else {
            self.narrow(self.entries().0, GEMM_BN / 2)
        }
    }

    /// The down kernel for `hidden` columns of y (the 128 x 256 tiles need a
    /// multiple of 256).
    pub fn down(self, hidden: usize) -> GemmKernel {
        if let Some(k) = self.stream(false, GEMM_BN) {
            k
        } else if self == GemmImpl::Ws && ws_unit_fits(false, hidden) {
            Self::warp_specialized("moe_gemm_down_ws_bf16", WS_SMEM_DOWN, WS_BN)
        } else {
            self.narrow(self.entries().1, GEMM_BN)
        }
    }
}
