//! Writing tensors to a safetensors file (used by `headroom logits` and by
//! tests that build checkpoints).

use super::WeightsError;
use crate::{Tensor, TensorData};
use safetensors::tensor::TensorView;
use safetensors::Dtype as StDtype;
use std::path::Path;

/// Writes `tensors` (name, tensor) to `path` in their storage dtypes.
pub fn write_safetensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<(), WeightsError> {
    let encoded: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let (dtype, bytes) = match &t.data {
                TensorData::F32(v) => (
                    StDtype::F32,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                TensorData::F16(v) => (
                    StDtype::F16,
                    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
                ),
                TensorData::Bf16(v) => (
                    StDtype::BF16,
                    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
                ),
            };
            (name.to_string(), dtype, t.shape.clone(), bytes)
        })
        .collect();
    let err = |reason: String| WeightsError::Safetensors {
        path: path.display().to_string(),
        reason,
    };
    let views = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| err(format!("tensor `{name}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::tensor::serialize_to_file(views, None, path).map_err(|e| err(e.to_string()))
}
