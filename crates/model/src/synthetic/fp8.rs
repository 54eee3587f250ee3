//! Synthetic FP8 weights: the projections Qwen's FP8 releases quantize
//! ([`crate::weights::fp8_in_config`]) are drawn as e4m3 bytes with one f32
//! scale per 128 × 128 block.
//!
//! Each element is the value the plain synthetic draw gives it (same
//! stream, same blocks of the stream), divided by its block's scale and
//! rounded to e4m3, so the dequantized weight is the plain draw within
//! e4m3's precision. A block's scale is `s0 · (1 + u)`, `u` uniform in
//! [0, 1) per block, with `s0` mapping the draw's bound (mean ± 2√3·std,
//! the Irwin–Hall bound) to 448: no element saturates and the scales vary
//! from block to block as real ones do.

use super::{next, sample, splitmix, unit, Init, BLOCK};
use crate::{Tensor, TensorData};
use headroom_core::fp8::{f32_to_e4m3, Fp8Block, E4M3_MAX};
use rayon::prelude::*;

/// The FP8 form of the synthetic tensor of `shape` (rank ≥ 2), `block` blocks.
pub(super) fn fp8_tensor(shape: Vec<usize>, init: Init, stream: u64, block: [usize; 2]) -> Tensor {
    let rank = shape.len();
    let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
    let n: usize = shape.iter().product();
    let matrices = n / (rows * cols);
    let (gr, gc) = (rows.div_ceil(block[0]), cols.div_ceil(block[1]));
    let bound = match init {
        Init::Normal { mean, std } => mean.abs() + 2.0 * 3f32.sqrt() * std,
        Init::Uniform { lo, hi } => lo.abs().max(hi.abs()),
        Init::LnUniform { lo, hi } => lo.ln().abs().max(hi.ln().abs()),
    };
    let s0 = bound.max(f32::MIN_POSITIVE) / E4M3_MAX;
    let scale_inv: Vec<f32> = (0..matrices * gr * gc)
        .map(|k| s0 * (1.0 + unit(splitmix(!stream ^ (k as u64)))))
        .collect();
    let mut bits = vec![0u8; n];
    bits.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(b, chunk)| {
            // The same stream position as `fill` for element `b * BLOCK + j`.
            let mut state = splitmix(stream ^ (b as u64).wrapping_mul(0xA076_1D64_78BD_642F));
            // Walk the chunk row piece by row piece (no division per element:
            // this draw is most of an FP8 preset's load time).
            let mut i = b * BLOCK;
            let mut rest = chunk;
            while !rest.is_empty() {
                let (r, c0) = (i / cols, i % cols);
                let grid_row = ((r / rows) * gr + (r % rows) / block[0]) * gc;
                let (piece, tail) = rest.split_at_mut((cols - c0).min(rest.len()));
                // One scale per run of the piece inside one column block.
                let (mut c, mut run) = (c0, &mut piece[..]);
                while !run.is_empty() {
                    let g = c / block[1];
                    let (head, more) = run.split_at_mut(((g + 1) * block[1] - c).min(run.len()));
                    let s = scale_inv[grid_row + g];
                    for x in head.iter_mut() {
                        *x = f32_to_e4m3(sample(init, next(&mut state)) / s);
                    }
                    c += head.len();
                    run = more;
                }
                i += piece.len();
                rest = tail;
            }
        });
    let q = Fp8Block::new(bits, scale_inv, block, rows, cols)
        .expect("the grid was sized from the shape");
    Tensor::new(shape, TensorData::Fp8E4m3(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draw element by element, as it was first written: each element's
    /// row, column and scale from its flat index.
    fn reference(shape: &[usize], init: Init, stream: u64, block: [usize; 2]) -> Vec<u8> {
        let rank = shape.len();
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        let n: usize = shape.iter().product();
        let (gr, gc) = (rows.div_ceil(block[0]), cols.div_ceil(block[1]));
        let TensorData::Fp8E4m3(q) = fp8_tensor(shape.to_vec(), init, stream, block).data else {
            panic!("an FP8 tensor");
        };
        let mut state = 0;
        (0..n)
            .map(|i| {
                if i % BLOCK == 0 {
                    let b = (i / BLOCK) as u64;
                    state = splitmix(stream ^ b.wrapping_mul(0xA076_1D64_78BD_642F));
                }
                let (r, c) = (i / cols, i % cols);
                let s = q.scale_inv[((r / rows) * gr + (r % rows) / block[0]) * gc + c / block[1]];
                f32_to_e4m3(sample(init, next(&mut state)) / s)
            })
            .collect()
    }

    #[test]
    fn the_row_walk_draws_the_same_codes_as_the_flat_index() {
        let init = Init::Normal {
            mean: 0.0,
            std: 0.02,
        };
        // Chunks of the stream (BLOCK elements) that start and end inside
        // rows, rows and columns that are not multiples of the block, one
        // and several matrices.
        for (shape, block) in [
            (vec![3, 130, 300], [128, 128]),
            (vec![257, 259], [128, 128]),
            (vec![2, 70_001], [128, 128]),
            (vec![5, 17, 33], [8, 16]),
        ] {
            let got = fp8_tensor(shape.clone(), init, 42, block);
            let TensorData::Fp8E4m3(q) = got.data else {
                panic!("an FP8 tensor");
            };
            let want = reference(&shape, init, 42, block);
            assert_eq!(q.bits.len(), want.len());
            let first_diff = q.bits.iter().zip(&want).position(|(a, b)| a != b);
            assert_eq!(first_diff, None, "shape {shape:?}");
        }
    }
}
