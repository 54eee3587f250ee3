//! Linear projections `y = x · Wᵀ` with f32 activations and weights in
//! their storage dtype, through the `gemm` crate.
//!
//! f32 weights are read in place; f16 / bf16 weights are converted to f32
//! in blocks of rows (about 4 MiB each) just before their GEMM, so a bf16
//! checkpoint is never expanded as a whole.

use gemm::Parallelism;
use half::slice::HalfFloatSliceExt;
use headroom_core::{Tensor, TensorData};
use rayon::prelude::*;
use std::cell::RefCell;

/// Elements of one converted weight block.
const BLOCK_ELEMS: usize = 1 << 20;

/// Elements of one converted block when the input has fewer than [`SMALL_M`] rows.
const BLOCK_ELEMS_SMALL_M: usize = 1 << 16;

/// Input rows below which conversion blocks are sized for L2.
const SMALL_M: usize = 64;

/// Work (m·n·k) below which a GEMM runs on one thread.
const PARALLEL_WORK: usize = 1 << 18;

thread_local! {
    /// Per-thread conversion buffers, reused across calls (a fresh multi-MiB
    /// buffer per GEMM costs page faults). Taken, not borrowed, so a
    /// re-entrant call on the same thread just allocates its own.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Converts `out.len()` elements of `t` from flat index `start` to f32
/// (vectorisable loops: bf16 is the high half of an f32; f16 uses F16C when present).
pub fn read_block(t: &Tensor, start: usize, out: &mut [f32]) {
    let end = start + out.len();
    match &t.data {
        TensorData::F32(v) => out.copy_from_slice(&v[start..end]),
        TensorData::F16(v) => v[start..end].convert_to_f32_slice(out),
        TensorData::Bf16(v) => {
            for (o, b) in out.iter_mut().zip(&v[start..end]) {
                *o = f32::from_bits((b.to_bits() as u32) << 16);
            }
        }
        // Uploads dequantize FP8 (`CpuBackend::upload_matrix`); any other FP8 tensor reads exactly.
        TensorData::Fp8E4m3(_) => t.read_f32(start, out),
    }
}

/// Consecutive rows of a weight tensor read as an `[rows, cols]` matrix
/// (`cols` = the tensor's last dimension).
#[derive(Debug, Clone, Copy)]
pub struct WeightView<'a> {
    pub tensor: &'a Tensor,
    pub row0: usize,
    pub rows: usize,
    pub cols: usize,
}

impl<'a> WeightView<'a> {
    /// The whole tensor: rows are all leading dimensions, cols the last.
    pub fn matrix(tensor: &'a Tensor) -> WeightView<'a> {
        let cols = *tensor.shape.last().unwrap_or(&1);
        let rows = tensor.numel().checked_div(cols).unwrap_or(0);
        WeightView {
            tensor,
            row0: 0,
            rows,
            cols,
        }
    }

    /// Rows `start .. start + rows` of this view.
    pub fn sub_rows(self, start: usize, rows: usize) -> WeightView<'a> {
        assert!(start + rows <= self.rows, "row block out of range");
        WeightView {
            row0: self.row0 + start,
            rows,
            ..self
        }
    }
}

/// `out[m, rows] = x[m, cols] · Wᵀ`, using every rayon thread for large products.
pub fn linear(x: &[f32], m: usize, w: WeightView<'_>, out: &mut [f32]) {
    let par = m * w.rows * w.cols >= PARALLEL_WORK;
    linear_impl(x, m, w, out, par)
}

/// [`linear`] on the calling thread only (for use inside a parallel loop).
pub fn linear_seq(x: &[f32], m: usize, w: WeightView<'_>, out: &mut [f32]) {
    linear_impl(x, m, w, out, false)
}

fn linear_impl(x: &[f32], m: usize, w: WeightView<'_>, out: &mut [f32], par: bool) {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), m * k, "linear: input is not [m, cols]");
    assert_eq!(out.len(), m * n, "linear: output is not [m, rows]");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let start = w.row0 * k;
    if let TensorData::F32(v) = &w.tensor.data {
        gemm_nt(x, m, k, &v[start..start + n * k], n, out, n, par);
        return;
    }
    if par && m < SMALL_M {
        small_m_parallel(x, m, w, out);
        return;
    }
    // Small row counts: keep the converted block in L2 (the GEMM is then cheap per block).
    let block_elems = if m < SMALL_M {
        BLOCK_ELEMS_SMALL_M
    } else {
        BLOCK_ELEMS
    };
    let block_rows = (block_elems / k).clamp(1, n);
    let (mut buf, mut tmp) = SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
    buf.resize(block_rows * k, 0.0);
    for r0 in (0..n).step_by(block_rows) {
        let br = block_rows.min(n - r0);
        let blk = &mut buf[..br * k];
        let from = start + r0 * k;
        if par {
            blk.par_chunks_mut(k).enumerate().for_each(|(i, row)| {
                read_block(w.tensor, from + i * k, row);
            });
        } else {
            read_block(w.tensor, from, blk);
        }
        if br == n {
            gemm_nt(x, m, k, blk, br, out, n, par);
        } else {
            // Column block of `out`: write contiguously, then scatter.
            tmp.resize(m * br, 0.0);
            gemm_nt(x, m, k, blk, br, &mut tmp[..m * br], br, par);
            for (o, t) in out.chunks_exact_mut(n).zip(tmp.chunks_exact(br)) {
                o[r0..r0 + br].copy_from_slice(t);
            }
        }
    }
    SCRATCH.with(|c| *c.borrow_mut() = (buf, tmp));
}

/// Few input rows (decode, small experts): each rayon task converts one
/// L2-sized block of weight rows and multiplies it on its own thread, so
/// conversion and GEMM both use every thread.
fn small_m_parallel(x: &[f32], m: usize, w: WeightView<'_>, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let block_rows = (BLOCK_ELEMS_SMALL_M / k).clamp(1, n);
    let starts: Vec<usize> = (0..n).step_by(block_rows).collect();
    let parts: Vec<(usize, usize, Vec<f32>)> = starts
        .into_par_iter()
        .map(|r0| {
            let br = block_rows.min(n - r0);
            let (mut buf, tmp) = SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
            buf.resize(br * k, 0.0);
            read_block(w.tensor, (w.row0 + r0) * k, &mut buf[..br * k]);
            let mut part = vec![0.0f32; m * br];
            gemm_nt(x, m, k, &buf[..br * k], br, &mut part, br, false);
            SCRATCH.with(|c| *c.borrow_mut() = (buf, tmp));
            (r0, br, part)
        })
        .collect();
    for (r0, br, part) in parts {
        for (o, p) in out.chunks_exact_mut(n).zip(part.chunks_exact(br)) {
            o[r0..r0 + br].copy_from_slice(p);
        }
    }
}

/// `dst[i*dst_rs + j] = Σ_k x[i*k + kk] · w[j*k + kk]` for `i < m`, `j < n`.
#[allow(clippy::too_many_arguments)]
fn gemm_nt(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    dst: &mut [f32],
    dst_rs: usize,
    par: bool,
) {
    assert!(x.len() >= m * k && w.len() >= n * k);
    assert!(dst.len() >= (m - 1) * dst_rs + n);
    let parallelism = if par && m * n * k >= PARALLEL_WORK {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above bound every index the strides below reach:
    // lhs (i, kk) at i*k + kk, rhs (kk, j) at j*k + kk, dst (i, j) at i*dst_rs + j.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rel_err, rng, uniform};
    use half::{bf16, f16};

    fn reference(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                    .sum();
            }
        }
        out
    }

    #[test]
    fn matches_f64_in_every_storage_dtype() {
        let mut g = rng(5);
        // Tiny, small-m sequential, small-m parallel (several partial row blocks), large-m.
        for (m, n, k) in [(1, 3, 5), (17, 33, 64), (5, 700, 300), (70, 130, 96)] {
            let x = uniform(&mut g, m * k, 1.0);
            let w32 = uniform(&mut g, n * k, 1.0);
            for data in [
                TensorData::F32(w32.clone()),
                TensorData::F16(w32.iter().map(|&v| f16::from_f32(v)).collect()),
                TensorData::Bf16(w32.iter().map(|&v| bf16::from_f32(v)).collect()),
            ] {
                let t = Tensor::new(vec![n, k], data);
                let wf = t.to_f32_vec();
                let mut out = vec![f32::NAN; m * n];
                linear(&x, m, WeightView::matrix(&t), &mut out);
                assert!(rel_err(&out, &reference(&x, m, &wf, n, k)) < 1e-5);
            }
        }
    }

    #[test]
    fn sub_rows_and_blocked_conversion_select_the_right_rows() {
        // k large enough that a bf16 block holds fewer rows than the view.
        let mut g = rng(6);
        let (m, n, k) = (3, 40, 1 << 16);
        let x = uniform(&mut g, m * k, 1.0);
        let w32 = uniform(&mut g, (n + 7) * k, 1.0);
        let t = Tensor::new(
            vec![n + 7, k],
            TensorData::Bf16(w32.iter().map(|&v| bf16::from_f32(v)).collect()),
        );
        let view = WeightView::matrix(&t).sub_rows(5, n);
        let mut out = vec![f32::NAN; m * n];
        linear(&x, m, view, &mut out);
        let wf = t.to_f32_vec();
        let want = reference(&x, m, &wf[5 * k..(5 + n) * k], n, k);
        assert!(rel_err(&out, &want) < 1e-5);
        let mut seq = vec![f32::NAN; m * n];
        linear_seq(&x, m, view, &mut seq);
        assert!(rel_err(&seq, &want) < 1e-5);
    }

    #[test]
    fn read_block_converts_like_the_tensor_does() {
        let vals = [
            0.0f32,
            -0.0,
            1.5,
            -3.25e-39,
            6.0e4,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for data in [
            TensorData::F16(vals.iter().map(|&v| f16::from_f32(v)).collect()),
            TensorData::Bf16(vals.iter().map(|&v| bf16::from_f32(v)).collect()),
        ] {
            let t = Tensor::new(vec![vals.len()], data);
            let mut got = vec![f32::NAN; vals.len() - 1];
            read_block(&t, 1, &mut got);
            let mut want = vec![0.0; vals.len() - 1];
            t.read_f32(1, &mut want);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
        let t = Tensor::new(vec![1], TensorData::Bf16(vec![bf16::NAN]));
        let mut got = [0.0f32];
        read_block(&t, 0, &mut got);
        assert!(got[0].is_nan());
    }

    #[test]
    fn nan_input_reaches_its_output_row() {
        let t = Tensor::from_f32(vec![2, 2], vec![1.0, 0.0, 0.0, 1.0]);
        let mut out = vec![0.0; 4];
        linear(
            &[f32::NAN, 1.0, 2.0, 3.0],
            2,
            WeightView::matrix(&t),
            &mut out,
        );
        assert!(out[0].is_nan());
        assert_eq!(&out[2..], &[2.0, 3.0]);
    }
}
