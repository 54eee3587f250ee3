//! Launchers of the gated-delta-rule kernels. The sequence tables are
//! kernel parameters passed by value (no host-to-device copy, no
//! synchronisation); their layouts and the tile constants here must match
//! the kernel sources (checked by the tests below).

use super::plan::SeqRun;
use super::sources::{GDN_CHUNKED, GDN_CHUNKED_FULL};
use super::GdnLaunch;
use crate::device::CudaDevice;
use crate::kernels::KernelSource;
use crate::CudaError;
use std::ffi::c_void;

/// Rows per chunk (`BT`).
pub const CHUNK: usize = 64;

/// Value columns per scan CTA: 32 (`Narrow`, 4 CTAs per head and sequence),
/// 64 (`Wide`, 2 CTAs, half the tile traffic) — the scans of
/// `gdn_chunked.cu` — or all 128 (`Full`, one CTA per head and
/// sequence owning the whole state, every chunk's tiles read once; the
/// fused scan of `gdn_chunked_full.cu`, sm_90a only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanWidth {
    Narrow,
    Wide,
    Full,
}

impl ScanWidth {
    /// Value columns per CTA.
    pub fn columns(self) -> usize {
        match self {
            ScanWidth::Narrow => 32,
            ScanWidth::Wide => 64,
            ScanWidth::Full => DIM,
        }
    }
    /// The scan kernel of this width.
    fn entry(self) -> &'static str {
        match self {
            ScanWidth::Narrow => "gdn_chunk_scan_narrow_bf16",
            ScanWidth::Wide => "gdn_chunk_scan_wide_bf16",
            ScanWidth::Full => SCAN_FULL_ENTRY,
        }
    }
    /// Tile stages in flight (`SCANL_NARROW_STAGES`, `SCANL_WIDE_STAGES`,
    /// `FUSED_STAGES`).
    pub fn stages(self) -> usize {
        match self {
            ScanWidth::Narrow => 3,
            ScanWidth::Wide | ScanWidth::Full => 2,
        }
    }
    /// The source of this width's scan.
    fn source(self) -> KernelSource {
        match self {
            ScanWidth::Narrow | ScanWidth::Wide => GDN_CHUNKED,
            ScanWidth::Full => GDN_CHUNKED_FULL,
        }
    }
    /// Whether this width's scan is built for `arch` (its source's
    /// [`KernelSource::builds_for`]): `Full` on [`SCAN_FULL_ARCH`] alone
    /// (wgmma), the narrow and wide scans on sm_90 and newer (their
    /// transposed tiles by `stmatrix`).
    pub fn runs_on(self, arch: &str) -> bool {
        self.source().builds_for(arch)
    }
    /// Threads of the scan kernel (eight warps; sixteen for `Full`).
    pub fn threads(self) -> usize {
        match self {
            ScanWidth::Narrow | ScanWidth::Wide => SCAN_THREADS,
            ScanWidth::Full => SCAN_FULL_THREADS,
        }
    }
    /// Dynamic shared memory of the scan kernel: `LiteCfg<BV, STAGES>::SMEM`
    /// (per stage Q, K `[64][136]`, P, Tβ `[64][72]`, V `[64][BV+8]` and the
    /// factors; then Sᵀ `[BV][136]` and Yᵀ, δᵀ, (kf·δ)ᵀ `[BV][72]`), or
    /// [`SCAN_FULL_SMEM`].
    pub fn smem_bytes(self) -> usize {
        if self == ScanWidth::Full {
            return SCAN_FULL_SMEM;
        }
        let bv = self.columns();
        let stage =
            2 * CHUNK * LD128 * 2 + 2 * CHUNK * LD64 * 2 + CHUNK * (bv + 8) * 2 + FAC_LITE * 4;
        self.stages() * stage + bv * LD128 * 2 + 3 * bv * LD64 * 2
    }
}

/// The prep kernel (`gdn_chunk_prep.cu`).
const PREP_ENTRY: &str = "gdn_chunk_prep_bf16";
/// The full-width scan (`gdn_chunked_fused_wgmma.cu`).
const SCAN_FULL_ENTRY: &str = "gdn_chunk_scan_full_bf16";
/// Threads of the full-width scan (`FUSED_WARPS` = 16 warps).
pub const SCAN_FULL_THREADS: usize = 512;
/// The only architecture the full-width scan is built for (wgmma).
pub const SCAN_FULL_ARCH: &str = "sm_90a";

/// Threads of the prep kernel (eight warps).
pub const PREP_THREADS: usize = 256;
/// Threads of the narrow and wide scans (eight warps).
pub const SCAN_THREADS: usize = 256;
/// Sequences per chunked launch (`gdn::MAX_SEQS`).
pub const MAX_SCAN_SEQS: usize = 128;
/// Sequences per decode launch (`gdn_rec::MAX_SEQS`).
pub const MAX_DECODE_SEQS: usize = 384;
/// f32 factors per (chunk, head) before the prep's `ef` (`FAC`):
/// qf, kf, e^{G_L} and padding.
pub const FAC: usize = 132;
/// f32 factors per (chunk, head) the prep writes (`FACL`): `FAC`, then
/// e^G/|k| per row.
pub const FAC_LITE: usize = FAC + CHUNK;
/// Value columns per recurrent CTA and its threads.
const REC_BV: usize = 32;
const REC_THREADS: usize = 128;

const DIM: usize = super::SUPPORTED_DIM;
const LD128: usize = DIM + 8;
const LD64: usize = CHUNK + 8;

/// Dynamic shared memory of the prep (`PREPL_SMEM`): the K/Q region and
/// the g/β vectors.
pub const PREP_SMEM: usize = 2 * CHUNK * LD128 * 2 + 3 * CHUNK * 4;
/// One stage of the full-width scan (`FW_STAGE`): Q and K unpadded
/// (SW128), P, Tβ, V, factors, rounded up to 1 KiB.
const SCAN_FULL_STAGE: usize =
    (2 * CHUNK * DIM * 2 + 2 * CHUNK * LD64 * 2 + CHUNK * LD128 * 2 + FAC_LITE * 4).div_ceil(1024)
        * 1024;
/// Dynamic shared memory of the full-width scan (`FUSED_WG_SMEM`): two
/// stages, Sᵀ `[128][128]` (SW128), δᵀ and (kf·δ)ᵀ `[128][72]`, and 1 KiB
/// of slack to align the tiles to 1 KiB.
pub const SCAN_FULL_SMEM: usize = 2 * SCAN_FULL_STAGE + DIM * DIM * 2 + 2 * DIM * LD64 * 2 + 1024;

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
// Several prep CTAs per SM (228 KiB, 1 KiB reserved per CTA).
const _: () = assert!(3 * (PREP_SMEM + 1024) <= 228 * 1024);
// One scan CTA per SM at every width (227 KiB of opt-in shared memory per block).
const _: () = assert!(SCAN_FULL_SMEM <= 227 * 1024);

/// Launch choices of benches and tests; production runs `Tuning::default()`
/// (the scan width from `scan_width_for`, no ablation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    /// The prefill scan width; `None`: `scan_width_for`.
    pub width: Option<ScanWidth>,
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

fn u32_of(v: usize, what: &str) -> Result<u32, CudaError> {
    u32::try_from(v).map_err(|_| CudaError::InvalidLaunch(format!("{what} {v} exceeds u32")))
}

/// Refuses `width` on a GPU of `arch` where its scan cannot run
/// ([`ScanWidth::runs_on`]).
fn check_width(arch: &str, width: ScanWidth) -> Result<(), CudaError> {
    if width.runs_on(arch) {
        return Ok(());
    }
    Err(match width {
        ScanWidth::Full => CudaError::Shape {
            op: "gdn full-width scan",
            detail: format!(
                "{SCAN_FULL_ENTRY} needs {SCAN_FULL_ARCH} (wgmma, {SCAN_FULL_SMEM} B of shared memory), not {arch}"
            ),
        },
        w => CudaError::Shape {
            op: "gdn chunked scan",
            detail: format!(
                "{} needs sm_{} or newer (stmatrix), not {arch}: the GDN prefill does not run on this GPU",
                w.entry(),
                w.source().min_sm().unwrap_or_default()
            ),
        },
    })
}

/// The chunked form over up to [`MAX_SCAN_SEQS`] sequences of 2+ rows: the
/// prep (one CTA per chunk and value head, all in parallel) writes Tβ = T·diag(β),
/// P and the factors (16.75 KiB per tile), then the scan of `width` walks
/// each sequence's chunks in order, streaming Q, K, V from qkv.
pub(super) fn chunked(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    group: &[SeqRun],
    width: ScanWidth,
    tuning: &Tuning,
) -> Result<(), CudaError> {
    assert!(group.len() <= MAX_SCAN_SEQS);
    // Refuse what the scan cannot run before anything is launched.
    check_width(&dev.arch, width)?;
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
    let (heads, seqs) = (u32_of(l.v_heads, "v_heads")?, group.len() as u32);

    let prep = dev.function(PREP_ENTRY)?;
    dev.set_dynamic_smem(prep, PREP_SMEM)?;
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
    let grid = (u32_of(chunks, "chunks")?, heads, 1);
    // SAFETY: validate() bounded every row and slot by the buffers; the scratch
    // holds `chunks × v_heads` tiles; params match the kernel signature.
    unsafe {
        dev.launch(
            prep,
            grid,
            (PREP_THREADS as u32, 1, 1),
            PREP_SMEM,
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
    // The narrow and wide scans: (column block, head, sequence); the
    // full-width scan: (head, sequence).
    let grid = match width {
        ScanWidth::Full => (heads, seqs, 1),
        w => ((DIM / w.columns()) as u32, heads, seqs),
    };
    let threads = (width.threads() as u32, 1, 1);
    // SAFETY: as above (every scan takes the same parameters); the scratch
    // buffers are freed to the stream-ordered pool only after this launch is
    // queued on the same stream.
    unsafe { dev.launch(scan, grid, threads, smem, &mut params) }
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
        GDN_CHUNKED, GDN_CHUNKED_FULL, GDN_CHUNK_PREP, GDN_DECODE, GDN_RECURRENT,
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
            GDN_CHUNKED_FULL.source,
        ] {
            assert_eq!(constant(c, "DK"), DIM);
            assert_eq!(constant(c, "DV"), DIM);
            assert_eq!(constant(c, "BT"), CHUNK);
            assert_eq!(constant(c, "MAX_SEQS"), MAX_SCAN_SEQS);
            assert_eq!(constant(c, "FAC"), FAC);
            assert_eq!(constant(c, "FACL"), FAC_LITE);
        }
        let c = GDN_CHUNKED_FULL.source;
        assert_eq!(constant(c, "FUSED_WARPS") * 32, SCAN_FULL_THREADS);
        assert_eq!(constant(c, "FUSED_STAGES"), ScanWidth::Full.stages());
        assert_eq!(GDN_CHUNKED_FULL.entry_points, [SCAN_FULL_ENTRY]);
        assert!(c.contains(&format!(
            "void __launch_bounds__(FUSED_THREADS, 1) {SCAN_FULL_ENTRY}("
        )));
        // The full-width source builds for sm_90a alone.
        assert_eq!(GDN_CHUNKED_FULL.required_arch(), Some(SCAN_FULL_ARCH));
        assert_eq!(GDN_CHUNKED.required_arch(), None);
        let c = GDN_CHUNKED.source;
        assert_eq!(constant(c, "BVL_NARROW"), ScanWidth::Narrow.columns());
        assert_eq!(constant(c, "BVL_WIDE"), ScanWidth::Wide.columns());
        assert_eq!(constant(c, "SCANL_WARPS") * 32, SCAN_THREADS);
        assert_eq!(
            constant(GDN_CHUNK_PREP.source, "PREPL_THREADS"),
            PREP_THREADS
        );
        assert_eq!(GDN_CHUNK_PREP.entry_points, [PREP_ENTRY]);
        for w in [ScanWidth::Narrow, ScanWidth::Wide] {
            assert!(GDN_CHUNKED.entry_points.contains(&w.entry()), "{w:?}");
        }
        let r = GDN_RECURRENT.source;
        assert_eq!(constant(r, "DK"), DIM);
        assert_eq!(constant(r, "DV"), DIM);
        assert_eq!(constant(r, "BV"), REC_BV);
        assert_eq!(constant(r, "PARTS") * 32, REC_THREADS);
        assert_eq!(constant(r, "MAX_SEQS"), MAX_DECODE_SEQS);
    }

    #[test]
    fn prep_and_scans_share_the_sequence_table_and_fragment_helpers() {
        let shared = |src| block(src, "struct SeqTable {", "void cp_async_wait_all()");
        let prep = shared(GDN_CHUNK_PREP.source);
        assert!(prep.contains("void frag_a("));
        for c in [GDN_CHUNKED.source, GDN_CHUNKED_FULL.source] {
            assert_eq!(shared(c), prep);
        }
    }

    #[test]
    fn shared_memory_matches_the_kernel_sources() {
        for w in [ScanWidth::Narrow, ScanWidth::Wide, ScanWidth::Full] {
            assert!(w.smem_bytes() <= 227 * 1024, "{w:?}");
        }
        // LiteCfg<32, 3> and LiteCfg<64, 2>, as computed by hand (and
        // static_assert-ed in gdn_chunked.cu).
        assert_eq!(ScanWidth::Narrow.smem_bytes(), 199_984);
        assert_eq!(ScanWidth::Wide.smem_bytes(), 171_552);
        let src = GDN_CHUNKED.source;
        assert!(src.contains("static constexpr int SMEM = VK + BV * LD64 * 2;"));
        assert!(src.contains("SCANL_SMEM_NARROW == 199984 && SCANL_SMEM_WIDE == 171552"));
        assert_eq!(
            constant(src, "SCANL_NARROW_STAGES"),
            ScanWidth::Narrow.stages()
        );
        assert_eq!(constant(src, "SCANL_WIDE_STAGES"), ScanWidth::Wide.stages());
        for entry in [
            "GDN_SCAN_ENTRY(gdn_chunk_scan_narrow_bf16, BVL_NARROW, SCANL_NARROW_STAGES, true)",
            "GDN_SCAN_ENTRY(gdn_chunk_scan_wide_bf16, BVL_WIDE, SCANL_WIDE_STAGES, false)",
        ] {
            assert!(src.contains(entry), "{entry}");
        }
        // Ks | Qs (2 [BT][LD128] bf16, later Af | Tf f32), then g/β.
        assert_eq!(PREP_SMEM, 35_584);
        for line in [
            "constexpr int PREPL_R1 = 2 * BT * LD128 * 2;",
            "constexpr int PREPL_G = PREPL_R1;",
            "constexpr int PREPL_SMEM = PREPL_G + 3 * BT * 4;",
        ] {
            assert!(GDN_CHUNK_PREP.source.contains(line), "{line}");
        }
        // Full width. Stage: Q, K SW128 [2][64][128 B] (16,384 B each), P, Tβ
        // [64][72], V [64][136], 196 f32 = 69,392 B, rounded up to 69,632;
        // S^T SW128 32,768; delta^T, (kf delta)^T [128][72] bf16; 1,024 B of
        // slack.
        assert_eq!(SCAN_FULL_STAGE, 69_632);
        assert_eq!(SCAN_FULL_SMEM, 209_920);
        let src = GDN_CHUNKED_FULL.source;
        for line in [
            "constexpr int FW_STAGE = (FW_F + FACL * 4 + 1023) / 1024 * 1024;",
            "constexpr int FW_HT = FUSED_STAGES * FW_STAGE;",
            "constexpr int FUSED_WG_SMEM = FW_END + 1024;",
            "static_assert(FW_STAGE == 69632 && FUSED_WG_SMEM == 209920, \"launch.rs SCAN_FULL_SMEM\");",
        ] {
            assert!(src.contains(line), "{line}");
        }
    }

    #[test]
    fn the_full_width_scan_is_refused_off_sm_90a() {
        for w in [ScanWidth::Narrow, ScanWidth::Wide, ScanWidth::Full] {
            assert!(check_width("sm_90a", w).is_ok(), "{w:?}");
        }
        for arch in ["sm_90", "sm_100a", "sm_120"] {
            assert!(check_width(arch, ScanWidth::Narrow).is_ok(), "{arch}");
            assert!(check_width(arch, ScanWidth::Wide).is_ok(), "{arch}");
            let err = check_width(arch, ScanWidth::Full).unwrap_err().to_string();
            assert!(err.contains("sm_90a") && err.contains(arch), "{err}");
        }
    }

    #[test]
    fn the_narrow_and_wide_scans_are_refused_below_sm_90() {
        for arch in ["sm_89", "sm_80", "compute_90", ""] {
            for w in [ScanWidth::Narrow, ScanWidth::Wide, ScanWidth::Full] {
                assert!(!w.runs_on(arch), "{w:?} on {arch:?}");
            }
            let err = check_width(arch, ScanWidth::Narrow)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("gdn_chunk_scan_narrow_bf16") && err.contains("sm_90 or newer"),
                "{err}"
            );
        }
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        for k in [
            GDN_CHUNK_PREP,
            GDN_CHUNKED,
            GDN_CHUNKED_FULL,
            GDN_RECURRENT,
            GDN_DECODE,
        ] {
            crate::nvrtc::compile_sm90a_without_spills(&k);
        }
    }
}
