//! The block-scaled FP8 GEMV for decode (`fp8_gemv.cu`): `y_i = x · W_iᵀ`
//! for 1 ..= [`MAX_ROWS`] rows of bf16 `x` and up to [`MAX_MATS`] FP8
//! matrices ([`Fp8Matrix`]) of the same `k` in one launch, f32
//! accumulation, bf16 or f32 out. The persistent grid, the units and their
//! plan are the bf16 GEMV's (`crate::ops::gemv`): the same constants, the
//! same launch shape; the matrices' pointers travel by value in the kernel's
//! parameter struct (`Params<Fp8W>`, the bf16 GEMV's generic `Params`);
//! the kernels' loops are the bf16 GEMV's too (`gemv_body.cuh`), so this
//! file owns only the FP8 format's part of the launch: its checks, its
//! matrices (`Mat`, with the scales) and its choice of entry.

use super::{need, Fp8Matrix};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{int, mul};
use crate::ops::gemv::{launch_params, vec_loads, Launch, CTAS_PER_SM, THREADS};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// Most rows and matrices of one launch: the bf16 GEMV's (one
/// `gemv_body.cuh`).
pub use crate::ops::gemv::{MAX_MATS, MAX_ROWS};

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

/// One FP8 matrix of a launch (`Fp8W::Mat` in `fp8_gemv.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Mat {
    w: u64,
    s: u64,
    y: u64,
    n: i32,
    first_unit: i32,
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
    let l = Launch {
        op: OP,
        entry,
        x: x.ptr(),
        rows,
        k,
        out,
        // 16 e4m3 a 16-byte chunk.
        vec: vec_loads(k, 16, x.ptr(), ms.iter().map(|m| m.w.w.ptr())),
        per_unit: c,
        ns: &ns,
    };
    let mat = |i: usize, first_unit: i32| {
        let m = &ms[i];
        Ok(Mat {
            w: m.w.w.ptr(),
            s: m.w.scale_inv.ptr(),
            y: m.y.ptr(),
            n: int(OP, "out features", m.w.n)?,
            first_unit,
        })
    };
    // SAFETY: `entry` takes `Params<Mat>` (layout unit-tested); x holds
    // rows · k bf16, each W_i n_i · k bytes, its scales ceil(n_i/128) ·
    // ceil(k/128) f32 and each y_i rows · n_i of `out` (`check`); weights
    // and scales are uploaded before any step and never written by a kernel.
    unsafe { launch_params(dev, l, mat) }
}

#[cfg(test)]
mod tests {
    use super::super::sources::FP8_GEMV;
    use super::*;
    use crate::kernels::{source_constant, source_of};
    use crate::ops::gemv::Params;
    use std::mem::{offset_of, size_of};

    #[test]
    fn constants_and_entries_match_the_kernel_source() {
        let src = FP8_GEMV.source;
        // One header (gemv_body.cuh) for both formats' launch constants.
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
        // static_assert in fp8_gemv.cu: sizeof(Fp8W::Mat) == 32,
        // sizeof(Params<Fp8W>) == 32 + 32 · MAX_MATS.
        assert_eq!(size_of::<Mat>(), 32);
        assert_eq!(offset_of!(Mat, s), 8);
        assert_eq!(offset_of!(Mat, y), 16);
        assert_eq!(offset_of!(Mat, n), 24);
        assert_eq!(offset_of!(Mat, first_unit), 28);
        assert_eq!(size_of::<Params<Mat>>(), 32 + 32 * MAX_MATS);
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        crate::nvrtc::compile_sm90a_without_spills(&FP8_GEMV);
    }
}
