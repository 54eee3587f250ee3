//! FP8 checkpoints: pairing each `F8_E4M3` weight with its
//! `<name>_scale_inv` and checking them.
//!
//! Host representation: the pair becomes one [`Tensor`] of
//! [`TensorData::Fp8E4m3`] (the e4m3 bytes as stored, the scales as f32, the
//! block size and the rows after which the block grid restarts), under the
//! weight's canonical name, in the same map as every other tensor. So the
//! expert stacking, the final check and the model builder see one tensor per
//! weight; readers that go through [`Tensor::read_f32`] dequantize; the CPU
//! backend dequantizes at upload, and a backend with FP8 kernels can take the
//! bytes and scales as they are.
//!
//! Checked here, each error naming the tensor: the config declares FP8
//! (`quantization_config`); every FP8 weight has a scale and every scale an
//! FP8 weight; the scale's shape is the weight's leading dims then
//! `[ceil(rows / 128), ceil(cols / 128)]`; the weight's module is not in
//! `modules_to_not_convert`; the weight has rank ≥ 2. Read time
//! ([`super::load`]) already refused NaN / Inf scales and e4m3 NaN bytes.

use super::WeightsError;
use crate::config::WeightFormat;
use crate::{ModelConfig, Tensor, TensorData};
use headroom_core::fp8::Fp8Block;
use std::collections::BTreeMap;

/// The suffix of a scale tensor's name.
pub(super) const SCALE_SUFFIX: &str = "_scale_inv";

fn fp8_err(name: &str, reason: impl Into<String>) -> WeightsError {
    WeightsError::Fp8 {
        name: name.to_string(),
        reason: reason.into(),
    }
}

/// FP8 weights and scales read from a checkpoint, before pairing.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Canonical weight name → (shape, e4m3 bytes).
    pub weights: BTreeMap<String, (Vec<usize>, Vec<u8>)>,
    /// Canonical weight name (the scale's name without [`SCALE_SUFFIX`]) → scale.
    pub scales: BTreeMap<String, Tensor>,
}

/// Whether the FP8 form of canonical tensor `name` can be used at all
/// (`qwen3_next`'s fused projections are split row by row on load, which
/// block scales do not allow).
fn fp8_loadable(name: &str) -> Result<(), String> {
    if name.ends_with("in_proj_qkvz.weight") || name.ends_with("in_proj_ba.weight") {
        return Err("fp8 fused qwen3_next projections are not supported yet".into());
    }
    Ok(())
}

/// The expected scale shape of an FP8 weight of `shape` (rank ≥ 2).
fn scale_shape(shape: &[usize], block: [usize; 2]) -> Vec<usize> {
    let rank = shape.len();
    let mut s = shape[..rank - 2].to_vec();
    s.push(shape[rank - 2].div_ceil(block[0]));
    s.push(shape[rank - 1].div_ceil(block[1]));
    s
}

/// Pairs every pending FP8 weight with its scale into `raw`.
pub(super) fn attach(
    raw: &mut BTreeMap<String, Tensor>,
    pending: Pending,
    cfg: &ModelConfig,
) -> Result<(), WeightsError> {
    let Pending {
        weights,
        mut scales,
    } = pending;
    let block = match &cfg.weight_format {
        WeightFormat::Fp8Block { block, .. } => *block,
        WeightFormat::Plain => {
            if let Some(name) = weights.keys().next() {
                return Err(fp8_err(
                    name,
                    "is F8_E4M3 but config.json has no fp8 quantization_config",
                ));
            }
            if let Some(name) = scales.keys().next() {
                return Err(fp8_err(
                    &format!("{name}{SCALE_SUFFIX}"),
                    "is a block scale but config.json has no fp8 quantization_config",
                ));
            }
            return Ok(());
        }
    };
    for (name, (shape, bits)) in weights {
        if shape.len() < 2 {
            return Err(fp8_err(
                &name,
                format!("has shape {shape:?}: only matrices (rank >= 2) may be fp8"),
            ));
        }
        let module = name.strip_suffix(".weight").unwrap_or(&name);
        if cfg.weight_format.not_converted(module) {
            return Err(fp8_err(
                &name,
                format!("is F8_E4M3 but its module `{module}` is listed in modules_to_not_convert"),
            ));
        }
        fp8_loadable(&name).map_err(|r| fp8_err(&name, r))?;
        let expected = scale_shape(&shape, block);
        let scale = scales.remove(&name).ok_or_else(|| {
            fp8_err(
                &name,
                format!(
                    "is F8_E4M3 but has no `{name}{SCALE_SUFFIX}` (expected shape {expected:?})"
                ),
            )
        })?;
        if scale.shape != expected {
            return Err(fp8_err(
                &format!("{name}{SCALE_SUFFIX}"),
                format!(
                    "has shape {:?}; the weight's shape {shape:?} in {}x{} blocks needs {expected:?}",
                    scale.shape, block[0], block[1]
                ),
            ));
        }
        let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let q = Fp8Block::new(bits, scale.to_f32_vec(), block, rows, cols)
            .map_err(|e| fp8_err(&name, e.to_string()))?;
        if raw
            .insert(name.clone(), Tensor::new(shape, TensorData::Fp8E4m3(q)))
            .is_some()
        {
            return Err(WeightsError::Duplicate(name));
        }
    }
    if let Some((name, _)) = scales.into_iter().next() {
        let what = match raw.get(&name) {
            Some(t) => format!("`{name}` is {}, not F8_E4M3", t.storage_name()),
            None => format!("there is no tensor `{name}`"),
        };
        return Err(fp8_err(
            &format!("{name}{SCALE_SUFFIX}"),
            format!("is a block scale without an fp8 weight: {what}"),
        ));
    }
    Ok(())
}

/// Whether tensor `name` may be FP8 under `cfg` (`Err` says why not).
pub(super) fn may_be_fp8(name: &str, shape: &[usize], cfg: &ModelConfig) -> Result<(), String> {
    if !cfg.weight_format.is_fp8() {
        return Err("config.json has no fp8 quantization_config".into());
    }
    if shape.len() < 2 {
        return Err("only matrices may be fp8".into());
    }
    fp8_loadable(name)
}

/// Concatenates FP8 parts of equal block grids (the per-expert tensors of
/// one layer) under `shape`; the grid restarts at every part.
pub(super) fn concat(parts: &[Tensor], shape: Vec<usize>) -> Result<Tensor, String> {
    let Some(first) = parts.first().and_then(Tensor::fp8) else {
        return Err("no fp8 parts".into());
    };
    let (block, rows, cols) = (first.block, first.rows, first.cols);
    let mut bits = Vec::with_capacity(parts.iter().map(Tensor::numel).sum());
    let mut scale_inv = Vec::new();
    for p in parts {
        match p.fp8() {
            Some(q) if (q.block, q.rows, q.cols) == (block, rows, cols) => {
                bits.extend_from_slice(&q.bits);
                scale_inv.extend_from_slice(&q.scale_inv);
            }
            Some(_) => return Err("fp8 parts of different shapes".into()),
            None => return Err(format!("a {} part among fp8 parts", p.storage_name())),
        }
    }
    let q = Fp8Block::new(bits, scale_inv, block, rows, cols).map_err(|e| e.to_string())?;
    Ok(Tensor::new(shape, TensorData::Fp8E4m3(q)))
}

/// Swaps the last two dimensions of a rank-3 FP8 tensor whose grid covers
/// each matrix whole (square blocks: the grid transposes with it).
pub(super) fn transpose_last_two(t: &Tensor, q: &Fp8Block) -> Result<Tensor, String> {
    let (e, r, c) = (t.shape[0], t.shape[1], t.shape[2]);
    if q.rows != r || q.block[0] != q.block[1] {
        return Err("fp8 tensor with a grid that does not transpose".into());
    }
    fn tr<T: Copy>(v: &[T], r: usize, c: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for m in v.chunks_exact(r * c) {
            for j in 0..c {
                out.extend((0..r).map(|k| m[k * c + j]));
            }
        }
        out
    }
    let (_, gr, gc) = q.grid();
    let q = Fp8Block::new(tr(&q.bits, r, c), tr(&q.scale_inv, gr, gc), q.block, c, r)
        .map_err(|e| e.to_string())?;
    Ok(Tensor::new(vec![e, c, r], TensorData::Fp8E4m3(q)))
}
