//! Which grouped-GEMM kernels run ([`GemmImpl`]), and for one call's shape
//! the entry point, shared memory and grid of each of the two GEMMs
//! ([`GemmKernel`]). The variants stay selectable side by side
//! (`HEADROOM_MOE_IMPL`) so a bench compares them in one process.

use super::{GEMM_BN, GEMM_SMEM_BYTES, GEMM_THREADS};

/// Which grouped-GEMM kernels run (same tile list and results up to rounding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmImpl {
    /// `moe_grouped_gemm.cu`: mma.sync m16n8k16, any sm_80+ GPU.
    MmaSync,
    /// `moe_grouped_gemm_wgmma.cu`: warpgroup MMA, Hopper (sm_90a) only; the
    /// down GEMM stores its fragments straight to y (4 bytes a thread).
    Wgmma,
    /// The wgmma tiles with the down GEMM's epilogue staged through shared
    /// memory (16-byte row-contiguous stores of y). Hopper only.
    WgmmaStagedY,
    /// `moe_grouped_gemm_wide.cu`: 128 x 256 tiles (wgmma m64n256k16), one CTA
    /// per SM, 4 stages, one wgmma group in flight; a grid of one CTA per tile.
    /// Shapes the wide tiles do not divide run that GEMM on `WgmmaStagedY`.
    Wide,
    /// [`GemmImpl::Wide`] on a persistent grid (one CTA per SM walking the
    /// tiles, the loads running on across tile boundaries).
    WidePersistent,
    /// The wide tiles warp-specialised, persistent: one loader warpgroup
    /// (cp.async) and two MMA warpgroups, stages handed over on mbarriers; a
    /// warpgroup whose 64 rows are past the tile's end issues no wgmma.
    WideWs,
    /// Per pass: [`GemmImpl::WidePersistent`] from [`AUTO_WIDE_PAIRS`]
    /// (token, k) pairs up, [`GemmImpl::WgmmaStagedY`] below (measured: the
    /// wide tiles lose at 2k tokens, win at 8k and 32k; docs/perf/cuda-moe.md).
    Auto,
}

/// Pairs per pass from which [`GemmImpl::Auto`] runs the wide tiles (8,192
/// tokens of top-8: the smallest measured size where they were faster).
pub const AUTO_WIDE_PAIRS: usize = 65_536;

/// Weight rows per wide tile (`BN` in `moe_grouped_gemm_wide.cu`).
pub const WIDE_BN: usize = 256;
/// Dynamic shared memory of a wide CTA (`SMEM_BYTES` there: 4 stages of
/// 128 x 64 A and 256 x 64 B, two 16 KiB epilogue buffers, alignment slack).
pub const WIDE_SMEM_BYTES: usize = 4 * (128 + WIDE_BN) * 64 * 2 + 2 * 64 * 128 * 2 + 1024;
/// Dynamic shared memory of a warp-specialised wide CTA (`WS_SMEM_BYTES`:
/// the wide layout plus 8 mbarriers).
pub const WS_SMEM_BYTES: usize = WIDE_SMEM_BYTES + 2 * 4 * 8;
/// Threads of a warp-specialised wide CTA (`WS_THREADS`: three warpgroups).
pub const WS_THREADS: usize = 384;

/// One grouped GEMM's kernel for a call: entry point, dynamic shared memory,
/// output columns per tile and whether the grid is persistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmKernel {
    pub entry: &'static str,
    pub smem: usize,
    /// Threads per CTA.
    pub threads: usize,
    /// Output columns (act for gate+up, y for down) one tile covers.
    pub tile_cols: usize,
    /// One CTA per SM walking the tiles (else one CTA per tile).
    pub persistent: bool,
}

impl GemmKernel {
    /// CTAs for `row_tiles` row tiles of `cols` output columns on `sms` SMs.
    pub fn grid(&self, row_tiles: usize, cols: usize, sms: usize) -> usize {
        let tiles = row_tiles * (cols / self.tile_cols);
        if self.persistent {
            tiles.min(sms.max(1))
        } else {
            tiles
        }
    }
}

impl GemmImpl {
    /// The kernels for an architecture: on `sm_90a` `Auto` (the persistent
    /// 128 x 256 kernels for large passes, wgmma with the staged y epilogue
    /// below; docs/perf/cuda-moe.md, moe5), mma.sync elsewhere. `HEADROOM_MOE_IMPL=mma|wgmma|staged|wide|wide_p|wide_ws|auto`
    /// overrides (the wgmma kernels only where the arch has them).
    pub fn for_arch(arch: &str) -> GemmImpl {
        let hopper = arch == "sm_90a";
        match std::env::var("HEADROOM_MOE_IMPL").as_deref() {
            Ok("mma") => GemmImpl::MmaSync,
            Ok("wgmma") if hopper => GemmImpl::Wgmma,
            Ok("wide") if hopper => GemmImpl::Wide,
            Ok("wide_p") if hopper => GemmImpl::WidePersistent,
            Ok("wide_ws") if hopper => GemmImpl::WideWs,
            Ok("staged") if hopper => GemmImpl::WgmmaStagedY,
            _ if hopper => GemmImpl::Auto,
            _ => GemmImpl::MmaSync,
        }
    }

    /// Whether the kernels need `sm_90a`.
    pub fn hopper_only(self) -> bool {
        self != GemmImpl::MmaSync
    }

    /// Entry points of the 128 x 128 kernels (gate+up, down).
    pub fn entries(self) -> (&'static str, &'static str) {
        match self {
            GemmImpl::MmaSync => ("moe_gemm_gate_up_bf16", "moe_gemm_down_bf16"),
            GemmImpl::Wgmma => ("moe_gemm_gate_up_wgmma_bf16", "moe_gemm_down_wgmma_bf16"),
            GemmImpl::WgmmaStagedY
            | GemmImpl::Wide
            | GemmImpl::WidePersistent
            | GemmImpl::WideWs
            | GemmImpl::Auto => ("moe_gemm_gate_up_wgmma_bf16", "moe_gemm_down_wgmma_s_bf16"),
        }
    }

    /// Dynamic shared memory of one 128 x 128 CTA (the wgmma tiles need a
    /// 1024-byte aligned base).
    pub fn smem_bytes(self) -> usize {
        match self {
            GemmImpl::MmaSync => GEMM_SMEM_BYTES,
            _ => GEMM_SMEM_BYTES + 1024,
        }
    }

    fn is_wide(self) -> bool {
        matches!(
            self,
            GemmImpl::Wide | GemmImpl::WidePersistent | GemmImpl::WideWs
        )
    }

    fn narrow(self, entry: &'static str, tile_cols: usize) -> GemmKernel {
        GemmKernel {
            entry,
            smem: self.smem_bytes(),
            threads: GEMM_THREADS,
            tile_cols,
            persistent: false,
        }
    }

    /// A wide kernel: `moe_gemm_{gate_up|down}_{wide|ws}_bf16` for `gemm`.
    fn wide(self, gemm: &str, tile_cols: usize) -> GemmKernel {
        let ws = self == GemmImpl::WideWs;
        let entry = match (gemm, ws) {
            ("gate_up", false) => "moe_gemm_gate_up_wide_bf16",
            ("gate_up", true) => "moe_gemm_gate_up_ws_bf16",
            (_, false) => "moe_gemm_down_wide_bf16",
            (_, true) => "moe_gemm_down_ws_bf16",
        };
        GemmKernel {
            entry,
            smem: if ws { WS_SMEM_BYTES } else { WIDE_SMEM_BYTES },
            threads: if ws { WS_THREADS } else { GEMM_THREADS },
            tile_cols,
            persistent: self != GemmImpl::Wide,
        }
    }

    /// The variant one pass of `pairs` (token, k) pairs runs: `Auto` resolved,
    /// every other variant itself.
    pub fn for_pass(self, pairs: usize) -> GemmImpl {
        match self {
            GemmImpl::Auto if pairs >= AUTO_WIDE_PAIRS => GemmImpl::WidePersistent,
            GemmImpl::Auto => GemmImpl::WgmmaStagedY,
            other => other,
        }
    }

    /// The gate+up kernel for `intermediate` columns of act (wide tiles need
    /// a multiple of 128).
    pub fn gate_up(self, intermediate: usize) -> GemmKernel {
        if self.is_wide() && intermediate.is_multiple_of(WIDE_BN / 2) {
            self.wide("gate_up", WIDE_BN / 2)
        } else {
            self.narrow(self.entries().0, GEMM_BN / 2)
        }
    }

    /// The down kernel for `hidden` columns of y (wide tiles need a multiple of 256).
    pub fn down(self, hidden: usize) -> GemmKernel {
        if self.is_wide() && hidden.is_multiple_of(WIDE_BN) {
            self.wide("down", WIDE_BN)
        } else {
            self.narrow(self.entries().1, GEMM_BN)
        }
    }
}
