//! Validation of a canonical tensor map against a config: every expected
//! tensor present with its shape and dtype, nothing unexpected.

use super::{expected_tensors, WeightsError};
use crate::{ModelConfig, Tensor};
use std::collections::{BTreeMap, HashSet};

pub(super) fn check(
    tensors: &BTreeMap<String, Tensor>,
    cfg: &ModelConfig,
) -> Result<(), WeightsError> {
    let expected = expected_tensors(cfg);
    for (name, shape) in &expected {
        let t = tensors.get(name).ok_or_else(|| WeightsError::Missing {
            name: name.clone(),
            expected: shape.clone(),
        })?;
        check_one(name, t, shape, cfg)?;
    }
    let known: HashSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    if let Some(extra) = tensors.keys().find(|n| !known.contains(n.as_str())) {
        return Err(WeightsError::Unexpected(extra.clone()));
    }
    Ok(())
}

/// Shape must match; rank ≥ 2 tensors must carry the config's dtype or be
/// FP8 where the config allows it.
pub(super) fn check_one(
    name: &str,
    t: &Tensor,
    shape: &[usize],
    cfg: &ModelConfig,
) -> Result<(), WeightsError> {
    if t.shape != shape {
        return Err(WeightsError::Shape {
            name: name.to_string(),
            expected: shape.to_vec(),
            actual: t.shape.clone(),
        });
    }
    if t.is_fp8() {
        return super::fp8::may_be_fp8(name, shape, cfg).map_err(|reason| WeightsError::Fp8 {
            name: name.to_string(),
            reason: format!("is F8_E4M3 but {reason}"),
        });
    }
    if shape.len() >= 2 && t.dtype() != cfg.dtype {
        return Err(WeightsError::Dtype {
            name: name.to_string(),
            expected: cfg.dtype.to_string(),
            actual: t.dtype().to_string(),
        });
    }
    Ok(())
}
