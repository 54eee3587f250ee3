//! Launchers of the gated-delta-rule kernels. The sequence tables are
//! kernel parameters passed by value (no host-to-device copy, no
//! synchronisation); their layouts and the tile constants here must match
//! the kernel sources (checked by the tests below).

use super::plan::SeqRun;
use super::GdnLaunch;
use crate::device::CudaDevice;
use crate::CudaError;
use std::ffi::c_void;

/// Rows per chunk (`BT`).
pub const CHUNK: usize = 64;
/// Value columns per scan CTA: 32 (`BV_NARROW`, 4 CTAs per head) or 64
/// (`BV_WIDE`, 2 CTAs per head, half the tile traffic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanWidth {
    Narrow,
    Wide,
}

impl ScanWidth {
    /// Value columns per CTA.
    pub fn columns(self) -> usize {
        match self {
            ScanWidth::Narrow => 32,
            ScanWidth::Wide => 64,
        }
    }
    /// The scan kernel of this width (`gdn_chunked.cu`).
    fn entry(self) -> &'static str {
        match self {
            ScanWidth::Narrow => "gdn_chunk_scan_narrow_bf16",
            ScanWidth::Wide => "gdn_chunk_scan_wide_bf16",
        }
    }
    /// Tile stages in flight (`SCAN_NARROW_STAGES`, `SCAN_WIDE_STAGES`).
    pub fn stages(self) -> usize {
        match self {
            ScanWidth::Narrow => 3,
            ScanWidth::Wide => 2,
        }
    }
    /// Dynamic shared memory of the scan kernel (`ScanCfg<BV, STAGES>::SMEM`).
    pub fn smem_bytes(self) -> usize {
        let bv = self.columns();
        let stage = 3 * CHUNK * LD128 * 2 + CHUNK * LD64 * 2 + CHUNK * (bv + 8) * 2 + FAC * 4;
        self.stages() * stage + bv * LD128 * 2 + 2 * bv * LD64 * 2
    }
    /// The lite scan of this width (`gdn_chunked_lite.cu`; same columns and
    /// stages as [`Self::entry`]).
    fn lite_entry(self) -> &'static str {
        match self {
            ScanWidth::Narrow => "gdn_chunk_scan_lite_narrow_bf16",
            ScanWidth::Wide => "gdn_chunk_scan_lite_wide_bf16",
        }
    }
    /// Dynamic shared memory of the lite scan (`LiteCfg<BV, STAGES>::SMEM`):
    /// per stage Q, K `[64][136]`, P, Tβ `[64][72]`, V `[64][BV+8]` and the
    /// factors; then Sᵀ `[BV][136]` and Yᵀ, δᵀ, (kf·δ)ᵀ `[BV][72]`.
    pub fn lite_smem_bytes(self) -> usize {
        let bv = self.columns();
        let stage =
            2 * CHUNK * LD128 * 2 + 2 * CHUNK * LD64 * 2 + CHUNK * (bv + 8) * 2 + FAC_LITE * 4;
        self.stages() * stage + bv * LD128 * 2 + 3 * bv * LD64 * 2
    }
}

/// Which chunked pair runs (`Tuning::form`): the production prep and scan
/// (`Wu`: prep writes W = T·(βe^G K̂) and U = T·βV, the scan forms
/// δ = U − W·S0), the lite pair (`Lite`: prep writes Tβ = T·diag(β), the
/// scan forms δ = Tβ·(V − diag(e^G/|k|)·K·S0); docs/perf/cuda-gdn.md,
/// "Session 13, branch gdnlite"), or the lite prep with the fused
/// full-width scan (`Fused`: the lite scan's algebra, one CTA per (value
/// head, sequence) owning the whole 128 × 128 state; the scan width is
/// ignored; "Session 13, branch gdnfused"), or the same with its K·S0 / Q·S0
/// products on warpgroup MMA (`FusedWgmma`, sm_90a only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChunkForm {
    #[default]
    Wu,
    Lite,
    Fused,
    FusedWgmma,
}

/// The prep kernel (`gdn_chunk_prep.cu`).
const PREP_ENTRY: &str = "gdn_chunk_prep_bf16";
/// The lite prep kernel (`gdn_chunk_prep_lite.cu`).
const PREP_LITE_ENTRY: &str = "gdn_chunk_prep_lite_bf16";
/// The fused full-width scan (`gdn_chunked_fused.cu`).
const SCAN_FUSED_ENTRY: &str = "gdn_chunk_scan_fused_bf16";
/// The fused scan with phase 1 on wgmma (`gdn_chunked_fused_wgmma.cu`).
const SCAN_FUSED_WGMMA_ENTRY: &str = "gdn_chunk_scan_fused_wgmma_bf16";
/// Threads of the fused scans (`FUSED_WARPS` = 16 warps).
pub const SCAN_FUSED_THREADS: usize = 512;

/// Threads of the prep kernel (eight warps).
pub const PREP_THREADS: usize = 256;
/// Threads of the scan kernel (eight warps).
pub const SCAN_THREADS: usize = 256;
/// Sequences per chunked launch (`gdn::MAX_SEQS`).
pub const MAX_SCAN_SEQS: usize = 128;
/// Sequences per decode launch (`gdn_rec::MAX_SEQS`).
pub const MAX_DECODE_SEQS: usize = 384;
/// f32 factors per (chunk, head) (`FAC`).
pub const FAC: usize = 132;
/// f32 factors per (chunk, head) of the lite pair (`FACL`): `FAC`, then
/// e^G/|k| per row.
pub const FAC_LITE: usize = FAC + CHUNK;
/// Value columns per recurrent CTA and its threads.
const REC_BV: usize = 32;
const REC_THREADS: usize = 128;

const DIM: usize = super::SUPPORTED_DIM;
const LD128: usize = DIM + 8;
const LD64: usize = CHUNK + 8;

/// Dynamic shared memory of the prep kernel (`PREP_SMEM`): the K/Q region,
/// βe^G k̂ and βv row-major, the g/β vectors.
pub const PREP_SMEM: usize = 2 * CHUNK * LD128 * 2 + 2 * CHUNK * LD128 * 2 + 3 * CHUNK * 4;
/// Dynamic shared memory of the lite prep (`PREPL_SMEM`): the K/Q region and
/// the g/β vectors.
pub const PREP_LITE_SMEM: usize = 2 * CHUNK * LD128 * 2 + 3 * CHUNK * 4;
/// Dynamic shared memory of the fused scan (`FUSED_SMEM`): two stages of
/// Q, K, V `[64][136]`, P, Tβ `[64][72]` and the lite factors; then Sᵀ
/// `[128][136]`, δᵀ and (kf·δ)ᵀ `[128][72]`.
pub const SCAN_FUSED_SMEM: usize = 2
    * (3 * CHUNK * LD128 * 2 + 2 * CHUNK * LD64 * 2 + FAC_LITE * 4)
    + DIM * LD128 * 2
    + 2 * DIM * LD64 * 2;
/// One stage of the wgmma fused scan (`FW_STAGE`): Q and K unpadded
/// (SW128), P, Tβ, V, factors, rounded up to 1 KiB.
const FUSED_WGMMA_STAGE: usize =
    (2 * CHUNK * DIM * 2 + 2 * CHUNK * LD64 * 2 + CHUNK * LD128 * 2 + FAC_LITE * 4).div_ceil(1024)
        * 1024;
/// Dynamic shared memory of the wgmma fused scan (`FUSED_WG_SMEM`): two
/// stages, Sᵀ `[128][128]` (SW128), δᵀ and (kf·δ)ᵀ `[128][72]`, and 1 KiB
/// of slack to align the tiles to 1 KiB.
pub const SCAN_FUSED_WGMMA_SMEM: usize =
    2 * FUSED_WGMMA_STAGE + DIM * DIM * 2 + 2 * DIM * LD64 * 2 + 1024;

#[repr(C)]
struct SeqTable {
    n: i32,
    total_chunks: i32,
    slot: [i32; MAX_SCAN_SEQS],
    first: [i32; MAX_SCAN_SEQS],
    rows: [i32; MAX_SCAN_SEQS],
    chunk0: [i32; MAX_SCAN_SEQS],
}

#[repr(C)]
struct DecodeTable {
    n: i32,
    slot: [i32; MAX_DECODE_SEQS],
    row: [i32; MAX_DECODE_SEQS],
}

// The tables fit the classic 4 KiB of kernel parameters with the pointers
// and ints before them.
const _: () = assert!(std::mem::size_of::<SeqTable>() + 10 * 8 <= 4096);
const _: () = assert!(std::mem::size_of::<DecodeTable>() + 8 * 8 <= 4096);
// Three prep CTAs per SM (228 KiB, 1 KiB reserved per CTA).
const _: () = assert!(3 * (PREP_SMEM + 1024) <= 228 * 1024);
// One fused scan CTA per SM (227 KiB of opt-in shared memory per block).
const _: () = assert!(SCAN_FUSED_SMEM <= 227 * 1024);
const _: () = assert!(SCAN_FUSED_WGMMA_SMEM <= 227 * 1024);

/// Launch choices of benches; production runs `Tuning::default()` (scan
/// width from `scan_width_for`, the `Wu` pair, no ablation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    /// The prefill scan width; `None`: `scan_width_for`.
    pub width: Option<ScanWidth>,
    /// The prep + scan pair.
    pub form: ChunkForm,
    /// Timing ablations of the scan (its `opts`): 1 = no tile loads after the
    /// first chunk, 2 = no arithmetic, 4 = no scan launched (prep alone). Any
    /// non-zero value gives wrong results.
    pub scan_ablation: u32,
}

fn param<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

fn i32_of(v: usize, what: &str) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| CudaError::InvalidLaunch(format!("{what} {v} exceeds i32")))
}

/// The chunked form over up to [`MAX_SCAN_SEQS`] sequences of 2+ rows.
pub(super) fn chunked(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    group: &[SeqRun],
    width: ScanWidth,
    tuning: &Tuning,
) -> Result<(), CudaError> {
    assert!(group.len() <= MAX_SCAN_SEQS);
    let mut tab = SeqTable {
        n: group.len() as i32,
        total_chunks: 0,
        slot: [0; MAX_SCAN_SEQS],
        first: [0; MAX_SCAN_SEQS],
        rows: [0; MAX_SCAN_SEQS],
        chunk0: [0; MAX_SCAN_SEQS],
    };
    let mut chunks = 0usize;
    for (i, s) in group.iter().enumerate() {
        tab.slot[i] = i32_of(s.slot, "slot")?;
        tab.first[i] = i32_of(s.first, "row")?;
        tab.rows[i] = i32_of(s.rows, "rows")?;
        tab.chunk0[i] = i32_of(chunks, "chunks")?;
        chunks += s.rows.div_ceil(CHUNK);
    }
    tab.total_chunks = i32_of(chunks, "chunks")?;
    let tiles = chunks
        .checked_mul(l.v_heads)
        .ok_or_else(|| CudaError::InvalidLaunch("scratch size overflows".into()))?;
    if tuning.form != ChunkForm::Wu {
        return chunked_lite(dev, l, group.len(), tab, chunks, tiles, width, tuning);
    }
    let bytes = |per: usize| {
        tiles
            .checked_mul(per)
            .ok_or_else(|| CudaError::InvalidLaunch("scratch size overflows".into()))
    };
    let w = dev.alloc(bytes(CHUNK * DIM * 2)?)?;
    let u = dev.alloc(bytes(CHUNK * DIM * 2)?)?;
    let p = dev.alloc(bytes(CHUNK * CHUNK * 2)?)?;
    let fac = dev.alloc(bytes(FAC * 4)?)?;
    let (mut hk, mut hv) = (l.k_heads as i32, l.v_heads as i32);
    let (mut qkv, mut g, mut beta) = (l.qkv.ptr(), l.g.ptr(), l.beta.ptr());
    let (mut wp, mut up, mut pp, mut fp) = (w.ptr(), u.ptr(), p.ptr(), fac.ptr());
    let (mut state, mut out) = (l.state.ptr(), l.out.ptr());

    let prep = dev.function(PREP_ENTRY)?;
    let prep_smem = PREP_SMEM;
    dev.set_dynamic_smem(prep, prep_smem)?;
    let mut params = [
        param(&mut qkv),
        param(&mut g),
        param(&mut beta),
        param(&mut wp),
        param(&mut up),
        param(&mut pp),
        param(&mut fp),
        param(&mut hk),
        param(&mut hv),
        param(&mut tab),
    ];
    let grid = (chunks as u32, l.v_heads as u32, 1);
    // SAFETY: validate() bounded every row and slot by the buffers; the scratch
    // holds `chunks × v_heads` tiles; params match the kernel signature.
    unsafe {
        dev.launch(
            prep,
            grid,
            (PREP_THREADS as u32, 1, 1),
            prep_smem,
            &mut params,
        )?
    };

    if tuning.scan_ablation & 4 != 0 {
        return Ok(());
    }
    let mut opts = (tuning.scan_ablation & 3) as i32;
    let scan = dev.function(width.entry())?;
    let smem = width.smem_bytes();
    dev.set_dynamic_smem(scan, smem)?;
    let mut params = [
        param(&mut qkv),
        param(&mut wp),
        param(&mut up),
        param(&mut pp),
        param(&mut fp),
        param(&mut state),
        param(&mut out),
        param(&mut hk),
        param(&mut hv),
        param(&mut tab),
        param(&mut opts),
    ];
    let grid = (
        (DIM / width.columns()) as u32,
        l.v_heads as u32,
        group.len() as u32,
    );
    // SAFETY: as above; the scratch buffers are freed to the stream-ordered
    // pool only after this launch is queued on the same stream.
    unsafe { dev.launch(scan, grid, (SCAN_THREADS as u32, 1, 1), smem, &mut params) }
}

/// A scan launch after the lite prep: entry, grid, threads, dynamic shared memory.
struct ScanLaunch {
    entry: &'static str,
    grid: (u32, u32, u32),
    threads: u32,
    smem: usize,
}

/// The scan that `form` (`Lite` or `Fused`) runs after the lite prep, or why
/// it cannot run.
fn lite_scan_launch(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    seqs: usize,
    width: ScanWidth,
    form: ChunkForm,
) -> Result<ScanLaunch, CudaError> {
    match form {
        ChunkForm::Fused | ChunkForm::FusedWgmma => {
            // The kernel is written for 128-wide heads and 64-row chunks
            // (checked against the source by the tests below) and needs
            // Hopper's shared memory (stmatrix, 214,560 B per CTA).
            if l.k_dim != DIM || l.v_dim != DIM {
                return Err(CudaError::Shape {
                    op: "gdn fused scan",
                    detail: format!(
                        "head dims {}/{}: the fused scan supports {DIM} only",
                        l.k_dim, l.v_dim
                    ),
                });
            }
            // wgmma exists on sm_90a alone (that source builds for it only).
            let (entry, smem, arch_ok) = if form == ChunkForm::Fused {
                (
                    SCAN_FUSED_ENTRY,
                    SCAN_FUSED_SMEM,
                    dev.arch.starts_with("sm_90"),
                )
            } else {
                (
                    SCAN_FUSED_WGMMA_ENTRY,
                    SCAN_FUSED_WGMMA_SMEM,
                    dev.arch == "sm_90a",
                )
            };
            if !arch_ok {
                return Err(CudaError::Shape {
                    op: "gdn fused scan",
                    detail: format!(
                        "{entry} needs sm_90a ({smem} B of shared memory, stmatrix, wgmma), not {}",
                        dev.arch
                    ),
                });
            }
            let heads = u32::try_from(l.v_heads)
                .map_err(|_| CudaError::InvalidLaunch("v_heads exceeds u32".into()))?;
            Ok(ScanLaunch {
                entry,
                grid: (heads, seqs as u32, 1),
                threads: SCAN_FUSED_THREADS as u32,
                smem,
            })
        }
        _ => Ok(ScanLaunch {
            entry: width.lite_entry(),
            grid: (
                (DIM / width.columns()) as u32,
                l.v_heads as u32,
                seqs as u32,
            ),
            threads: SCAN_THREADS as u32,
            smem: width.lite_smem_bytes(),
        }),
    }
}

/// The lite prep and the scan of `tuning.form` (`Lite`: the lite scan of
/// `width`; `Fused`: the fused full-width scan) over the sequences of `tab`
/// (`seqs` of them, `chunks` chunks, `tiles` = chunks × v_heads): prep
/// writes Tβ, P and factors (16.75 KiB per tile instead of 40.5), the scan
/// streams V from qkv.
#[allow(clippy::too_many_arguments)]
fn chunked_lite(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    seqs: usize,
    mut tab: SeqTable,
    chunks: usize,
    tiles: usize,
    width: ScanWidth,
    tuning: &Tuning,
) -> Result<(), CudaError> {
    // Refuse what the scan cannot run before anything is launched.
    let sl = lite_scan_launch(dev, l, seqs, width, tuning.form)?;
    let bytes = |per: usize| {
        tiles
            .checked_mul(per)
            .ok_or_else(|| CudaError::InvalidLaunch("scratch size overflows".into()))
    };
    let tb = dev.alloc(bytes(CHUNK * CHUNK * 2)?)?;
    let p = dev.alloc(bytes(CHUNK * CHUNK * 2)?)?;
    let fac = dev.alloc(bytes(FAC_LITE * 4)?)?;
    let (mut hk, mut hv) = (l.k_heads as i32, l.v_heads as i32);
    let (mut qkv, mut g, mut beta) = (l.qkv.ptr(), l.g.ptr(), l.beta.ptr());
    let (mut tp, mut pp, mut fp) = (tb.ptr(), p.ptr(), fac.ptr());
    let (mut state, mut out) = (l.state.ptr(), l.out.ptr());

    let prep = dev.function(PREP_LITE_ENTRY)?;
    dev.set_dynamic_smem(prep, PREP_LITE_SMEM)?;
    let mut params = [
        param(&mut qkv),
        param(&mut g),
        param(&mut beta),
        param(&mut tp),
        param(&mut pp),
        param(&mut fp),
        param(&mut hk),
        param(&mut hv),
        param(&mut tab),
    ];
    let grid = (chunks as u32, l.v_heads as u32, 1);
    // SAFETY: validate() bounded every row and slot by the buffers; the scratch
    // holds `chunks × v_heads` tiles; params match the kernel signature.
    unsafe {
        dev.launch(
            prep,
            grid,
            (PREP_THREADS as u32, 1, 1),
            PREP_LITE_SMEM,
            &mut params,
        )?
    };

    if tuning.scan_ablation & 4 != 0 {
        return Ok(());
    }
    let mut opts = (tuning.scan_ablation & 3) as i32;
    let scan = dev.function(sl.entry)?;
    dev.set_dynamic_smem(scan, sl.smem)?;
    let mut params = [
        param(&mut qkv),
        param(&mut tp),
        param(&mut pp),
        param(&mut fp),
        param(&mut state),
        param(&mut out),
        param(&mut hk),
        param(&mut hv),
        param(&mut tab),
        param(&mut opts),
    ];
    // SAFETY: as above (the fused scan takes the lite scans' parameters); the
    // scratch buffers are freed to the stream-ordered pool only after this
    // launch is queued on the same stream.
    unsafe { dev.launch(scan, sl.grid, (sl.threads, 1, 1), sl.smem, &mut params) }
}

/// The recurrent step over up to [`MAX_DECODE_SEQS`] one-row sequences.
pub(super) fn recurrent(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    group: &[SeqRun],
) -> Result<(), CudaError> {
    assert!(group.len() <= MAX_DECODE_SEQS);
    let mut tab = DecodeTable {
        n: group.len() as i32,
        slot: [0; MAX_DECODE_SEQS],
        row: [0; MAX_DECODE_SEQS],
    };
    for (i, s) in group.iter().enumerate() {
        tab.slot[i] = i32_of(s.slot, "slot")?;
        tab.row[i] = i32_of(s.first, "row")?;
    }
    let f = dev.function("gdn_recurrent_step_bf16")?;
    let (mut hk, mut hv) = (l.k_heads as i32, l.v_heads as i32);
    let (mut qkv, mut g, mut beta) = (l.qkv.ptr(), l.g.ptr(), l.beta.ptr());
    let (mut state, mut out) = (l.state.ptr(), l.out.ptr());
    let mut params = [
        param(&mut qkv),
        param(&mut g),
        param(&mut beta),
        param(&mut state),
        param(&mut out),
        param(&mut hk),
        param(&mut hv),
        param(&mut tab),
    ];
    let grid = ((DIM / REC_BV) as u32, l.v_heads as u32, group.len() as u32);
    // SAFETY: validate() bounded every row and slot by the buffers; params
    // match the kernel signature.
    unsafe { dev.launch(f, grid, (REC_THREADS as u32, 1, 1), 0, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gdn::sources::{
        GDN_CHUNKED, GDN_CHUNKED_FUSED, GDN_CHUNKED_FUSED_WGMMA, GDN_CHUNKED_LITE, GDN_CHUNK_PREP,
        GDN_CHUNK_PREP_LITE, GDN_RECURRENT,
    };

    use crate::kernels::source_constant as constant;

    /// The text of `src` from `from` through the end of the line holding `to`.
    fn block<'a>(src: &'a str, from: &str, to: &str) -> &'a str {
        let a = src.find(from).expect("start marker");
        let b = a + src[a..].find(to).expect("end marker");
        let e = b + src[b..].find('\n').unwrap_or(src.len() - b);
        &src[a..e]
    }

    #[test]
    fn launch_constants_match_the_kernel_sources() {
        for c in [
            GDN_CHUNK_PREP.source,
            GDN_CHUNKED.source,
            GDN_CHUNK_PREP_LITE.source,
            GDN_CHUNKED_LITE.source,
            GDN_CHUNKED_FUSED.source,
            GDN_CHUNKED_FUSED_WGMMA.source,
        ] {
            assert_eq!(constant(c, "DK"), DIM);
            assert_eq!(constant(c, "DV"), DIM);
            assert_eq!(constant(c, "BT"), CHUNK);
            assert_eq!(constant(c, "MAX_SEQS"), MAX_SCAN_SEQS);
            assert_eq!(constant(c, "FAC"), FAC);
        }
        let c = GDN_CHUNKED.source;
        assert_eq!(constant(c, "BV_NARROW"), ScanWidth::Narrow.columns());
        assert_eq!(constant(c, "BV_WIDE"), ScanWidth::Wide.columns());
        assert_eq!(constant(c, "SCAN_WARPS") * 32, SCAN_THREADS);
        assert_eq!(
            constant(GDN_CHUNK_PREP.source, "PREP_THREADS"),
            PREP_THREADS
        );
        for c in [
            GDN_CHUNK_PREP_LITE.source,
            GDN_CHUNKED_LITE.source,
            GDN_CHUNKED_FUSED.source,
            GDN_CHUNKED_FUSED_WGMMA.source,
        ] {
            assert_eq!(constant(c, "FACL"), FAC_LITE);
        }
        for (src, entry) in [
            (GDN_CHUNKED_FUSED, SCAN_FUSED_ENTRY),
            (GDN_CHUNKED_FUSED_WGMMA, SCAN_FUSED_WGMMA_ENTRY),
        ] {
            let c = src.source;
            assert_eq!(constant(c, "FUSED_WARPS") * 32, SCAN_FUSED_THREADS);
            assert_eq!(constant(c, "FUSED_STAGES"), 2);
            assert_eq!(src.entry_points, [entry]);
            assert!(c.contains(&format!(
                "void __launch_bounds__(FUSED_THREADS, 1) {entry}("
            )));
        }
        // The wgmma source builds for sm_90a alone; the mma.sync one anywhere.
        assert_eq!(GDN_CHUNKED_FUSED_WGMMA.required_arch(), Some("sm_90a"));
        assert_eq!(GDN_CHUNKED_FUSED.required_arch(), None);
        let c = GDN_CHUNKED_LITE.source;
        assert_eq!(constant(c, "BVL_NARROW"), ScanWidth::Narrow.columns());
        assert_eq!(constant(c, "BVL_WIDE"), ScanWidth::Wide.columns());
        assert_eq!(constant(c, "SCANL_WARPS") * 32, SCAN_THREADS);
        assert_eq!(
            constant(GDN_CHUNK_PREP_LITE.source, "PREPL_THREADS"),
            PREP_THREADS
        );
        let r = GDN_RECURRENT.source;
        assert_eq!(constant(r, "DK"), DIM);
        assert_eq!(constant(r, "DV"), DIM);
        assert_eq!(constant(r, "BV"), REC_BV);
        assert_eq!(constant(r, "PARTS") * 32, REC_THREADS);
        assert_eq!(constant(r, "MAX_SEQS"), MAX_DECODE_SEQS);
    }

    #[test]
    fn prep_and_scan_share_the_sequence_table_and_fragment_helpers() {
        let shared = |src| block(src, "struct SeqTable {", "void cp_async_wait_all()");
        assert_eq!(shared(GDN_CHUNK_PREP.source), shared(GDN_CHUNKED.source));
        for c in [
            GDN_CHUNK_PREP_LITE.source,
            GDN_CHUNKED_LITE.source,
            GDN_CHUNKED_FUSED.source,
            GDN_CHUNKED_FUSED_WGMMA.source,
        ] {
            assert_eq!(shared(c), shared(GDN_CHUNKED.source));
        }
        assert!(shared(GDN_CHUNKED.source).contains("void frag_a("));
    }

    #[test]
    fn shared_memory_fits_one_hopper_cta() {
        for w in [ScanWidth::Narrow, ScanWidth::Wide] {
            assert!(w.smem_bytes() <= 227 * 1024, "{w:?}");
        }
        // The narrow layout (ScanCfg<32, 3>) and the wide one (ScanCfg<64, 2>),
        // as computed by hand.
        assert_eq!(ScanWidth::Narrow.smem_bytes(), 219_184);
        assert_eq!(ScanWidth::Wide.smem_bytes(), 178_208);
        let src = GDN_CHUNKED.source;
        assert!(src.contains("static constexpr int SMEM = VK + BV * LD64 * 2;"));
        assert_eq!(
            constant(src, "SCAN_NARROW_STAGES"),
            ScanWidth::Narrow.stages()
        );
        assert_eq!(constant(src, "SCAN_WIDE_STAGES"), ScanWidth::Wide.stages());
        for entry in [
            "GDN_SCAN_ENTRY(gdn_chunk_scan_narrow_bf16, BV_NARROW, SCAN_NARROW_STAGES, true)",
            "GDN_SCAN_ENTRY(gdn_chunk_scan_wide_bf16, BV_WIDE, SCAN_WIDE_STAGES, false)",
        ] {
            assert!(src.contains(entry), "{entry}");
        }
        // PREP_R1 (2 [BT][LD128] bf16), then Kb and Vb [BT][LD128], then g/β.
        assert_eq!(PREP_SMEM, 70_400);
        for line in [
            "constexpr int PREP_KB = PREP_R1;",
            "constexpr int PREP_VB = PREP_KB + BT * LD128 * 2;",
            "constexpr int PREP_G = PREP_VB + BT * LD128 * 2;",
            "constexpr int PREP_SMEM = PREP_G + 3 * BT * 4;",
        ] {
            assert!(GDN_CHUNK_PREP.source.contains(line), "{line}");
        }
    }

    #[test]
    fn lite_shared_memory_matches_the_kernel_sources() {
        // LiteCfg<32, 3> and LiteCfg<64, 2>, as computed by hand (and
        // static_assert-ed in gdn_chunked_lite.cu).
        assert_eq!(ScanWidth::Narrow.lite_smem_bytes(), 199_984);
        assert_eq!(ScanWidth::Wide.lite_smem_bytes(), 171_552);
        let src = GDN_CHUNKED_LITE.source;
        assert!(src.contains("static constexpr int SMEM = VK + BV * LD64 * 2;"));
        assert!(src.contains("SCANL_SMEM_NARROW == 199984 && SCANL_SMEM_WIDE == 171552"));
        assert_eq!(
            constant(src, "SCANL_NARROW_STAGES"),
            ScanWidth::Narrow.stages()
        );
        assert_eq!(constant(src, "SCANL_WIDE_STAGES"), ScanWidth::Wide.stages());
        for entry in [
            "GDN_SCAN_LITE_ENTRY(gdn_chunk_scan_lite_narrow_bf16, BVL_NARROW, SCANL_NARROW_STAGES, true)",
            "GDN_SCAN_LITE_ENTRY(gdn_chunk_scan_lite_wide_bf16, BVL_WIDE, SCANL_WIDE_STAGES, false)",
        ] {
            assert!(src.contains(entry), "{entry}");
        }
        // Ks | Qs (2 [BT][LD128] bf16, later Af | Tf f32), then g/β.
        assert_eq!(PREP_LITE_SMEM, 35_584);
        for line in [
            "constexpr int PREPL_R1 = 2 * BT * LD128 * 2;",
            "constexpr int PREPL_G = PREPL_R1;",
            "constexpr int PREPL_SMEM = PREPL_G + 3 * BT * 4;",
        ] {
            assert!(GDN_CHUNK_PREP_LITE.source.contains(line), "{line}");
        }
    }

    #[test]
    fn fused_shared_memory_matches_the_kernel_source() {
        // Two stages of 3 x [64][136] + 2 x [64][72] bf16 + 196 f32
        // (71,440 B each), S^T [128][136], delta^T and (kf delta)^T
        // [128][72] bf16, as computed by hand and static_assert-ed in
        // gdn_chunked_fused.cu.
        assert_eq!(SCAN_FUSED_SMEM, 214_560);
        let src = GDN_CHUNKED_FUSED.source;
        for line in [
            "constexpr int FS_STAGE = FS_F + FACL * 4;",
            "constexpr int FS_HT = FUSED_STAGES * FS_STAGE;",
            "constexpr int FUSED_SMEM = FS_VK + DV * LD64 * 2;",
            "static_assert(FUSED_SMEM == 214560, \"launch.rs FUSED_SMEM\");",
        ] {
            assert!(src.contains(line), "{line}");
        }
    }

    #[test]
    fn fused_wgmma_shared_memory_matches_the_kernel_source() {
        // Stage: Q, K SW128 [2][64][128 B] (16,384 B each), P, Tβ [64][72],
        // V [64][136], 196 f32 = 69,392 B, rounded up to 69,632; S^T SW128
        // 32,768; delta^T, (kf delta)^T [128][72] bf16; 1,024 B of slack.
        assert_eq!(FUSED_WGMMA_STAGE, 69_632);
        assert_eq!(SCAN_FUSED_WGMMA_SMEM, 209_920);
        let src = GDN_CHUNKED_FUSED_WGMMA.source;
        for line in [
            "constexpr int FW_STAGE = (FW_F + FACL * 4 + 1023) / 1024 * 1024;",
            "constexpr int FW_HT = FUSED_STAGES * FW_STAGE;",
            "constexpr int FUSED_WG_SMEM = FW_END + 1024;",
            "static_assert(FW_STAGE == 69632 && FUSED_WG_SMEM == 209920, \"launch.rs SCAN_FUSED_WGMMA_SMEM\");",
        ] {
            assert!(src.contains(line), "{line}");
        }
    }
}
