//! The batched-experts FP8 GEMV of MoE decode (`fp8_gemv_experts` in
//! `fp8_gemv.cu`): for each pair `q` (a row and one of its routed experts,
//! `pairs = rows · top_k`), `y[q] = x[q / x_group] · W[ids[q]]ᵀ`, with the
//! experts' FP8 matrices stacked ([`Fp8Experts`]: e4m3 `[E][n][k]`, f32
//! scales `[E][ceil(n/128)][ceil(k/128)]`) and the expert of each pair on
//! the device (`ids`, i32, as the routing kernel writes them: read after
//! the kernel waits for the previous one). `x_group` = top_k for the
//! gate/up projection (a row's experts share its input), 1 for the down
//! projection (each pair its own activation row). An index out of range
//! makes its pair's outputs NaN. One output of one pair per warp unit, the
//! GEMV's persistent grid.

use super::{need, BLOCK};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{int, launch_packed_pdl, mul};
use crate::ops::gemv::{grid_ctas, THREADS};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;

const OP: &str = "fp8_gemv_experts";

/// Stacked block-scaled FP8 matrices of `experts` experts, each `[n][k]`.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Experts<'a> {
    /// e4m3 `[experts][n][k]`.
    pub w: &'a DeviceBuffer,
    /// f32 `[experts][ceil(n/128)][ceil(k/128)]`.
    pub scale_inv: &'a DeviceBuffer,
    pub experts: usize,
    pub n: usize,
    pub k: usize,
}

/// The kernel's parameter (`ExpertParams`), passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct ExpertParams {
    x: u64,
    ids: u64,
    w: u64,
    s: u64,
    y: u64,
    pairs: i32,
    x_group: i32,
    experts: i32,
    n: i32,
    k: i32,
    out_f32: i32,
    vec: i32,
    units: i32,
}

/// One launch's shapes: `pairs` pairs in groups of `x_group` per input row.
#[derive(Debug, Clone, Copy)]
pub struct ExpertsShape {
    pub pairs: usize,
    pub x_group: usize,
}

/// Checks the shapes and buffers of a launch; returns the units (pairs · n).
fn check(
    x: &DeviceBuffer,
    ids: &DeviceBuffer,
    s: ExpertsShape,
    w: &Fp8Experts,
    y: &DeviceBuffer,
    out: Dtype,
) -> OpResult<usize> {
    if w.experts == 0 || w.n == 0 || w.k == 0 {
        return Err(OpError::shape(
            OP,
            format!("empty experts [{}][{}][{}]", w.experts, w.n, w.k),
        ));
    }
    if s.x_group == 0 || !s.pairs.is_multiple_of(s.x_group) {
        return Err(OpError::shape(
            OP,
            format!("{} pairs in groups of {}", s.pairs, s.x_group),
        ));
    }
    if !matches!(out, Dtype::Bf16 | Dtype::F32) {
        return Err(OpError::shape(OP, format!("writes bf16 or f32, not {out}")));
    }
    let (nb, kb) = (w.n.div_ceil(BLOCK), w.k.div_ceil(BLOCK));
    let per = mul(OP, w.n, w.k)?;
    need(OP, "weights", w.w, mul(OP, w.experts, per)?)?;
    let scales = mul(OP, mul(OP, w.experts, mul(OP, nb, kb)?)?, 4)?;
    need(OP, "scale_inv", w.scale_inv, scales)?;
    need(OP, "x", x, mul(OP, mul(OP, s.pairs / s.x_group, w.k)?, 2)?)?;
    need(OP, "ids", ids, mul(OP, s.pairs, 4)?)?;
    need(
        OP,
        "y",
        y,
        mul(OP, mul(OP, s.pairs, w.n)?, out.size_bytes())?,
    )?;
    for (what, v) in [
        ("experts", w.experts),
        ("out features", w.n),
        ("in features", w.k),
        ("pairs", s.pairs),
    ] {
        int(OP, what, v)?;
    }
    let units = mul(OP, s.pairs, w.n)?;
    int(OP, "units", units)?;
    Ok(units)
}

/// `y[q] = x[q / x_group] · W[ids[q]]ᵀ` for every pair `q` of `s`: x bf16
/// `[pairs / x_group][k]`, ids i32 `[pairs]`, y `[pairs][n]` of `out` (bf16
/// or f32), every output written.
pub fn fp8_gemv_experts(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    ids: &DeviceBuffer,
    s: ExpertsShape,
    w: Fp8Experts,
    y: &DeviceBuffer,
    out: Dtype,
) -> OpResult<()> {
    let units = check(x, ids, s, &w, y, out)?;
    if units == 0 {
        return Ok(());
    }
    let aligned = |p: u64| p.is_multiple_of(16);
    let vec = w.k.is_multiple_of(16) && aligned(x.ptr()) && aligned(w.w.ptr());
    let mut p = ExpertParams {
        x: x.ptr(),
        ids: ids.ptr(),
        w: w.w.ptr(),
        s: w.scale_inv.ptr(),
        y: y.ptr(),
        pairs: int(OP, "pairs", s.pairs)?,
        x_group: int(OP, "x_group", s.x_group)?,
        experts: int(OP, "experts", w.experts)?,
        n: int(OP, "out features", w.n)?,
        k: int(OP, "in features", w.k)?,
        out_f32: i32::from(out == Dtype::F32),
        vec: i32::from(vec),
        units: int(OP, "units", units)?,
    };
    let blocks = grid_ctas(units, dev.sm_count);
    let mut params = [&mut p as *mut ExpertParams as *mut c_void];
    // SAFETY: `p` matches the kernel's `ExpertParams` (layout unit-tested);
    // the buffers hold what the shapes need (`check`); an expert index out
    // of range reads expert 0 and writes NaN; the kernel reads the ids (and
    // x) only after it waits for the previous kernel (programmatic launch).
    unsafe {
        launch_packed_pdl(
            dev,
            "fp8_gemv_experts",
            (blocks, 1, 1),
            THREADS,
            &mut params,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::sources::FP8_GEMV;
    use super::*;
    use crate::kernels::source_of;
    use std::mem::{offset_of, size_of};

    #[test]
    fn params_layout_is_the_kernels() {
        // static_assert in fp8_gemv.cu: sizeof(ExpertParams) == 72.
        assert_eq!(size_of::<ExpertParams>(), 72);
        assert_eq!(offset_of!(ExpertParams, y), 32);
        assert_eq!(offset_of!(ExpertParams, pairs), 40);
        assert_eq!(offset_of!(ExpertParams, k), 56);
        assert_eq!(offset_of!(ExpertParams, units), 68);
        assert_eq!(source_of("fp8_gemv_experts"), Some(&FP8_GEMV));
    }
}
