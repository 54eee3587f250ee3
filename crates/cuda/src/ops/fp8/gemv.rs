//! The block-scaled FP8 GEMV for decode (`fp8_gemv.cu`): `y_i = x · W_iᵀ`
//! for 1 ..= [`MAX_ROWS`] rows of bf16 `x` and up to [`MAX_MATS`] FP8
//! matrices ([`Fp8Matrix`]) of the same `k` in one launch, f32
//! accumulation, bf16 or f32 out. The persistent grid, the units and their
//! plan are the bf16 GEMV's (`crate::ops::gemv`): the same constants, the
//! same launch shape; the matrices' pointers travel by value in the kernel's
//! parameter struct ([`Params`]).

use super::{need, Fp8Matrix};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{int, launch_packed_pdl, mul};
use crate::ops::gemv::{grid_ctas, plan_units, CTAS_PER_SM, THREADS};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;

/// Most rows of one launch (`MAX_ROWS` in the kernel).
pub const MAX_ROWS: usize = 8;
/// Most matrices of one launch (`MAX_MATS`).
pub const MAX_MATS: usize = 6;

const OP: &str = "fp8_gemv";

/// Consecutive outputs of one unit (`C` of the kernel) at `rows` rows for
/// matrices of `outputs` outputs in all on `sm_count` SMs: two from 2 rows
/// on; at one row two when half as many units still give every warp of
/// half the persistent grid one (twice the bytes in flight a warp at
/// k = 2048), else one.
fn outputs_per_unit(rows: usize, outputs: usize, sm_count: usize) -> usize {
    let grid_warps = sm_count.max(1) * CTAS_PER_SM * (THREADS as usize / 32);
    if rows > 1 || outputs / 2 >= grid_warps / 2 {
        2
    } else {
        1
    }
}

/// The entry point for `rows` rows (1 ..= [`MAX_ROWS`]) at `c` outputs a
/// unit (two at one row: `fp8_gemv_c2_r1`).
fn entry(rows: usize, c: usize) -> Option<&'static str> {
    if rows == 1 && c == 2 {
        return Some("fp8_gemv_c2_r1");
    }
    const ENTRIES: [&str; MAX_ROWS] = [
        "fp8_gemv_c1_r1",
        "fp8_gemv_c2_r2",
        "fp8_gemv_c2_r3",
        "fp8_gemv_c2_r4",
        "fp8_gemv_c2_r5",
        "fp8_gemv_c2_r6",
        "fp8_gemv_c2_r7",
        "fp8_gemv_c2_r8",
    ];
    ENTRIES.get(rows.checked_sub(1)?).copied()
}

/// One matrix of a launch (`Mat` in the kernel).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Mat {
    w: u64,
    s: u64,
    y: u64,
    n: i32,
    first_unit: i32,
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
    units: i32,
    m: [Mat; MAX_MATS],
}

/// One matrix and the buffer its output `[rows][n]` goes to.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Gemv<'a> {
    pub w: Fp8Matrix<'a>,
    pub y: &'a DeviceBuffer,
}

/// Checks a launch's shapes and buffers: 1 ..= [`MAX_ROWS`] rows of `k`
/// bf16 in `x`, 1 ..= [`MAX_MATS`] matrices of `k` columns, each output
/// buffer holding `rows · n` of `out`.
fn check(x: &DeviceBuffer, rows: usize, k: usize, ms: &[Fp8Gemv], out: Dtype) -> OpResult<()> {
    if !(1..=MAX_ROWS).contains(&rows) {
        return Err(OpError::shape(
            OP,
            format!("takes 1 ..= {MAX_ROWS} rows, got {rows}"),
        ));
    }
    if ms.is_empty() || ms.len() > MAX_MATS {
        return Err(OpError::shape(
            OP,
            format!("{} matrices in one launch (1 ..= {MAX_MATS})", ms.len()),
        ));
    }
    if !matches!(out, Dtype::Bf16 | Dtype::F32) {
        return Err(OpError::shape(OP, format!("writes bf16 or f32, not {out}")));
    }
    int(OP, "in features", k)?;
    need(OP, "x", x, mul(OP, mul(OP, rows, k)?, 2)?)?;
    for m in ms {
        m.w.check(OP)?;
        if m.w.k != k {
            return Err(OpError::shape(
                OP,
                format!("input has {k} columns, weight [{}][{}]", m.w.n, m.w.k),
            ));
        }
        int(OP, "out features", m.w.n)?;
        need(
            OP,
            "y",
            m.y,
            mul(OP, mul(OP, rows, m.w.n)?, out.size_bytes())?,
        )?;
    }
    Ok(())
}

/// `y_i = x · W_iᵀ` for each of `ms` (1 ..= [`MAX_MATS`], one `k`) in one
/// launch: `x` bf16 `[rows][k]`, each `y_i` `[rows][n_i]` of `out` (bf16 or
/// f32), every output written.
pub fn fp8_gemv(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    rows: usize,
    k: usize,
    ms: &[Fp8Gemv],
    out: Dtype,
) -> OpResult<()> {
    check(x, rows, k, ms, out)?;
    let ns: Vec<usize> = ms.iter().map(|m| m.w.n).collect();
    let c = outputs_per_unit(rows, ns.iter().sum(), dev.sm_count);
    let entry =
        entry(rows, c).ok_or_else(|| OpError::shape(OP, format!("no entry for {rows} rows")))?;
    let (first, units) = plan_units(c, &ns)?;
    let blocks = grid_ctas(units as usize, dev.sm_count);
    let aligned = |p: u64| p.is_multiple_of(16);
    let vec = k.is_multiple_of(16) && aligned(x.ptr()) && ms.iter().all(|m| aligned(m.w.w.ptr()));
    let mut p = Params {
        x: x.ptr(),
        rows: int(OP, "rows", rows)?,
        k: int(OP, "in features", k)?,
        out_f32: i32::from(out == Dtype::F32),
        count: ms.len() as i32,
        vec: i32::from(vec),
        units,
        ..Params::default()
    };
    for (i, m) in ms.iter().enumerate() {
        p.m[i] = Mat {
            w: m.w.w.ptr(),
            s: m.w.scale_inv.ptr(),
            y: m.y.ptr(),
            n: int(OP, "out features", m.w.n)?,
            first_unit: first[i],
        };
    }
    let mut params = [&mut p as *mut Params as *mut c_void];
    // SAFETY: `p` matches the kernel's `Params` (layout unit-tested); x holds
    // rows · k bf16, each W_i n_i · k bytes, its scales ceil(n_i/128) ·
    // ceil(k/128) f32 and each y_i rows · n_i of `out` (`check`); the units
    // cover every matrix's outputs (`plan_units`) and the warps stride over
    // them whatever the grid; the kernel reads only weights and scales before
    // it waits for the previous kernel (programmatic launch): they are
    // uploaded before any step and never written by a kernel.
    unsafe { launch_packed_pdl(dev, entry, (blocks, 1, 1), THREADS, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::super::sources::FP8_GEMV;
    use super::*;
    use crate::kernels::{source_constant, source_of};
    use std::mem::{offset_of, size_of};

    #[test]
    fn constants_and_entries_match_the_kernel_source() {
        let src = FP8_GEMV.source;
        // The grid plan is the bf16 GEMV's: its threads and CTAs per SM.
        assert_eq!(source_constant(src, "THREADS"), THREADS as usize);
        assert_eq!(source_constant(src, "CTAS_PER_SM"), CTAS_PER_SM);
        assert_eq!(source_constant(src, "MAX_ROWS"), MAX_ROWS);
        assert_eq!(source_constant(src, "MAX_MATS"), MAX_MATS);
        assert_eq!(source_constant(src, "BLOCK"), super::super::BLOCK);
        for rows in 1..=MAX_ROWS {
            for c in [1, 2] {
                if rows > 1 && c == 1 {
                    continue;
                }
                let e = entry(rows, c).unwrap();
                assert_eq!(e, format!("fp8_gemv_c{c}_r{rows}"));
                assert_eq!(source_of(e), Some(&FP8_GEMV));
                // U chunks per row in a group: 8 a lane in flight at one row,
                // 4 at more rows (what fits the 128 registers of 4 CTAs per SM
                // without spills).
                let u = if rows == 1 { 8 / c } else { 2 };
                let line = format!("FP8_GEMV_ENTRY(c{c}, {c}, {u}, {rows})");
                assert!(src.contains(&line), "{line}");
                assert!(c * rows <= 32);
            }
        }
        assert_eq!(entry(0, 2), None);
        assert_eq!(entry(MAX_ROWS + 1, 2), None);
        // Every row count, two entries at one row, and the experts' entry.
        assert_eq!(FP8_GEMV.entry_points.len(), MAX_ROWS + 2);
    }

    #[test]
    fn one_row_takes_two_outputs_a_unit_on_wide_launches_only() {
        // 132 SMs: a grid of 2,112 warps.
        assert_eq!(outputs_per_unit(1, 8192, 132), 2);
        assert_eq!(outputs_per_unit(1, 4096, 132), 2);
        assert_eq!(outputs_per_unit(1, 2048, 132), 1);
        assert_eq!(outputs_per_unit(1, 512, 132), 1);
        assert_eq!(outputs_per_unit(2, 1, 132), 2);
        assert_eq!(outputs_per_unit(8, 32, 0), 2);
    }

    #[test]
    fn params_layout_is_the_kernels() {
        // static_assert in fp8_gemv.cu: sizeof(Mat) == 32, sizeof(Params) == 32 + 32 · MAX_MATS.
        assert_eq!(size_of::<Mat>(), 32);
        assert_eq!(offset_of!(Mat, s), 8);
        assert_eq!(offset_of!(Mat, y), 16);
        assert_eq!(offset_of!(Mat, n), 24);
        assert_eq!(offset_of!(Mat, first_unit), 28);
        assert_eq!(size_of::<Params>(), 32 + 32 * MAX_MATS);
        assert_eq!(offset_of!(Params, rows), 8);
        assert_eq!(offset_of!(Params, vec), 24);
        assert_eq!(offset_of!(Params, units), 28);
        assert_eq!(offset_of!(Params, m), 32);
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        let include = crate::CudaOptions::from_env().include_dir().unwrap();
        let c = crate::nvrtc::compile(FP8_GEMV.name, FP8_GEMV.source, "sm_90a", &include).unwrap();
        for e in FP8_GEMV.entry_points {
            assert_eq!(
                crate::nvrtc::spill_store_bytes(&c.log, e),
                Some(0),
                "{e}:\n{}",
                c.log
            );
        }
    }
}
