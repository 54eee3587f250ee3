//! Skinny bf16 GEMV for 1 ..= [`MAX_ROWS`] rows (decode), `kernels/gemv.cu`:
//! one launch computes up to [`MAX_MATS`] projections of the same input (a
//! layer's in_proj qkv/z/b/a or q/gate/k/v), reading each weight once for all
//! rows. The matrices' pointers and sizes travel by value in the kernel's
//! parameter struct ([`Params`]): no host-to-device copy per call. cuBLAS at
//! one row runs one launch per matrix with host work each, and below the
//! bandwidth on these shapes (docs/perf/cuda-decode.md, "gemv").
//!
//! `HEADROOM_GEMV` (read once): `off` keeps cuBLAS for every `linear`; `c1`,
//! `c2`, `c4`, `a1`, `auto` pick the kernel ([`GemvKernel`]); unset or
//! anything else: [`DEFAULT`]. Calls of 256 MiB of weights or more (the LM
//! head) stay on cuBLAS.

use super::dense::linear_blas;
use super::launch::{int, launch_packed_pdl};
use super::memory::new_act;
use super::types::{CudaAct, CudaWeight};
use super::validate::bf16;
use crate::device::CudaDevice;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Most rows of one launch (`MAX_ROWS` in the kernel).
pub const MAX_ROWS: usize = 8;
/// Most matrices of one launch (`MAX_MATS`).
pub const MAX_MATS: usize = 6;
/// Most rows of the C4 kernel (more take C2).
const C4_ROWS: usize = 4;
/// Threads per CTA (`THREADS`) and its warps.
const THREADS: u32 = 128;
const WARPS: usize = THREADS as usize / 32;

/// The kernel's outputs per warp (`C`) and how a lane loads its 8 weight
/// chunks: to registers (`C*`: ptxas issues two or three, then waits) or
/// through shared memory by cp.async (`A1`: all in flight, two stages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemvKernel {
    C1,
    C2,
    C4,
    A1,
    /// C1 at one row, C2 at more: the fastest of the four on the 35B-A3B
    /// shapes but the attention group at one row (within 10 %), run 1 of
    /// `bench/gpu/check_gemv.sh` (docs/perf/cuda-decode.md, "gemv").
    Auto,
}

/// The kernel `linear` takes unless `HEADROOM_GEMV` names another.
pub const DEFAULT: GemvKernel = GemvKernel::Auto;

impl GemvKernel {
    /// The kernels themselves ([`GemvKernel::Auto`] picks among them).
    pub const ALL: [GemvKernel; 4] = [
        GemvKernel::C1,
        GemvKernel::C2,
        GemvKernel::C4,
        GemvKernel::A1,
    ];

    /// Consecutive outputs one warp computes (`Auto`: at one row).
    pub fn outputs_per_warp(self) -> usize {
        match self {
            GemvKernel::C1 | GemvKernel::A1 | GemvKernel::Auto => 1,
            GemvKernel::C2 => 2,
            GemvKernel::C4 => 4,
        }
    }

    /// Its `HEADROOM_GEMV` value (`c1`, `c2`, `c4`, `a1`).
    pub fn name(self) -> &'static str {
        match self {
            GemvKernel::C1 => "c1",
            GemvKernel::C2 => "c2",
            GemvKernel::C4 => "c4",
            GemvKernel::A1 => "a1",
            GemvKernel::Auto => "auto",
        }
    }

    /// The kernel that runs `rows` rows when `self` is asked (C4 past
    /// [`C4_ROWS`] rows runs C2; `Auto` C1 at one row, C2 at more).
    pub fn for_rows(self, rows: usize) -> GemvKernel {
        match self {
            GemvKernel::C4 if rows > C4_ROWS => GemvKernel::C2,
            GemvKernel::Auto if rows <= 1 => GemvKernel::C1,
            GemvKernel::Auto => GemvKernel::C2,
            k => k,
        }
    }

    /// The entry point for `rows` rows (1 ..= [`MAX_ROWS`]; C4 1 ..= [`C4_ROWS`]).
    fn entry(self, rows: usize) -> Option<&'static str> {
        const C1: [&str; MAX_ROWS] = [
            "gemv_c1_r1",
            "gemv_c1_r2",
            "gemv_c1_r3",
            "gemv_c1_r4",
            "gemv_c1_r5",
            "gemv_c1_r6",
            "gemv_c1_r7",
            "gemv_c1_r8",
        ];
        const C2: [&str; MAX_ROWS] = [
            "gemv_c2_r1",
            "gemv_c2_r2",
            "gemv_c2_r3",
            "gemv_c2_r4",
            "gemv_c2_r5",
            "gemv_c2_r6",
            "gemv_c2_r7",
            "gemv_c2_r8",
        ];
        const A1: [&str; MAX_ROWS] = [
            "gemv_a1_r1",
            "gemv_a1_r2",
            "gemv_a1_r3",
            "gemv_a1_r4",
            "gemv_a1_r5",
            "gemv_a1_r6",
            "gemv_a1_r7",
            "gemv_a1_r8",
        ];
        // C4 up to 4 rows (C4_ROWS): at 8 its 32 accumulators spill.
        const C4: [&str; C4_ROWS] = ["gemv_c4_r1", "gemv_c4_r2", "gemv_c4_r3", "gemv_c4_r4"];
        let table: &[&str] = match self.for_rows(rows) {
            GemvKernel::C1 | GemvKernel::Auto => &C1,
            GemvKernel::C2 => &C2,
            GemvKernel::C4 => &C4,
            GemvKernel::A1 => &A1,
        };
        table.get(rows.checked_sub(1)?).copied()
    }
}

/// `HEADROOM_GEMV`'s value as a choice (`None`: cuBLAS).
fn parse(v: Option<&str>) -> Option<GemvKernel> {
    match v {
        Some("off" | "0" | "cublas") => None,
        Some("c1") => Some(GemvKernel::C1),
        Some("c2") => Some(GemvKernel::C2),
        Some("c4") => Some(GemvKernel::C4),
        Some("a1") => Some(GemvKernel::A1),
        Some("auto") => Some(GemvKernel::Auto),
        _ => Some(DEFAULT),
    }
}

/// The kernel chosen for this process (`HEADROOM_GEMV`, read once).
pub fn chosen() -> Option<GemvKernel> {
    static CHOSEN: OnceLock<Option<GemvKernel>> = OnceLock::new();
    *CHOSEN.get_or_init(|| parse(std::env::var("HEADROOM_GEMV").ok().as_deref()))
}

/// Weight bytes of one call from which cuBLAS runs it instead: the LM head
/// (248,320 × 2,048, 1 GB), where cuBLAS reads 4.33 TB/s against the GEMV's
/// 4.20–4.25 (run 1 of `bench/gpu/check_gemv.sh`); every other 35B-A3B
/// projection is under 64 MB.
const BLAS_FROM_BYTES: usize = 256 << 20;

/// The kernel a `linear` of `rows` rows by `weight_bytes` of matrices into
/// `out` takes, or `None` for cuBLAS.
pub(crate) fn takes(rows: usize, out: Dtype, weight_bytes: usize) -> Option<GemvKernel> {
    let fits = (1..=MAX_ROWS).contains(&rows)
        && matches!(out, Dtype::Bf16 | Dtype::F32)
        && weight_bytes < BLAS_FROM_BYTES;
    chosen().filter(|_| fits)
}

/// One matrix of a launch (`Mat` in the kernel).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Mat {
    w: u64,
    y: u64,
    n: i32,
    first_block: i32,
}

/// The kernel's one parameter (`Params`), passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Params {
    x: u64,
    rows: i32,
    k: i32,
    out_f32: i32,
    count: i32,
    vec: i32,
    pad: i32,
    m: [Mat; MAX_MATS],
}

/// Each matrix's first CTA and the grid's CTAs, for matrices of `ns` outputs.
fn plan_blocks(kernel: GemvKernel, ns: &[usize]) -> OpResult<([i32; MAX_MATS], u32)> {
    if ns.is_empty() || ns.len() > MAX_MATS {
        return Err(OpError::shape(
            "linear_many",
            format!("{} matrices in one launch (1 ..= {MAX_MATS})", ns.len()),
        ));
    }
    let per_cta = WARPS * kernel.outputs_per_warp();
    let mut first = [0i32; MAX_MATS];
    let mut total = 0usize;
    for (f, &n) in first.iter_mut().zip(ns) {
        *f = int("linear_many", "first block", total)?;
        total += n.div_ceil(per_cta);
    }
    let total = u32::try_from(int("linear_many", "blocks", total)?)
        .map_err(|_| OpError::shape("linear_many", "negative block count"))?;
    Ok((first, total))
}

/// The shapes of one launch: 1 ..= [`MAX_ROWS`] rows of `k` columns, 1 ..=
/// [`MAX_MATS`] matrices `(out, in)` with `in == k` and `out > 0`.
fn check_dims(rows: usize, k: usize, ws: &[(usize, usize)]) -> OpResult<()> {
    if !(1..=MAX_ROWS).contains(&rows) {
        return Err(OpError::shape(
            "linear",
            format!("gemv takes 1 ..= {MAX_ROWS} rows, got {rows}"),
        ));
    }
    if ws.is_empty() || ws.len() > MAX_MATS {
        return Err(OpError::shape(
            "linear_many",
            format!("{} matrices in one launch (1 ..= {MAX_MATS})", ws.len()),
        ));
    }
    for &(n, cols) in ws {
        if cols != k || n == 0 {
            return Err(OpError::shape(
                "linear",
                format!("input has {k} columns, weight [{n}][{cols}]"),
            ));
        }
        int("linear", "out features", n)?;
    }
    int("linear", "in features", k)?;
    Ok(())
}

/// `x · W_iᵀ` for each of `ws` (1 ..= [`MAX_MATS`]) in one launch of `kernel`,
/// outputs in `out` (bf16 or f32).
pub(crate) fn gemv(
    dev: &CudaDevice,
    kernel: GemvKernel,
    x: &CudaAct,
    ws: &[&CudaWeight],
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    bf16("linear", x)?;
    let dims = ws
        .iter()
        .map(|w| w.matrix("linear").map(|w| (w.rows, w.cols)))
        .collect::<OpResult<Vec<_>>>()?;
    check_dims(x.rows, x.cols, &dims)?;
    if !matches!(out, Dtype::Bf16 | Dtype::F32) {
        return Err(OpError::shape(
            "linear",
            format!("gemv writes bf16 or f32, not {out}"),
        ));
    }
    let kernel = kernel.for_rows(x.rows);
    let entry = kernel
        .entry(x.rows)
        .ok_or_else(|| OpError::shape("linear", format!("no gemv for {} rows", x.rows)))?;
    let ys = dims
        .iter()
        .map(|&(n, _)| new_act(dev, "linear", x.rows, n, out))
        .collect::<OpResult<Vec<_>>>()?;
    let ns: Vec<usize> = dims.iter().map(|d| d.0).collect();
    let (first, blocks) = plan_blocks(kernel, &ns)?;
    let aligned = |p: u64| p.is_multiple_of(16);
    let vec = x.cols.is_multiple_of(8) && aligned(x.ptr()) && ws.iter().all(|w| aligned(w.ptr()));
    let mut p = Params {
        x: x.ptr(),
        rows: int("linear", "rows", x.rows)?,
        k: int("linear", "in features", x.cols)?,
        out_f32: i32::from(out == Dtype::F32),
        count: ws.len() as i32,
        vec: i32::from(vec),
        ..Params::default()
    };
    for (i, (w, y)) in ws.iter().zip(&ys).enumerate() {
        p.m[i] = Mat {
            w: w.ptr(),
            y: y.ptr(),
            n: int("linear", "out features", w.rows)?,
            first_block: first[i],
        };
    }
    let mut params = [&mut p as *mut Params as *mut c_void];
    // SAFETY: `p` matches the kernel's `Params` (layout unit-tested); x holds
    // rows · k bf16, each W_i n_i · k bf16 and each y_i rows · n_i of `out`;
    // the grid covers every matrix's CTAs and no more (`plan_blocks`); the
    // kernel waits for the previous one before it reads x (programmatic launch).
    unsafe { launch_packed_pdl(dev, entry, (blocks, 1, 1), THREADS, &mut params)? };
    Ok(ys)
}

/// `x · W_iᵀ` for each of `ws`: groups of [`MAX_MATS`] matrices a launch on
/// `kernel`, or cuBLAS per matrix when `kernel` is `None`.
pub(crate) fn linear_many(
    dev: &CudaDevice,
    kernel: Option<GemvKernel>,
    x: &CudaAct,
    ws: &[&CudaWeight],
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    match kernel {
        Some(k) if (1..=MAX_ROWS).contains(&x.rows) => {
            let mut ys = Vec::with_capacity(ws.len());
            for group in ws.chunks(MAX_MATS) {
                ys.extend(gemv(dev, k, x, group, out)?);
            }
            Ok(ys)
        }
        _ => ws.iter().map(|w| linear_blas(dev, x, w, out)).collect(),
    }
}

impl super::CudaBackend {
    /// `x · W_iᵀ` for each of `ws` on the given GEMV kernel (`None`: cuBLAS,
    /// one GEMM per matrix), outputs in `out` (bf16 or f32): tests and the
    /// side-by-side bench call both paths in one process.
    pub fn linear_with(
        &self,
        x: &CudaAct,
        ws: &[&CudaWeight],
        kernel: Option<GemvKernel>,
        out: Dtype,
    ) -> OpResult<Vec<CudaAct>> {
        linear_many(&self.dev, kernel, x, ws, out)
    }

    /// The GEMV kernel `linear` takes for 1 ..= 8 rows (`HEADROOM_GEMV`), or `None`.
    pub fn gemv_kernel(&self) -> Option<GemvKernel> {
        chosen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{source_constant, source_of, GEMV};
    use std::mem::{offset_of, size_of};

    #[test]
    fn constants_and_entries_match_the_kernel_source() {
        let src = GEMV.source;
        assert_eq!(source_constant(src, "THREADS"), THREADS as usize);
        assert_eq!(source_constant(src, "MAX_ROWS"), MAX_ROWS);
        assert_eq!(source_constant(src, "MAX_MATS"), MAX_MATS);
        // C · U = 8 loads a lane; C · R outputs fit the 32 lanes that write them.
        for (k, line) in [
            (GemvKernel::C1, "HEADROOM_GEMV_ROWS(c1, 1, 8, false)"),
            (GemvKernel::C2, "HEADROOM_GEMV_ROWS(c2, 2, 4, false)"),
            (GemvKernel::A1, "HEADROOM_GEMV_ROWS(a1, 1, 8, true)"),
            (GemvKernel::C4, "HEADROOM_GEMV_ENTRY(c4, 4, 2, false, 4)"),
        ] {
            assert!(src.contains(line), "{line}");
            assert!(line.contains(&format!(", {}, ", k.outputs_per_warp())));
        }
        for k in GemvKernel::ALL {
            for rows in 1..=MAX_ROWS {
                let k = k.for_rows(rows);
                let e = k.entry(rows).unwrap();
                assert!(e.ends_with(&format!("_r{rows}")), "{e}");
                assert!(e.starts_with(&format!("gemv_{}", k.name())), "{e}");
                assert_eq!(source_of(e), Some(&GEMV));
            }
            assert_eq!(k.entry(0), None);
            assert_eq!(k.entry(MAX_ROWS + 1), None);
        }
        assert_eq!(GemvKernel::C4.entry(C4_ROWS + 1), Some("gemv_c2_r5"));
        assert_eq!(GemvKernel::Auto.entry(1), Some("gemv_c1_r1"));
        assert_eq!(GemvKernel::Auto.entry(2), Some("gemv_c2_r2"));
        assert_eq!(GemvKernel::Auto.for_rows(8), GemvKernel::C2);
        assert_eq!(GemvKernel::C4.for_rows(C4_ROWS + 1), GemvKernel::C2);
        assert_eq!(GEMV.entry_points.len(), 3 * MAX_ROWS + C4_ROWS);
    }

    #[test]
    fn params_layout_is_the_kernels() {
        // static_assert in gemv.cu: sizeof(Mat) == 24, sizeof(Params) == 32 + 24 · MAX_MATS.
        assert_eq!(size_of::<Mat>(), 24);
        assert_eq!(offset_of!(Mat, n), 16);
        assert_eq!(offset_of!(Mat, first_block), 20);
        assert_eq!(size_of::<Params>(), 32 + 24 * MAX_MATS);
        assert_eq!(offset_of!(Params, rows), 8);
        assert_eq!(offset_of!(Params, vec), 24);
        assert_eq!(offset_of!(Params, m), 32);
    }

    #[test]
    fn blocks_follow_each_other_and_cover_every_output() {
        // The GDN projections of 35B-A3B: qkv 8192, z 4096, b 32, a 32.
        let (first, total) = plan_blocks(GemvKernel::C2, &[8192, 4096, 32, 32]).unwrap();
        assert_eq!(&first[..4], &[0, 1024, 1536, 1540]);
        assert_eq!(total, 1544);
        // Odd outputs: 9 at 4 per CTA (C1) is 3 CTAs; 1 output is 1 CTA.
        let (first, total) = plan_blocks(GemvKernel::C1, &[9, 1, 5]).unwrap();
        assert_eq!(&first[..3], &[0, 3, 4]);
        assert_eq!(total, 6);
        let (_, total) = plan_blocks(GemvKernel::C4, &[248_320]).unwrap();
        assert_eq!(total, 248_320 / 16);
        assert!(plan_blocks(GemvKernel::C2, &[]).is_err());
        assert!(plan_blocks(GemvKernel::C2, &[8; MAX_MATS + 1]).is_err());
    }

    #[test]
    fn the_lm_head_stays_on_cublas() {
        let lm_head = 248_320 * 2048 * 2;
        let gdn_in = (8192 + 4096 + 32 + 32) * 2048 * 2;
        if chosen().is_some() {
            assert!(takes(1, Dtype::Bf16, gdn_in).is_some());
            assert!(takes(8, Dtype::F32, gdn_in).is_some());
        }
        assert_eq!(takes(1, Dtype::Bf16, lm_head), None);
        assert_eq!(takes(9, Dtype::Bf16, gdn_in), None);
        assert_eq!(takes(0, Dtype::Bf16, gdn_in), None);
        assert_eq!(takes(1, Dtype::F16, gdn_in), None);
    }

    #[test]
    fn shapes_are_checked_before_a_launch() {
        assert!(check_dims(1, 2048, &[(8192, 2048), (32, 2048)]).is_ok());
        assert!(check_dims(8, 7, &[(3, 7)]).is_ok());
        assert!(check_dims(0, 64, &[(8, 64)]).is_err());
        assert!(check_dims(MAX_ROWS + 1, 64, &[(8, 64)]).is_err());
        assert!(check_dims(1, 64, &[(8, 64), (8, 63)]).is_err());
        assert!(check_dims(1, 64, &[(0, 64)]).is_err());
        assert!(check_dims(1, 64, &[]).is_err());
        assert!(check_dims(1, 64, &[(8, 64); MAX_MATS + 1]).is_err());
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        let c = crate::nvrtc::compile(GEMV.name, GEMV.source, "sm_90a").unwrap();
        for e in GEMV.entry_points {
            assert_eq!(
                crate::nvrtc::spill_store_bytes(&c.log, e),
                Some(0),
                "{e}:\n{}",
                c.log
            );
        }
    }

    #[test]
    fn the_switch_reads_off_and_the_kernels() {
        assert_eq!(parse(Some("off")), None);
        assert_eq!(parse(Some("c1")), Some(GemvKernel::C1));
        for k in GemvKernel::ALL {
            assert_eq!(parse(Some(k.name())), Some(k));
        }
        assert_eq!(parse(None), Some(DEFAULT));
        assert_eq!(parse(Some("on")), Some(DEFAULT));
        assert_eq!(parse(Some("auto")), Some(GemvKernel::Auto));
    }
}
