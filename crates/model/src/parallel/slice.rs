//! Host-side slicing of a rank's shard out of a full tensor, and host draws
//! of a window of a synthetic matrix (for shards made of several row ranges,
//! which one device draw cannot express).
// A shard is a list of row ranges; a list of one range is meant, not a mistaken `Vec` of the range.
#![allow(clippy::single_range_in_vec_init)]

use crate::{Tensor, TensorData};
use half::bf16;
use headroom_core::ops::{rng, WeightInit};
use rayon::prelude::*;
use std::ops::Range;

/// Rows `rows` (concatenated in order) × columns `cols` of `t` viewed as a
/// `[rows][last dim]` matrix, as a 2-D tensor. `None` if a range is out of bounds.
pub fn slice_matrix(t: &Tensor, rows: &[Range<usize>], cols: Range<usize>) -> Option<Tensor> {
    let width = *t.shape.last()?;
    let height = t.numel().checked_div(width)?;
    if cols.end > width
        || cols.start > cols.end
        || rows.iter().any(|r| r.end > height || r.start > r.end)
    {
        return None;
    }
    let out_rows: usize = rows.iter().map(|r| r.len()).sum();
    fn pick<T: Copy>(v: &[T], width: usize, rows: &[Range<usize>], cols: &Range<usize>) -> Vec<T> {
        let mut out = Vec::with_capacity(rows.iter().map(|r| r.len()).sum::<usize>() * cols.len());
        for r in rows {
            for row in r.clone() {
                out.extend_from_slice(&v[row * width + cols.start..row * width + cols.end]);
            }
        }
        out
    }
    let data = match &t.data {
        TensorData::F32(v) => TensorData::F32(pick(v, width, rows, &cols)),
        TensorData::F16(v) => TensorData::F16(pick(v, width, rows, &cols)),
        TensorData::Bf16(v) => TensorData::Bf16(pick(v, width, rows, &cols)),
        // A slice of an FP8 weight is dequantized (its blocks need not align with the slice).
        TensorData::Fp8E4m3(q) => {
            let mut out = vec![0.0f32; out_rows * cols.len()];
            let mut at = 0;
            for row in rows.iter().flat_map(|r| r.clone()) {
                q.read_f32(row * width + cols.start, &mut out[at..at + cols.len()]);
                at += cols.len();
            }
            TensorData::F32(out)
        }
    };
    Some(Tensor::new(vec![out_rows, cols.len()], data))
}

/// Elements `parts` (concatenated) of `t` flattened. `None` if out of bounds.
pub fn slice_vector(t: &Tensor, parts: &[Range<usize>]) -> Option<Tensor> {
    let n = t.numel();
    if parts.iter().any(|r| r.end > n || r.start > r.end) {
        return None;
    }
    let flat = Tensor::new(vec![n, 1], t.data.clone());
    slice_matrix(&flat, parts, 0..1).map(|m| {
        let len = m.numel();
        Tensor::new(vec![len], m.data)
    })
}

/// The bf16 draw of rows `rows` × columns `cols` of the synthetic `[..][full_cols]`
/// matrix of `init` (`init.window` ignored): the same values the backends'
/// `init_matrix` gives those elements.
pub fn draw_window(
    init: WeightInit,
    rows: &[Range<usize>],
    cols: Range<usize>,
    full_cols: usize,
) -> Tensor {
    let row_ids: Vec<usize> = rows.iter().flat_map(|r| r.clone()).collect();
    let width = cols.len();
    let data: Vec<bf16> = (0..row_ids.len() * width)
        .into_par_iter()
        .map(|i| {
            let (r, c) = (row_ids[i / width], cols.start + i % width);
            let counter = (r as u64) * full_cols as u64 + c as u64;
            bf16::from_f32(init.mean + init.std * rng::normal(init.seed, counter))
        })
        .collect();
    Tensor::new(vec![row_ids.len(), width], TensorData::Bf16(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_rows_and_columns_of_any_dtype() {
        let t = Tensor::from_f32(vec![2, 3, 4], (0..24).map(|x| x as f32).collect());
        let s = slice_matrix(&t, &[1..2, 4..6], 1..3).unwrap();
        assert_eq!(s.shape, vec![3, 2]);
        assert_eq!(s.to_f32_vec(), vec![5.0, 6.0, 17.0, 18.0, 21.0, 22.0]);
        let b = Tensor::new(
            vec![2, 2],
            TensorData::Bf16([1.0f32, 2.0, 3.0, 4.0].map(bf16::from_f32).to_vec()),
        );
        assert_eq!(
            slice_matrix(&b, &[1..2], 0..2).unwrap().to_f32_vec(),
            vec![3.0, 4.0]
        );
        assert!(slice_matrix(&t, &[5..7], 0..4).is_none());
        assert!(slice_matrix(&t, &[0..1], 2..5).is_none());
        let v = slice_vector(&t, &[0..2, 22..24]).unwrap();
        assert_eq!(v.to_f32_vec(), vec![0.0, 1.0, 22.0, 23.0]);
        assert!(slice_vector(&t, &[20..25]).is_none());
    }

    #[test]
    fn window_draw_equals_the_same_elements_of_the_full_draw() {
        let init = WeightInit::new(5, 0.0, 0.02);
        let full = draw_window(init, &[0..6], 0..5, 5).to_f32_vec();
        let part = draw_window(init, &[1..2, 4..6], 2..4, 5).to_f32_vec();
        let want: Vec<f32> = [1, 4, 5]
            .iter()
            .flat_map(|r| [full[r * 5 + 2], full[r * 5 + 3]])
            .collect();
        assert_eq!(part, want);
    }
}
