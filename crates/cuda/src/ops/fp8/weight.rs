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
    use crate::alloc::{Allocator, RawMemory};
    use crate::tensor::{CudaWeightFormat, Fp8Scales};
    use crate::CudaError;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Fake device memory: increasing addresses, 256-byte aligned.
    #[derive(Default)]
    struct Fake(AtomicU64);
    impl RawMemory for Fake {
        fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
            Ok(0x1_0000
                + self
                    .0
                    .fetch_add(bytes.next_multiple_of(256) as u64, Ordering::SeqCst))
        }
        fn free(&self, _ptr: u64) {}
    }

    /// An FP8 weight `[rows][cols]` on fake memory, its grid restarting
    /// every `grid_rows` rows.
    fn fp8_weight(rows: usize, cols: usize, grid_rows: usize) -> CudaWeight {
        let a = Allocator::new(Box::new(Fake::default()));
        let scales = rows / grid_rows * grid_rows.div_ceil(BLOCK) * cols.div_ceil(BLOCK);
        CudaWeight {
            buf: a.alloc(rows * cols).unwrap(),
            rows,
            cols,
            dtype: Dtype::Bf16,
            fp8: Some(Fp8Scales {
                scale_inv: a.alloc(scales * 4).unwrap(),
                grid_rows,
            }),
        }
    }

    #[test]
    fn an_fp8_weight_says_what_it_is_and_bf16_ops_refuse_it() {
        let w = fp8_weight(384, 192, 192);
        assert!(w.is_fp8());
        assert_eq!(w.format(), CudaWeightFormat::Fp8Block128);
        // Bytes: one an element, 4 a scale (2 matrices × 2 × 2 blocks).
        assert_eq!(w.device_bytes(), 384 * 192 + 2 * 2 * 2 * 4);
        assert!(w.matrix("embed").is_err());
        assert!(w.vector("rms_norm").is_err());
        assert!(w.any_matrix("moe").is_ok());
    }

    #[test]
    fn the_views_need_the_grid_they_read() {
        // One matrix with tails: its own grid, a dense view; as one expert too.
        let w = fp8_weight(320, 192, 320);
        let m = matrix_of(&w).unwrap();
        assert_eq!((m.n, m.k), (320, 192));
        m.check("test").unwrap();
        assert!(experts_of(&w, 1).is_some());
        // 8 experts of 192 rows, a grid each: an experts view, no dense one.
        let e = fp8_weight(8 * 192, 256, 192);
        assert!(matrix_of(&e).is_none());
        let x = experts_of(&e, 8).unwrap();
        assert_eq!((x.experts, x.n, x.k), (8, 192, 256));
        // The same rows seen as 4 experts of 384 rows: not their grid.
        assert!(experts_of(&e, 4).is_none());
        assert!(experts_of(&e, 5).is_none());
        assert!(experts_of(&e, 0).is_none());
        // Gate and up parts of 256 rows stacked into 512-row experts: whole
        // blocks, so one grid for both views.
        let gu = fp8_weight(4 * 512, 128, 256);
        assert!(matrix_of(&gu).is_some());
        assert_eq!(experts_of(&gu, 4).unwrap().n, 512);
    }

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
