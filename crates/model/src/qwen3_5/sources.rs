//! Where a model's weights come from ([`WeightSource`]): a checkpoint's
//! canonical [`Weights`] — owned and consumed tensor by tensor, or borrowed
//! by the several ranks of a tensor-parallel group, each slicing its shard —
//! or synthetic weights drawn on the device. Every tensor is shape-checked
//! against the one schema table (`weights::expected_tensors`); a part is a
//! set of row ranges × a column range of the tensor viewed as a matrix, so a
//! rank gets exactly its shard (for synthetic weights: the same values as
//! the same elements of the unsharded draw).
// A shard is a list of row ranges; a list of one range is meant, not a mistaken `Vec` of the range.
#![allow(clippy::single_range_in_vec_init)]

use super::ModelError;
use crate::parallel::slice::{draw_window, slice_matrix, slice_vector};
use crate::weights::expected_tensors;
use crate::{ModelConfig, Tensor, TensorData, Weights, WeightsError};
use headroom_core::fp8::Fp8Block;
use headroom_core::ops::{Backend, InitWindow, WeightInit};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

/// Where the weights come from.
pub(crate) trait WeightSource<B: Backend> {
    /// Rows `rows` (concatenated) × columns `cols` of matrix `name` (shape
    /// from the schema, leading dims flattened into rows); `None` = all.
    fn matrix_part(
        &mut self,
        be: &B,
        name: &str,
        rows: Option<&[Range<usize>]>,
        cols: Option<Range<usize>>,
    ) -> Result<B::Weight, ModelError>;
    /// Elements `parts` (concatenated; `None` = all) of vector `name`, as f32.
    fn vector_part(
        &mut self,
        be: &B,
        name: &str,
        parts: Option<&[Range<usize>]>,
    ) -> Result<B::Weight, ModelError>;
    /// Heads `heads` of the `q_proj` of a gated attention layer, whose rows
    /// are interleaved per head as `[q (d rows), gate (d rows)]`: the q and
    /// gate matrices.
    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: Range<usize>,
        head_dim: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError>;

    /// The progress task and message of building a model from this source
    /// (`headroom_core::progress`).
    fn progress(&self) -> (&'static str, &'static str);

    fn matrix(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        self.matrix_part(be, name, None, None)
    }
    fn vector(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        self.vector_part(be, name, None)
    }
}

fn schema(cfg: &ModelConfig) -> HashMap<String, Vec<usize>> {
    expected_tensors(cfg).into_iter().collect()
}

fn out_of_range(name: &str) -> ModelError {
    ModelError::Unsupported(format!("a shard of `{name}` lies outside the tensor"))
}

/// `(rows, cols)` of a schema shape viewed as a matrix.
fn as_matrix(shape: &[usize]) -> (usize, usize) {
    let cols = *shape.last().unwrap_or(&1);
    (shape.iter().product::<usize>() / cols.max(1), cols)
}

/// A checkpoint's weights: owned (one model; tensors moved out) or shared
/// (a tensor-parallel group; each rank copies its slices).
pub(crate) enum Store<'w> {
    Owned(Weights),
    Shared(&'w Weights),
}

pub(crate) struct HostSource<'w> {
    weights: Store<'w>,
    shapes: HashMap<String, Vec<usize>>,
}

impl<'w> HostSource<'w> {
    pub fn new(cfg: &ModelConfig, weights: Store<'w>) -> HostSource<'w> {
        HostSource {
            weights,
            shapes: schema(cfg),
        }
    }

    /// The whole tensor `name`, checked against the schema: moved out of an
    /// owned store, borrowed from a shared one.
    fn with<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(Cow<'_, Tensor>) -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        let shape = self.shapes.get(name).cloned().unwrap_or_default();
        let missing = || WeightsError::Missing {
            name: name.to_string(),
            expected: shape.clone(),
        };
        let t = match &mut self.weights {
            Store::Owned(w) => Cow::Owned(w.remove(name).ok_or_else(missing)?),
            Store::Shared(w) => Cow::Borrowed(w.get(name).map_err(|_| missing())?),
        };
        if t.shape != shape {
            return Err(WeightsError::Shape {
                name: name.to_string(),
                expected: shape,
                actual: t.shape.clone(),
            }
            .into());
        }
        f(t)
    }
}

impl<B: Backend> WeightSource<B> for HostSource<'_> {
    fn progress(&self) -> (&'static str, &'static str) {
        ("upload", "uploading the checkpoint's layers")
    }

    fn matrix_part(
        &mut self,
        be: &B,
        name: &str,
        rows: Option<&[Range<usize>]>,
        cols: Option<Range<usize>>,
    ) -> Result<B::Weight, ModelError> {
        self.with(name, |t| {
            let t = match (rows, cols) {
                (None, None) => t.into_owned(),
                (rows, cols) => {
                    let (h, w) = as_matrix(&t.shape);
                    let all = [0..h];
                    slice_matrix(&t, rows.unwrap_or(&all), cols.unwrap_or(0..w))
                        .ok_or_else(|| out_of_range(name))?
                }
            };
            be.upload_matrix(t).map_err(ModelError::op)
        })
    }

    fn vector_part(
        &mut self,
        be: &B,
        name: &str,
        parts: Option<&[Range<usize>]>,
    ) -> Result<B::Weight, ModelError> {
        self.with(name, |t| upload_vector_part(be, name, t, parts))
    }

    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: Range<usize>,
        d: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError> {
        self.with(name, |t| {
            let cols = *t.shape.last().unwrap_or(&0);
            if let Some(halves) = split_fp8_whole(&t, heads.clone(), d) {
                return upload_halves(be, halves);
            }
            let rows = [heads.start * 2 * d..heads.end * 2 * d];
            let part = slice_matrix(&t, &rows, 0..cols).ok_or_else(|| out_of_range(name))?;
            let n = heads.len();
            let (q, g) = split_rows(&part.data, n, d, cols);
            let q = be.upload_matrix(Tensor::new(vec![n * d, cols], q));
            let g = be.upload_matrix(Tensor::new(vec![n * d, cols], g));
            Ok((q.map_err(ModelError::op)?, g.map_err(ModelError::op)?))
        })
    }
}

/// Uploads elements `parts` (concatenated; `None` = all) of vector `name`.
fn upload_vector_part<B: Backend>(
    be: &B,
    name: &str,
    t: Cow<'_, Tensor>,
    parts: Option<&[Range<usize>]>,
) -> Result<B::Weight, ModelError> {
    let t = match parts {
        None => t.into_owned(),
        Some(p) => slice_vector(&t, p).ok_or_else(|| out_of_range(name))?,
    };
    be.upload_vector(t).map_err(ModelError::op)
}

/// Uploads the q and gate matrices of [`split_fp8_whole`].
fn upload_halves<B: Backend>(
    be: &B,
    (q, g): (Tensor, Tensor),
) -> Result<(B::Weight, B::Weight), ModelError> {
    Ok((
        be.upload_matrix(q).map_err(ModelError::op)?,
        be.upload_matrix(g).map_err(ModelError::op)?,
    ))
}

/// The q and gate halves of an FP8 `q_proj` taken whole (`heads` all of
/// its heads), still FP8, where the halves are whole blocks: `d` a multiple
/// of the block rows and one block grid over all rows. `None` otherwise
/// (the caller dequantizes).
fn split_fp8_whole(t: &Tensor, heads: Range<usize>, d: usize) -> Option<(Tensor, Tensor)> {
    let q = t.fp8()?;
    let (rows, cols) = as_matrix(&t.shape);
    let br = q.block[0];
    let one_grid = q.rows == rows || q.rows.is_multiple_of(br);
    if heads.start != 0
        || heads.len() * 2 * d != rows
        || d == 0
        || !d.is_multiple_of(br)
        || !one_grid
    {
        return None;
    }
    let (_, _, gc) = q.grid();
    let (sd, n) = (d / br, heads.len());
    let (bits_a, bits_b) = split_heads(&q.bits, n, d * cols);
    let (scale_a, scale_b) = split_heads(&q.scale_inv, n, sd * gc);
    let half = |bits, scale_inv| {
        let b = Fp8Block::new(bits, scale_inv, q.block, n * d, cols).ok()?;
        Some(Tensor::new(vec![n * d, cols], TensorData::Fp8E4m3(b)))
    };
    Some((half(bits_a, scale_a)?, half(bits_b, scale_b)?))
}

/// Splits `v`, `heads` runs of `[a (run), b (run)]`, into the `a`s and the `b`s.
fn split_heads<T: Copy>(v: &[T], heads: usize, run: usize) -> (Vec<T>, Vec<T>) {
    let (mut a, mut b) = (
        Vec::with_capacity(heads * run),
        Vec::with_capacity(heads * run),
    );
    for h in v.chunks_exact(2 * run).take(heads) {
        a.extend_from_slice(&h[..run]);
        b.extend_from_slice(&h[run..]);
    }
    (a, b)
}

/// Splits rows interleaved per head as `[a (d), b (d)]` into `a` and `b`.
fn split_rows(data: &TensorData, heads: usize, d: usize, cols: usize) -> (TensorData, TensorData) {
    fn split<T: Copy>(v: &[T], heads: usize, d: usize, cols: usize) -> (Vec<T>, Vec<T>) {
        let (mut a, mut b) = (
            Vec::with_capacity(v.len() / 2),
            Vec::with_capacity(v.len() / 2),
        );
        for h in 0..heads {
            let base = h * 2 * d * cols;
            a.extend_from_slice(&v[base..base + d * cols]);
            b.extend_from_slice(&v[base + d * cols..base + 2 * d * cols]);
        }
        (a, b)
    }
    match data {
        TensorData::F32(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::F32(a), TensorData::F32(b))
        }
        TensorData::F16(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::F16(a), TensorData::F16(b))
        }
        TensorData::Bf16(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::Bf16(a), TensorData::Bf16(b))
        }
        // `slice_matrix` hands FP8 over dequantized; read any other FP8 as f32.
        TensorData::Fp8E4m3(q) => {
            let mut v = vec![0.0f32; q.len()];
            q.read_f32(0, &mut v);
            let (a, b) = split(&v, heads, d, cols);
            (TensorData::F32(a), TensorData::F32(b))
        }
    }
}

/// Synthetic weights: matrices drawn on the device from N(0, 0.02) seeded
/// per tensor name (under an FP8 config, the whole projections it
/// quantizes drawn in their FP8 form on the host and uploaded as such) (a shard: its window of the full draw; a shard of
/// several row ranges drawn on the host, the same values); vectors (norms,
/// gates' biases, conv) drawn on the host by [`Weights::synthetic_tensor`]
/// (they are small) and sliced.
pub(crate) struct InitSource<'c> {
    cfg: &'c ModelConfig,
    seed: u64,
    shapes: HashMap<String, Vec<usize>>,
}

impl<'c> InitSource<'c> {
    pub fn new(cfg: &'c ModelConfig, seed: u64) -> InitSource<'c> {
        InitSource {
            cfg,
            seed,
            shapes: schema(cfg),
        }
    }

    fn shape(&self, name: &str) -> Result<Vec<usize>, ModelError> {
        self.shapes.get(name).cloned().ok_or_else(|| {
            ModelError::Unsupported(format!("no tensor `{name}` in this config's schema"))
        })
    }

    fn init(&self, name: &str) -> WeightInit {
        WeightInit::new(crate::synthetic::tensor_seed(self.seed, name), 0.0, 0.02)
    }
}

/// Draws rows `rows` × columns `cols` of the `[h][w]` matrix of `init`.
fn draw<B: Backend>(
    be: &B,
    name: &str,
    init: WeightInit,
    (h, w): (usize, usize),
    rows: Option<&[Range<usize>]>,
    cols: Option<Range<usize>>,
) -> Result<B::Weight, ModelError> {
    let cols = cols.unwrap_or(0..w);
    let all = [0..h];
    let rows = rows.unwrap_or(&all);
    if cols.end > w || rows.iter().any(|r| r.end > h || r.start >= r.end) || cols.is_empty() {
        return Err(out_of_range(name));
    }
    match rows {
        [r] if r.len() == h && cols.len() == w => {
            be.init_matrix(h, w, init).map_err(ModelError::op)
        }
        [r] => {
            let windowed = WeightInit {
                window: Some(InitWindow {
                    first_row: r.start as u64,
                    first_col: cols.start as u64,
                    full_cols: w as u64,
                }),
                ..init
            };
            be.init_matrix(r.len(), cols.len(), windowed)
                .map_err(ModelError::op)
        }
        _ => be
            .upload_matrix(draw_window(init, rows, cols, w))
            .map_err(ModelError::op),
    }
}

impl<B: Backend> WeightSource<B> for InitSource<'_> {
    fn progress(&self) -> (&'static str, &'static str) {
        ("draw", "drawing synthetic weights on the backend")
    }

    fn matrix_part(
        &mut self,
        be: &B,
        name: &str,
        rows: Option<&[Range<usize>]>,
        cols: Option<Range<usize>>,
    ) -> Result<B::Weight, ModelError> {
        let shape = self.shape(name)?;
        // The projections an FP8 checkpoint quantizes, whole: their FP8 form
        // (e4m3 + block scales, drawn on the host as `Weights::synthetic`
        // draws them), which a backend with FP8 kernels keeps as it is.
        if rows.is_none() && cols.is_none() && crate::weights::fp8_in_config(self.cfg, name) {
            let t = Weights::synthetic_tensor(self.cfg, self.seed, name, shape);
            return be.upload_matrix(t).map_err(ModelError::op);
        }
        draw(be, name, self.init(name), as_matrix(&shape), rows, cols)
    }

    fn vector_part(
        &mut self,
        be: &B,
        name: &str,
        parts: Option<&[Range<usize>]>,
    ) -> Result<B::Weight, ModelError> {
        let shape = self.shape(name)?;
        let t = Weights::synthetic_tensor(self.cfg, self.seed, name, shape);
        upload_vector_part(be, name, Cow::Owned(t), parts)
    }

    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: Range<usize>,
        d: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError> {
        let shape = self.shape(name)?;
        let (h, w) = as_matrix(&shape);
        // Under an FP8 config, q_proj whole: its FP8 draw split into halves.
        if crate::weights::fp8_in_config(self.cfg, name) {
            let t = Weights::synthetic_tensor(self.cfg, self.seed, name, shape.clone());
            if let Some(halves) = split_fp8_whole(&t, heads.clone(), d) {
                return upload_halves(be, halves);
            }
        }
        // q and gate are drawn as two [h/2][w] matrices (seed, seed + 1).
        let rows = [heads.start * d..heads.end * d];
        let mut init = self.init(name);
        let q = draw(be, name, init, (h / 2, w), Some(&rows), None)?;
        init.seed = init.seed.wrapping_add(1);
        let g = draw(be, name, init, (h / 2, w), Some(&rows), None)?;
        Ok((q, g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An FP8 q_proj of `heads` heads of `d` rows each half, `cols` columns.
    fn q_proj(heads: usize, d: usize, cols: usize) -> Tensor {
        let rows = heads * 2 * d;
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1001) as f32 - 500.0) * 1e-3 * (1 + i / (128 * cols)) as f32)
            .collect();
        let q = Fp8Block::quantize(&v, [128, 128], rows, cols).unwrap();
        Tensor::new(vec![rows, cols], TensorData::Fp8E4m3(q))
    }

    #[test]
    fn a_whole_fp8_q_proj_splits_into_fp8_halves_equal_to_the_dequantized_split() {
        let (heads, d, cols) = (3, 256, 200);
        let t = q_proj(heads, d, cols);
        let (q, g) = split_fp8_whole(&t, 0..heads, d).unwrap();
        assert!(q.is_fp8() && g.is_fp8());
        assert_eq!(q.shape, vec![heads * d, cols]);
        let (want_q, want_g) = split_rows(&TensorData::F32(t.to_f32_vec()), heads, d, cols);
        let as_vec = |x: TensorData| match x {
            TensorData::F32(v) => v,
            _ => unreachable!(),
        };
        assert_eq!(q.to_f32_vec(), as_vec(want_q));
        assert_eq!(g.to_f32_vec(), as_vec(want_g));
    }

    #[test]
    fn fp8_halves_off_the_blocks_or_of_some_heads_are_left_to_the_dequantizing_split() {
        // d = 64: a half is not whole blocks.
        assert!(split_fp8_whole(&q_proj(4, 64, 128), 0..4, 64).is_none());
        // Some of the heads (a tensor-parallel rank's).
        assert!(split_fp8_whole(&q_proj(2, 128, 128), 0..1, 128).is_none());
        // Not FP8.
        let plain = Tensor::from_f32(vec![512, 128], vec![0.5; 512 * 128]);
        assert!(split_fp8_whole(&plain, 0..2, 128).is_none());
    }
}
