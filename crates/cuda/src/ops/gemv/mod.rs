//! Skinny bf16 GEMV for 1 ..= [`MAX_ROWS`] rows (decode), `gemv.cu`: one
//! launch computes up to [`MAX_MATS`] projections of the same input (a
//! layer's in_proj qkv/z/b/a or q/gate/k/v), reading each weight once for all
//! rows. The matrices' pointers and sizes travel by value in the kernel's
//! parameter struct ([`Params`]): no host-to-device copy per call. Work
//! comes in units of one output at one row and two at more rows; the grid is
//! persistent ([`CTAS_PER_SM`] CTAs per SM at most, each warp taking every
//! W-th unit) so every SM streams weights until the launch's end. Calls of
//! [`BLAS_FROM_BYTES`] of weights or more (the LM head) stay on cuBLAS
//! (`crate::ops::linear`).
//!
//! The kernels' loops are `gemv_body.cuh`, shared with the FP8 GEMV
//! (`crate::ops::fp8::gemv`), and so is what this file owns of the launch
//! beside the bf16 one: the constants, the unit plan ([`plan_units`]), the
//! persistent grid ([`grid_ctas`]), the choice of the 16-byte path
//! ([`vec_loads`]) and the parameter struct and its launch
//! ([`launch_params`]), generic over the format's matrix.

pub mod sources;

use crate::device::CudaDevice;
use crate::launch::{int, launch_packed_pdl};
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;

/// Most rows of one launch (`MAX_ROWS` in `gemv_body.cuh`, both formats).
pub const MAX_ROWS: usize = 8;
/// Most matrices of one launch (`MAX_MATS`).
pub const MAX_MATS: usize = 6;
/// Threads per CTA (`THREADS`) and its warps.
pub(crate) const THREADS: u32 = 128;
const WARPS: usize = THREADS as usize / 32;
/// Most CTAs per SM of the persistent grid (`CTAS_PER_SM`, the kernel's
/// `__launch_bounds__` minimum).
pub(crate) const CTAS_PER_SM: usize = 4;

/// Consecutive outputs of one unit at `rows` rows (`C` of the kernel).
fn outputs_per_unit(rows: usize) -> usize {
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

/// One bf16 matrix of a launch (`Bf16W::Mat` in `gemv.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Mat {
    w: u64,
    y: u64,
    n: i32,
    first_unit: i32,
}

/// The kernels' one parameter (`Params<F>` in `gemv_body.cuh`), passed by
/// value: the rows of x and up to [`MAX_MATS`] matrices `M` of the format
/// (its `F::Mat`), the unused ones zero.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Params<M> {
    x: u64,
    rows: i32,
    k: i32,
    out_f32: i32,
    count: i32,
    vec: i32,
    units: i32,
    m: [M; MAX_MATS],
}

/// Whether a launch takes the 16-byte path (`vec`): k a whole number of
/// chunks (`per_chunk` weights each), x and every weight 16-byte aligned.
pub(crate) fn vec_loads(
    k: usize,
    per_chunk: usize,
    x: u64,
    ws: impl IntoIterator<Item = u64>,
) -> bool {
    let aligned = |p: u64| p.is_multiple_of(16);
    k.is_multiple_of(per_chunk) && aligned(x) && ws.into_iter().all(aligned)
}

/// One GEMV launch of either format, but for its matrices.
pub(crate) struct Launch<'a> {
    /// The op that shape errors name.
    pub op: &'static str,
    pub entry: &'static str,
    /// x: `rows` · `k` bf16 at this address.
    pub x: u64,
    pub rows: usize,
    pub k: usize,
    /// bf16 or f32 outputs.
    pub out: Dtype,
    /// The 16-byte path ([`vec_loads`]).
    pub vec: bool,
    /// Outputs a unit (`C` of the entry).
    pub per_unit: usize,
    /// Each matrix's outputs.
    pub ns: &'a [usize],
}

/// Launches `l`: the units of its matrices ([`plan_units`]) on the
/// persistent grid ([`grid_ctas`]), `Params` of its x and the matrices,
/// the `i`-th made by `mat(i, its first unit)`.
///
/// # Safety
/// `l.entry` takes `Params<M>` (`M` its format's `Mat`, layout
/// unit-tested); x holds rows · k bf16 and each matrix `mat` makes its
/// weights (and scales) for n · k and its output rows · n of `out`; the
/// kernel reads only weights and scales before it waits for the previous
/// kernel (programmatic launch), so they must be written before any step
/// and never by a kernel that lets the next one start early.
pub(crate) unsafe fn launch_params<M: Copy + Default>(
    dev: &CudaDevice,
    l: Launch,
    mut mat: impl FnMut(usize, i32) -> OpResult<M>,
) -> OpResult<()> {
    let (first, units) = plan_units(l.per_unit, l.ns)?;
    let blocks = grid_ctas(units as usize, dev.sm_count);
    let mut p = Params {
        x: l.x,
        rows: int(l.op, "rows", l.rows)?,
        k: int(l.op, "in features", l.k)?,
        out_f32: i32::from(l.out == Dtype::F32),
        count: l.ns.len() as i32,
        vec: i32::from(l.vec),
        units,
        ..Params::default()
    };
    for (i, m) in p.m.iter_mut().take(l.ns.len()).enumerate() {
        *m = mat(i, first[i])?;
    }
    let mut params = [&mut p as *mut Params<M> as *mut c_void];
    // SAFETY: the caller's contract; the units cover every matrix's outputs
    // (`plan_units`) and the warps stride over them whatever the grid.
    launch_packed_pdl(dev, l.entry, (blocks, 1, 1), THREADS, &mut params)
}

/// Each matrix's first unit and the units of all, for matrices of `ns`
/// outputs at `per_unit` outputs a unit.
pub(crate) fn plan_units(per_unit: usize, ns: &[usize]) -> OpResult<([i32; MAX_MATS], i32)> {
    if ns.is_empty() || ns.len() > MAX_MATS {
        return Err(OpError::shape(
            "linear_many",
            format!("{} matrices in one launch (1 ..= {MAX_MATS})", ns.len()),
        ));
    }
    let mut first = [0i32; MAX_MATS];
    let mut total = 0usize;
    for (f, &n) in first.iter_mut().zip(ns) {
        *f = int("linear_many", "first unit", total)?;
        total = total
            .checked_add(n.div_ceil(per_unit))
            .ok_or_else(|| OpError::shape("linear_many", "unit count overflows"))?;
    }
    Ok((first, int("linear_many", "units", total)?))
}

/// CTAs of the persistent grid for `units` units on `sm_count` SMs: one
/// warp a unit up to [`CTAS_PER_SM`] CTAs per SM (at least one CTA).
pub(crate) fn grid_ctas(units: usize, sm_count: usize) -> u32 {
    let ctas = units
        .div_ceil(WARPS)
        .min(sm_count.max(1).saturating_mul(CTAS_PER_SM))
        .max(1);
    u32::try_from(ctas).unwrap_or(u32::MAX)
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
    let l = Launch {
        op: "linear",
        entry,
        x: x.ptr(),
        rows: x.rows,
        k: x.cols,
        out,
        // 8 bf16 a 16-byte chunk.
        vec: vec_loads(x.cols, 8, x.ptr(), ws.iter().map(|w| w.ptr())),
        per_unit: outputs_per_unit(x.rows),
        ns: &ns,
    };
    let mat = |i: usize, first_unit: i32| {
        Ok(Mat {
            w: ws[i].ptr(),
            y: ys[i].ptr(),
            n: int("linear", "out features", ws[i].rows)?,
            first_unit,
        })
    };
    // SAFETY: `entry` takes `Params<Mat>` (layout unit-tested); x holds
    // rows · k bf16, each W_i n_i · k bf16 and each y_i rows · n_i of `out`;
    // weights are uploaded (or initialised) before any step and never
    // written by a kernel that lets the next one start early.
    unsafe { launch_params(dev, l, mat)? };
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
        assert_eq!(source_constant(src, "CTAS_PER_SM"), CTAS_PER_SM);
        for rows in 1..=MAX_ROWS {
            let e = entry(rows).unwrap();
            let c = outputs_per_unit(rows);
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
        // static_assert in gemv.cu: sizeof(Bf16W::Mat) == 24,
        // sizeof(Params<Bf16W>) == 32 + 24 · MAX_MATS.
        assert_eq!(size_of::<Mat>(), 24);
        assert_eq!(offset_of!(Mat, n), 16);
        assert_eq!(offset_of!(Mat, first_unit), 20);
        assert_eq!(size_of::<Params<Mat>>(), 32 + 24 * MAX_MATS);
        assert_eq!(offset_of!(Params<Mat>, rows), 8);
        assert_eq!(offset_of!(Params<Mat>, vec), 24);
        assert_eq!(offset_of!(Params<Mat>, units), 28);
        assert_eq!(offset_of!(Params<Mat>, m), 32);
    }

    #[test]
    fn units_follow_each_other_and_cover_every_output() {
        // The GDN projections of 35B-A3B: qkv 8192, z 4096, b 32, a 32.
        let (first, total) = plan_units(2, &[8192, 4096, 32, 32]).unwrap();
        assert_eq!(&first[..4], &[0, 4096, 6144, 6160]);
        assert_eq!(total, 6176);
        // Odd outputs: 9 at 2 a unit is 5 units; 1 output is 1 unit.
        let (first, total) = plan_units(2, &[9, 1, 5]).unwrap();
        assert_eq!(&first[..3], &[0, 5, 6]);
        assert_eq!(total, 9);
        assert!(plan_units(2, &[]).is_err());
        assert!(plan_units(2, &[8; MAX_MATS + 1]).is_err());
        assert!(plan_units(1, &[usize::MAX, 1]).is_err());
    }

    #[test]
    fn the_grid_is_persistent_and_never_empty() {
        // 12,352 units on 132 SMs: 4 CTAs per SM, the warps stride over the rest.
        assert_eq!(grid_ctas(12_352, 132), 528);
        // 9 units: 3 CTAs of 4 warps (the last with 3 warps idle).
        assert_eq!(grid_ctas(9, 132), 3);
        assert_eq!(grid_ctas(1, 132), 1);
        assert_eq!(grid_ctas(0, 132), 1);
        assert_eq!(grid_ctas(100, 0), 4);
    }

    #[test]
    fn the_16_byte_path_needs_whole_chunks_and_aligned_pointers() {
        assert!(vec_loads(2048, 8, 256, [512, 1024]));
        assert!(vec_loads(2040, 8, 256, [512]));
        assert!(!vec_loads(2040, 16, 256, [512]));
        assert!(!vec_loads(2044, 8, 256, [512]));
        assert!(!vec_loads(2048, 8, 264, [512]));
        assert!(!vec_loads(2048, 16, 256, [512, 520]));
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
        crate::nvrtc::compile_sm90a_without_spills(&GEMV);
    }
}
