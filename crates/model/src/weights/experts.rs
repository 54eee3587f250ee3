//! Expert layouts: checkpoints store MoE experts either one tensor per
//! expert (`layers.N.mlp.experts.E.{gate,up,down}_proj.weight`) or stacked
//! (`layers.N.mlp.experts.gate_up_proj` `[E, 2I, H]`, `.down_proj`
//! `[E, H, I]`). Both become the stacked canonical layout (gate rows before
//! up rows within each expert); a checkpoint mixing them is an error.

use super::{check::check_one, fp8, WeightsError};
use crate::{ModelConfig, Tensor, TensorData};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    PerExpert,
    Stacked,
}

impl Layout {
    fn describe(self) -> &'static str {
        match self {
            Layout::PerExpert => "one tensor per expert",
            Layout::Stacked => "stacked gate_up_proj/down_proj",
        }
    }
}

/// Rewrites per-expert tensors of every MoE layer into the stacked layout.
pub(super) fn stack_experts(
    raw: &mut BTreeMap<String, Tensor>,
    cfg: &ModelConfig,
) -> Result<(), WeightsError> {
    let Some(moe) = cfg.moe() else {
        return Ok(());
    };
    let mut first: Option<(usize, Layout)> = None;
    for layer in 0..cfg.num_hidden_layers {
        let prefix = format!("layers.{layer}.mlp.experts.");
        let per_expert: Vec<String> = raw
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .filter(|k| k[prefix.len()..].starts_with(|c: char| c.is_ascii_digit()))
            .cloned()
            .collect();
        let stacked = raw.contains_key(&format!("{prefix}gate_up_proj"))
            || raw.contains_key(&format!("{prefix}down_proj"));
        let layout = match (per_expert.is_empty(), stacked) {
            (true, false) => continue, // nothing: the final check reports the missing tensors
            (false, true) => {
                return Err(WeightsError::MixedExpertLayout {
                    layer,
                    detail: format!(
                        "both `{}` and stacked `{prefix}gate_up_proj`",
                        per_expert[0]
                    ),
                })
            }
            (true, true) => Layout::Stacked,
            (false, false) => Layout::PerExpert,
        };
        match first {
            None => first = Some((layer, layout)),
            Some((l0, first_layout)) if first_layout != layout => {
                return Err(WeightsError::MixedExpertLayout {
                    layer,
                    detail: format!(
                        "layer {l0} uses {}, layer {layer} uses {}",
                        first_layout.describe(),
                        layout.describe()
                    ),
                })
            }
            Some(_) => {}
        }
        let (e_count, i, h) = (moe.num_experts, moe.moe_intermediate_size, cfg.hidden_size);
        if layout == Layout::Stacked {
            // Older transformers (Qwen3-VL-MoE style) stacked experts as
            // `x @ W`: gate_up `[E, H, 2I]`, down `[E, I, H]`. Recognised by
            // shape where that is unambiguous, and transposed per expert.
            for (name, canonical, transposed) in [
                ("gate_up_proj", [e_count, 2 * i, h], [e_count, h, 2 * i]),
                ("down_proj", [e_count, h, i], [e_count, i, h]),
            ] {
                let key = format!("{prefix}{name}");
                if let Some(t) = raw.get_mut(&key) {
                    if canonical != transposed && t.shape == transposed {
                        *t = match t.fp8() {
                            Some(q) => fp8::transpose_last_two(t, q)
                                .map_err(|reason| WeightsError::Fp8 { name: key, reason })?,
                            None => transpose_last_two(t),
                        };
                    }
                }
            }
            continue;
        }
        let mut take = |e: usize, proj: &str, shape: [usize; 2]| -> Result<Tensor, WeightsError> {
            let name = format!("{prefix}{e}.{proj}.weight");
            let t = raw.remove(&name).ok_or_else(|| WeightsError::Missing {
                name: name.clone(),
                expected: shape.to_vec(),
            })?;
            check_one(&name, &t, &shape, cfg)?;
            Ok(t)
        };
        let mut gate_up = Vec::with_capacity(2 * e_count);
        let mut down = Vec::with_capacity(e_count);
        for e in 0..e_count {
            gate_up.push(take(e, "gate_proj", [i, h])?);
            gate_up.push(take(e, "up_proj", [i, h])?);
            down.push(take(e, "down_proj", [h, i])?);
        }
        // Anything left under `experts.<digit>` is an expert index or projection the config lacks.
        if let Some(extra) = raw
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .find(|k| k[prefix.len()..].starts_with(|c: char| c.is_ascii_digit()))
        {
            return Err(WeightsError::Unexpected(extra.clone()));
        }
        for (name, parts, shape) in [
            ("gate_up_proj", gate_up, vec![e_count, 2 * i, h]),
            ("down_proj", down, vec![e_count, h, i]),
        ] {
            let name = format!("{prefix}{name}");
            let t = if parts.iter().any(Tensor::is_fp8) {
                // Each expert's gate, up and down keeps its own block grid.
                fp8::concat(&parts, shape).map_err(|reason| WeightsError::Fp8 {
                    name: name.clone(),
                    reason: format!("(stacked from one tensor per expert): {reason}"),
                })?
            } else {
                concat(parts, shape)
            };
            raw.insert(name, t);
        }
    }
    Ok(())
}

/// Swaps the last two dimensions of a rank-3 tensor.
fn transpose_last_two(t: &Tensor) -> Tensor {
    let (e, r, c) = (t.shape[0], t.shape[1], t.shape[2]);
    fn tr<T: Copy>(v: &[T], e: usize, r: usize, c: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for m in v.chunks_exact(r * c).take(e) {
            for j in 0..c {
                out.extend((0..r).map(|k| m[k * c + j]));
            }
        }
        out
    }
    let data = match &t.data {
        TensorData::F32(v) => TensorData::F32(tr(v, e, r, c)),
        TensorData::F16(v) => TensorData::F16(tr(v, e, r, c)),
        TensorData::Bf16(v) => TensorData::Bf16(tr(v, e, r, c)),
        // FP8 goes through `fp8::transpose_last_two`; read any other as f32.
        TensorData::Fp8E4m3(_) => TensorData::F32(tr(&t.to_f32_vec(), e, r, c)),
    };
    Tensor::new(vec![e, c, r], data)
}

/// Concatenates same-dtype tensors' data in order under a new shape.
pub(super) fn concat(parts: Vec<Tensor>, shape: Vec<usize>) -> Tensor {
    let total: usize = parts.iter().map(Tensor::numel).sum();
    let data = match parts.first().map(|t| &t.data) {
        Some(TensorData::F32(_)) | None => {
            let mut v = Vec::with_capacity(total);
            for p in parts {
                match p.data {
                    TensorData::F32(x) => v.extend(x),
                    _ => unreachable!("checked dtypes"),
                }
            }
            TensorData::F32(v)
        }
        Some(TensorData::F16(_)) => {
            let mut v = Vec::with_capacity(total);
            for p in parts {
                match p.data {
                    TensorData::F16(x) => v.extend(x),
                    _ => unreachable!("checked dtypes"),
                }
            }
            TensorData::F16(v)
        }
        Some(TensorData::Bf16(_)) => {
            let mut v = Vec::with_capacity(total);
            for p in parts {
                match p.data {
                    TensorData::Bf16(x) => v.extend(x),
                    _ => unreachable!("checked dtypes"),
                }
            }
            TensorData::Bf16(v)
        }
        Some(TensorData::Fp8E4m3(_)) => unreachable!("fp8 parts go through fp8::concat"),
    };
    Tensor::new(shape, data)
}
