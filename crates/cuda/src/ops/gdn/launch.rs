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
    pub fn columns(self) -> usize {
        match self {
            ScanWidth::Narrow => 32,
            ScanWidth::Wide => 64,
        }
    }
}

/// The prep kernel generation (`gdn_chunk_prep.cu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PrepKernel {
    /// `βv` and `βe^G k̂` row-major, written as vectors and read by
    /// `ldmatrix.trans`; the 3xTF32 split hoisted; the off-diagonal inverse
    /// block row by block row on 1–3 warps (gdn3). (Run 3's V2 was removed
    /// in gdn4.)
    V3,
    /// V3 with the off-diagonal inverse by 2×2 block doubling on all 8
    /// warps (critical path 9 → 3 16×16 products); gdn4 run 1: prep 1.002 →
    /// 0.977 ms at t = 32,768 (docs/perf/cuda-gdn.md).
    V4,
    /// V4 in three CTAs per SM (gdn5): 70,400 bytes of shared memory (P
    /// written from registers, the inverse's scratch in the unused upper
    /// blocks of T, T over the dead A) and ≤ 80 registers (W and U in two
    /// 64-column passes). Same products in the same order as V4. gdn5 run
    /// 1: prep 0.969 → 0.894 ms at 32k, 0.256 → 0.232 at 8k, 0.075 → 0.070
    /// at 2k.
    V5,
    /// V5 with the q/k rows normalised by 8 lanes each (16-byte accesses,
    /// 3 shuffle levels instead of 5, a quarter of the per-row scalar work
    /// per lane); same layout and resources as V5. The default since gdn5
    /// run 2: prep 0.896 → 0.790 ms at 32k, 0.235 → 0.208 at 8k, 0.068 →
    /// 0.061 at 2k (docs/perf/cuda-gdn.md).
    #[default]
    V6,
}

impl PrepKernel {
    fn entry(self) -> &'static str {
        match self {
            PrepKernel::V3 => "gdn_chunk_prep_v3_bf16",
            PrepKernel::V4 => "gdn_chunk_prep_v4_bf16",
            PrepKernel::V5 => "gdn_chunk_prep_v5_bf16",
            PrepKernel::V6 => "gdn_chunk_prep_v6_bf16",
        }
    }
    /// Dynamic shared memory of the prep kernel (`PREP_SMEM` / `PREP5_SMEM`).
    pub fn smem_bytes(self) -> usize {
        match self {
            PrepKernel::V3 | PrepKernel::V4 => PREP_SMEM,
            PrepKernel::V5 | PrepKernel::V6 => PREP5_SMEM,
        }
    }
}

/// The scan kernel generation (`gdn_chunked.cu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ScanKernel {
    /// A transposed copy of `kf·K` per chunk for the state update, two
    /// tile stages (run 4's kernels).
    V2,
    /// `Kᵀ` by `ldmatrix.trans` from the streamed K tile, `kf` on `δ`; two
    /// tile stages.
    V3,
    /// V3 with three tile stages in flight on the narrow scan (the wide one
    /// does not fit three: it runs V3).
    V3Deep,
    /// V3Deep with the next chunk's loads issued after phase 1's products
    /// and the state update ahead of the output products and stores (gdn5):
    /// the same products per accumulator in the same order, the chain the
    /// next chunk waits for shortened. The wide scan runs V3 (the same
    /// reordering there was 1–3 % slower, gdn5 run 1). gdn5 run 1: narrow
    /// scan 1.298 → 1.233 ms at 32k, 0.331 → 0.314 at 8k.
    V5,
    /// V5 with phase 1's k-steps in two accumulator chains (4 mma deep
    /// instead of 8) and the bf16 δᵀ, (kf·δ)ᵀ and Sᵀ tiles written by
    /// `stmatrix.trans` (two instructions instead of 16 2-byte stores each);
    /// narrow only, the wide scan runs V3. The default since gdn5 run 2:
    /// narrow scan 1.232 → 1.117 ms at 32k; with prep V6 the rule takes
    /// 1.908 ms per layer at 32k, 0.496 at 8k, 0.139 at 2k.
    #[default]
    V6,
}

impl ScanKernel {
    /// Tile stages in flight for `width`.
    pub fn stages(self, width: ScanWidth) -> usize {
        match (self, width) {
            (ScanKernel::V3Deep | ScanKernel::V5 | ScanKernel::V6, ScanWidth::Narrow) => 3,
            _ => 2,
        }
    }
    fn entry(self, width: ScanWidth) -> &'static str {
        match (self, width) {
            (ScanKernel::V2, ScanWidth::Narrow) => "gdn_chunk_scan_bf16",
            (ScanKernel::V2, ScanWidth::Wide) => "gdn_chunk_scan_bv64_bf16",
            (ScanKernel::V3, ScanWidth::Narrow) => "gdn_chunk_scan_v3_bf16",
            (
                ScanKernel::V3 | ScanKernel::V3Deep | ScanKernel::V5 | ScanKernel::V6,
                ScanWidth::Wide,
            ) => "gdn_chunk_scan_v3_bv64_bf16",
            (ScanKernel::V3Deep, ScanWidth::Narrow) => "gdn_chunk_scan_v3deep_bf16",
            (ScanKernel::V5, ScanWidth::Narrow) => "gdn_chunk_scan_v5_bf16",
            (ScanKernel::V6, ScanWidth::Narrow) => "gdn_chunk_scan_v6_bf16",
        }
    }
    /// Dynamic shared memory of the scan kernel (`ScanCfg<BV, STAGES, TK>::SMEM`).
    pub fn smem_bytes(self, width: ScanWidth) -> usize {
        let bv = width.columns();
        let stage = 3 * CHUNK * LD128 * 2 + CHUNK * LD64 * 2 + CHUNK * (bv + 8) * 2 + FAC * 4;
        let (kt, vk) = match self {
            ScanKernel::V2 => (DIM * LD64 * 2, 0),
            ScanKernel::V3 | ScanKernel::V3Deep | ScanKernel::V5 | ScanKernel::V6 => {
                (0, bv * LD64 * 2)
            }
        };
        self.stages(width) * stage + kt + bv * LD128 * 2 + bv * LD64 * 2 + vk
    }
}
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
/// Value columns per recurrent CTA and its threads.
const REC_BV: usize = 32;
const REC_THREADS: usize = 128;

const DIM: usize = super::SUPPORTED_DIM;
const LD128: usize = DIM + 8;
const LD64: usize = CHUNK + 8;

/// Dynamic shared memory of the v3/v4 prep kernels (`PREP_SMEM`).
pub const PREP_SMEM: usize =
    2 * CHUNK * LD128 * 2 + CHUNK * LD64 * 2 + 2 * DIM * LD64 * 2 + 3 * CHUNK * 4;
/// Dynamic shared memory of the v5 prep kernel (`PREP5_SMEM`): the K/Q
/// region, βe^G k̂ and βv row-major, the g/β vectors.
pub const PREP5_SMEM: usize = 2 * CHUNK * LD128 * 2 + 2 * CHUNK * LD128 * 2 + 3 * CHUNK * 4;

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
// and ints before them; two prep CTAs share an SM.
const _: () = assert!(std::mem::size_of::<SeqTable>() + 10 * 8 <= 4096);
const _: () = assert!(std::mem::size_of::<DecodeTable>() + 8 * 8 <= 4096);
const _: () = assert!(2 * PREP_SMEM <= 227 * 1024);
// Three v5 prep CTAs per SM (228 KiB, 1 KiB reserved per CTA).
const _: () = assert!(3 * (PREP5_SMEM + 1024) <= 228 * 1024);

/// Kernel choices for benches and experiments; production runs
/// `Tuning::default()` (scan width from `scan_width_for`, no ablation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    /// The prefill scan width; `None`: `scan_width_for`.
    pub width: Option<ScanWidth>,
    /// The scan kernel generation.
    pub scan: ScanKernel,
    /// The prep kernel generation.
    pub prep: PrepKernel,
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

    let prep = dev.function(tuning.prep.entry())?;
    let prep_smem = tuning.prep.smem_bytes();
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
    let scan = dev.function(tuning.scan.entry(width))?;
    let smem = tuning.scan.smem_bytes(width);
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
    use crate::kernels::{GDN_CHUNKED, GDN_CHUNK_PREP, GDN_RECURRENT};

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
        for c in [GDN_CHUNK_PREP.source, GDN_CHUNKED.source] {
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
        assert!(shared(GDN_CHUNKED.source).contains("void frag_a("));
    }

    #[test]
    fn shared_memory_fits_one_hopper_cta() {
        for k in [
            ScanKernel::V2,
            ScanKernel::V3,
            ScanKernel::V3Deep,
            ScanKernel::V5,
            ScanKernel::V6,
        ] {
            for w in [ScanWidth::Narrow, ScanWidth::Wide] {
                assert!(k.smem_bytes(w) <= 227 * 1024, "{k:?} {w:?}");
            }
        }
        // The narrow v3 layouts (ScanCfg<32, 2|3, true>), as computed by hand.
        assert_eq!(ScanKernel::V3.smem_bytes(ScanWidth::Narrow), 152_096);
        assert_eq!(ScanKernel::V3Deep.smem_bytes(ScanWidth::Narrow), 219_184);
        assert!(GDN_CHUNK_PREP
            .source
            .contains("PREP_SMEM = PREP_R1 + PREP_TS + PREP_KBT + PREP_VBT + 3 * BT * 4;"));
        // v5: PREP_R1 (2 [BT][LD128] bf16), then Kb and Vb [BT][LD128], then g/β.
        assert_eq!(PREP5_SMEM, 70_400);
        for line in [
            "constexpr int PREP5_KB = PREP_R1;",
            "constexpr int PREP5_VB = PREP5_KB + BT * LD128 * 2;",
            "constexpr int PREP5_G = PREP5_VB + BT * LD128 * 2;",
            "constexpr int PREP5_SMEM = PREP5_G + 3 * BT * 4;",
        ] {
            assert!(GDN_CHUNK_PREP.source.contains(line), "{line}");
        }
        assert_eq!(PrepKernel::V5.smem_bytes(), PREP5_SMEM);
        assert_eq!(PrepKernel::V6.smem_bytes(), PREP5_SMEM);
        assert_eq!(PrepKernel::V4.smem_bytes(), PREP_SMEM);
        assert!(GDN_CHUNKED
            .source
            .contains("static constexpr int SMEM = VK + (TK ? BV * LD64 * 2 : 0);"));
        assert!(GDN_CHUNKED
            .source
            .contains("GDN_SCAN_ENTRY(gdn_chunk_scan_v3deep_bf16, BV_NARROW, 3, true, 3)"));
        // V5 / V6: v3deep's layout (ScanCfg<32, 3, true>) narrow, v3's kernel wide.
        for k in [ScanKernel::V5, ScanKernel::V6] {
            assert_eq!(
                k.smem_bytes(ScanWidth::Narrow),
                ScanKernel::V3Deep.smem_bytes(ScanWidth::Narrow)
            );
            assert_eq!(
                k.entry(ScanWidth::Wide),
                ScanKernel::V3.entry(ScanWidth::Wide)
            );
            assert_eq!(
                k.smem_bytes(ScanWidth::Wide),
                ScanKernel::V3.smem_bytes(ScanWidth::Wide)
            );
        }
        for entry in [
            "GDN_SCAN_ENTRY(gdn_chunk_scan_v5_bf16, BV_NARROW, 3, true, 5)",
            "GDN_SCAN_ENTRY(gdn_chunk_scan_v6_bf16, BV_NARROW, 3, true, 6)",
        ] {
            assert!(GDN_CHUNKED.source.contains(entry), "{entry}");
        }
    }
}
