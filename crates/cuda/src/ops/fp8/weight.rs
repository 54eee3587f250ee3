//! An FP8 [`CudaWeight`] seen by the FP8 launchers: the dense view
//! ([`matrix_of`]: one `[n][k]` matrix whose grid runs over all rows), the
//! stacked experts' view ([`experts_of`]: each expert's `[n][k]` with its
//! own grid), and the bf16 copy ([`dequantize_weight`]) for the ops and
//! shapes that have no FP8 kernel.

use super::experts::Fp8Experts;
use super::quant::dequantize_stacked;
use super::{Fp8Matrix, BLOCK};
use crate::device::CudaDevice;
use crate::launch::{alloc, mul};
use crate::tensor::CudaWeight;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// Whether a weight of `rows` rows whose grid restarts every `grid_rows`
/// rows has the grid of one matrix of `n`-row parts: the same scale rows
/// for every row (`grid_rows == n`, or both whole multiples of the block).
fn grid_is(grid_rows: usize, n: usize) -> bool {
    grid_rows == n || (grid_rows.is_multiple_of(BLOCK) && n.is_multiple_of(BLOCK))
}

/// The weight as one FP8 matrix `[rows][cols]`, if it is FP8 and its block
/// grid is one grid over all its rows.
pub(crate) fn matrix_of(w: &CudaWeight) -> Option<Fp8Matrix<'_>> {
    let s = w.fp8.as_ref()?;
    grid_is(s.grid_rows, w.rows).then_some(Fp8Matrix {
        w: &w.buf,
        scale_inv: &s.scale_inv,
        n: w.rows,
        k: w.cols,
    })
}

/// The weight as `experts` stacked FP8 matrices of `rows / experts` rows
/// each, if it is FP8 and each expert's scales are its own
/// `[ceil(n/128)][ceil(k/128)]` grid.
pub(crate) fn experts_of(w: &CudaWeight, experts: usize) -> Option<Fp8Experts<'_>> {
    let s = w.fp8.as_ref()?;
    if experts == 0 || !w.rows.is_multiple_of(experts) {
        return None;
    }
    let n = w.rows / experts;
    grid_is(s.grid_rows, n).then_some(Fp8Experts {
        w: &w.buf,
        scale_inv: &s.scale_inv,
        experts,
        n,
        k: w.cols,
    })
}

/// A bf16 copy of an FP8 weight, dequantized on the device (`W ·
/// scale_inv`, rounded once): scratch for the paths without an FP8 kernel.
pub(crate) fn dequantize_weight(dev: &CudaDevice, w: &CudaWeight) -> OpResult<CudaWeight> {
    const OP: &str = "fp8_dequant";
    let s = w
        .fp8
        .as_ref()
        .ok_or_else(|| OpError::shape(OP, "the weight is not fp8"))?;
    let buf = alloc(dev, mul(OP, w.elems(), 2)?)?;
    dequantize_stacked(dev, &w.buf, &s.scale_inv, w.rows, w.cols, s.grid_rows, &buf)?;
    Ok(CudaWeight {
        buf,
        rows: w.rows,
        cols: w.cols,
        dtype: Dtype::Bf16,
        fp8: None,
    })
}

/// A weight as bf16: itself, or its dequantized copy.
pub(crate) enum Bf16Weight<'a> {
    Held(&'a CudaWeight),
    Scratch(CudaWeight),
}

impl std::ops::Deref for Bf16Weight<'_> {
    type Target = CudaWeight;
    fn deref(&self) -> &CudaWeight {
        match self {
            Bf16Weight::Held(w) => w,
            Bf16Weight::Scratch(w) => w,
        }
    }
}

/// `w` as bf16: itself unless FP8, else dequantized into scratch.
pub(crate) fn as_bf16<'a>(dev: &CudaDevice, w: &'a CudaWeight) -> OpResult<Bf16Weight<'a>> {
    if w.is_fp8() {
        Ok(Bf16Weight::Scratch(dequantize_weight(dev, w)?))
    } else {
        Ok(Bf16Weight::Held(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_is_one_grid_where_the_parts_line_up_with_the_blocks() {
        // One matrix: its own grid, whatever its rows.
        assert!(grid_is(192, 192));
        // Experts of 512 rows stacked from 256-row parts (gate and up).
        assert!(grid_is(256, 512));
        assert!(grid_is(512, 256 * 1024));
        // 192-row parts restart the grid mid-block: not one grid.
        assert!(!grid_is(192, 384));
        assert!(!grid_is(96, 192));
    }
}
