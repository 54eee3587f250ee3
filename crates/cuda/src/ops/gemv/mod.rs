//! Skinny bf16 GEMV for 1 ..= [`MAX_ROWS`] rows (decode), `gemv.cu`: one
//! launch computes up to [`MAX_MATS`] projections of the same input (a
//! layer's in_proj qkv/z/b/a or q/gate/k/v), reading each weight once for all
//! rows. The matrices' pointers and sizes travel by value in the kernel's
//! parameter struct ([`Params`]): no host-to-device copy per call. A warp
//! computes one output at one row and two at more rows. Calls of
//! [`BLAS_FROM_BYTES`] of weights or more (the LM head) stay on cuBLAS
//! (`crate::ops::linear`).

pub mod sources;

use crate::device::CudaDevice;
use crate::launch::{int, launch_packed_pdl};
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;

/// Most rows of one launch (`MAX_ROWS` in the kernel).
pub const MAX_ROWS: usize = 8;
/// Most matrices of one launch (`MAX_MATS`).
pub const MAX_MATS: usize = 6;
/// Threads per CTA (`THREADS`) and its warps.
const THREADS: u32 = 128;
const WARPS: usize = THREADS as usize / 32;

/// Consecutive outputs one warp computes at `rows` rows (`C` of the kernel).
fn outputs_per_warp(rows: usize) -> usize {
    if rows <= 1 {
        1
    } else {
        2
    }
}

/// The entry point for `rows` rows (1 ..= [`MAX_ROWS`]).
fn entry(rows: usize) -> Option<&'static str> {
    const ENTRIES: [&str; MAX_ROWS] = [
        "gemv_c1_r1",
        "gemv_c2_r2",
        "gemv_c2_r3",
        "gemv_c2_r4",
        "gemv_c2_r5",
        "gemv_c2_r6",
        "gemv_c2_r7",
        "gemv_c2_r8",
    ];
    ENTRIES.get(rows.checked_sub(1)?).copied()
}

/// Weight bytes of one call from which cuBLAS runs it instead: the LM head
/// (248,320 × 2,048, 1 GB); every other 35B-A3B projection is under 64 MB.
pub const BLAS_FROM_BYTES: usize = 256 << 20;

/// Whether a `linear` of `rows` rows by `weight_bytes` of matrices into
/// `out` takes the GEMV (else cuBLAS).
pub(crate) fn takes(rows: usize, out: Dtype, weight_bytes: usize) -> bool {
    (1..=MAX_ROWS).contains(&rows)
        && matches!(out, Dtype::Bf16 | Dtype::F32)
        && weight_bytes < BLAS_FROM_BYTES
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

/// Each matrix's first CTA and the grid's CTAs, for matrices of `ns` outputs
/// at `per_warp` outputs a warp.
fn plan_blocks(per_warp: usize, ns: &[usize]) -> OpResult<([i32; MAX_MATS], u32)> {
    if ns.is_empty() || ns.len() > MAX_MATS {
        return Err(OpError::shape(
            "linear_many",
            format!("{} matrices in one launch (1 ..= {MAX_MATS})", ns.len()),
        ));
    }
    let per_cta = WARPS * per_warp;
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

/// `x · W_iᵀ` for each of `ws` (1 ..= [`MAX_MATS`]) in one launch, outputs
/// in `out` (bf16 or f32).
pub(crate) fn gemv(
    dev: &CudaDevice,
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
    let entry = entry(x.rows)
        .ok_or_else(|| OpError::shape("linear", format!("no gemv for {} rows", x.rows)))?;
    let ys = dims
        .iter()
        .map(|&(n, _)| new_act(dev, "linear", x.rows, n, out))
        .collect::<OpResult<Vec<_>>>()?;
    let ns: Vec<usize> = dims.iter().map(|d| d.0).collect();
    let (first, blocks) = plan_blocks(outputs_per_warp(x.rows), &ns)?;
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

/// `x · W_iᵀ` for each of `ws` (any number), [`MAX_MATS`] matrices a launch.
pub(crate) fn gemv_many(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    let mut ys = Vec::with_capacity(ws.len());
    for group in ws.chunks(MAX_MATS) {
        ys.extend(gemv(dev, x, group, out)?);
    }
    Ok(ys)
}

#[cfg(test)]
mod tests {
    use super::sources::GEMV;
    use super::*;
    use crate::kernels::{source_constant, source_of};
    use std::mem::{offset_of, size_of};

    #[test]
    fn constants_and_entries_match_the_kernel_source() {
        let src = GEMV.source;
        assert_eq!(source_constant(src, "THREADS"), THREADS as usize);
        assert_eq!(source_constant(src, "MAX_ROWS"), MAX_ROWS);
        assert_eq!(source_constant(src, "MAX_MATS"), MAX_MATS);
        for rows in 1..=MAX_ROWS {
            let e = entry(rows).unwrap();
            let c = outputs_per_warp(rows);
            assert_eq!(e, format!("gemv_c{c}_r{rows}"));
            assert_eq!(source_of(e), Some(&GEMV));
            // The instantiation has C outputs per warp, C · U = 8 loads a lane,
            // and its C · R outputs fit the 32 lanes that write them.
            let line = format!("GEMV_ENTRY(c{c}, {c}, {}, {rows})", 8 / c);
            assert!(src.contains(&line), "{line}");
            assert!(c * rows <= 32);
        }
        assert_eq!(entry(0), None);
        assert_eq!(entry(MAX_ROWS + 1), None);
        assert_eq!(GEMV.entry_points.len(), MAX_ROWS);
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
        let (first, total) = plan_blocks(2, &[8192, 4096, 32, 32]).unwrap();
        assert_eq!(&first[..4], &[0, 1024, 1536, 1540]);
        assert_eq!(total, 1544);
        // Odd outputs: 9 at 4 per CTA (one a warp) is 3 CTAs; 1 output is 1 CTA.
        let (first, total) = plan_blocks(1, &[9, 1, 5]).unwrap();
        assert_eq!(&first[..3], &[0, 3, 4]);
        assert_eq!(total, 6);
        assert!(plan_blocks(2, &[]).is_err());
        assert!(plan_blocks(2, &[8; MAX_MATS + 1]).is_err());
    }

    #[test]
    fn the_lm_head_stays_on_cublas() {
        let lm_head = 248_320 * 2048 * 2;
        let gdn_in = (8192 + 4096 + 32 + 32) * 2048 * 2;
        assert!(takes(1, Dtype::Bf16, gdn_in));
        assert!(takes(8, Dtype::F32, gdn_in));
        assert!(!takes(1, Dtype::Bf16, lm_head));
        assert!(!takes(9, Dtype::Bf16, gdn_in));
        assert!(!takes(0, Dtype::Bf16, gdn_in));
        assert!(!takes(1, Dtype::F16, gdn_in));
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
        let include = crate::CudaOptions::from_env().include_dir().unwrap();
        let c = crate::nvrtc::compile(GEMV.name, GEMV.source, "sm_90a", &include).unwrap();
        for e in GEMV.entry_points {
            assert_eq!(
                crate::nvrtc::spill_store_bytes(&c.log, e),
                Some(0),
                "{e}:\n{}",
                c.log
            );
        }
    }
}
