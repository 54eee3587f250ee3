//! The weight format of a checkpoint: plain (f32 / f16 / bf16 as `dtype`
//! says) or block-scaled FP8, read from `quantization_config`.
//!
//! Accepted: `quant_method` `fp8`, `fmt` `e4m3` (the default when absent, as
//! transformers' `FineGrainedFP8Config` does not write it),
//! `activation_scheme` `dynamic` (default), `weight_block_size` `[128, 128]`
//! (required), and `modules_to_not_convert` (a list of module names or
//! `null`). Anything else is [`ConfigError::Unsupported`] naming the value.
//! A module is "not converted" when one of the listed names equals its name
//! or is a dot-separated part of it (`mlp.gate` names `layers.3.mlp.gate`,
//! not `layers.3.mlp.gate_proj`); the `model.` / `model.language_model.`
//! prefixes of the listed names are ignored, as for tensor names.

use super::error::ConfigError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The one FP8 block size accepted (rows, columns of a weight block).
pub const FP8_BLOCK: [usize; 2] = [128, 128];

/// How the checkpoint stores its linear weights.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightFormat {
    /// Every tensor in the config's `dtype`.
    #[default]
    Plain,
    /// Linear weights in float8 e4m3 with one f32 `<name>_scale_inv` per
    /// `block` (rows × columns) block; `w = fp8 * scale_inv`. The modules of
    /// `modules_to_not_convert` (and norms, embeddings, conv) stay in `dtype`.
    Fp8Block {
        block: [usize; 2],
        modules_to_not_convert: Vec<String>,
    },
}

impl WeightFormat {
    /// Whether weights may be FP8.
    pub fn is_fp8(&self) -> bool {
        matches!(self, WeightFormat::Fp8Block { .. })
    }

    /// A short description for summaries (`plain`, `fp8 e4m3, 128x128 blocks`).
    pub fn describe(&self) -> String {
        match self {
            WeightFormat::Plain => "plain".into(),
            WeightFormat::Fp8Block { block, .. } => {
                format!("fp8 e4m3, {}x{} blocks", block[0], block[1])
            }
        }
    }

    /// Whether the canonical module `module` (a tensor name without its
    /// `.weight` suffix, e.g. `layers.3.mlp.gate`) is listed as not converted.
    pub fn not_converted(&self, module: &str) -> bool {
        let WeightFormat::Fp8Block {
            modules_to_not_convert,
            ..
        } = self
        else {
            return false;
        };
        modules_to_not_convert.iter().any(|p| {
            let p = strip_prefix(p);
            !p.is_empty()
                && (module == p
                    || module.starts_with(&format!("{p}."))
                    || module.ends_with(&format!(".{p}"))
                    || module.contains(&format!(".{p}.")))
        })
    }

    /// `quantization_config` as transformers writes it (`None` when plain).
    pub fn to_hf_json(&self) -> Option<Value> {
        match self {
            WeightFormat::Plain => None,
            WeightFormat::Fp8Block {
                block,
                modules_to_not_convert,
            } => Some(serde_json::json!({
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": block,
                "modules_to_not_convert": modules_to_not_convert,
            })),
        }
    }

    /// Reads a `quantization_config` object.
    pub fn from_hf_json(q: &Value) -> Result<WeightFormat, ConfigError> {
        let obj = q
            .as_object()
            .ok_or_else(|| ConfigError::invalid("quantization_config", "not a JSON object"))?;
        let text = |key: &str, default: &str| -> Result<String, ConfigError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(ConfigError::invalid(
                    &format!("quantization_config.{key}"),
                    format!("{v} is not a string"),
                )),
            }
        };
        let method = text("quant_method", "unknown")?;
        if method != "fp8" {
            return Err(ConfigError::Unsupported(format!(
                "quantized checkpoint (quant_method `{method}`); only unquantized (f32 / f16 / bf16) \
                 and block-scaled fp8 checkpoints are supported"
            )));
        }
        let fmt = text("fmt", "e4m3")?;
        if fmt != "e4m3" {
            return Err(ConfigError::Unsupported(format!(
                "fp8 fmt `{fmt}` (only e4m3)"
            )));
        }
        let scheme = text("activation_scheme", "dynamic")?;
        if scheme != "dynamic" {
            return Err(ConfigError::Unsupported(format!(
                "fp8 activation_scheme `{scheme}` (only dynamic)"
            )));
        }
        let block = match obj.get("weight_block_size") {
            None | Some(Value::Null) => {
                return Err(ConfigError::Unsupported(
                    "fp8 without weight_block_size (per-tensor scales); only 128x128 block scales"
                        .into(),
                ))
            }
            Some(v) => Vec::<usize>::deserialize(v).map_err(|e| {
                ConfigError::invalid("quantization_config.weight_block_size", format!("{v}: {e}"))
            })?,
        };
        if block != FP8_BLOCK {
            return Err(ConfigError::Unsupported(format!(
                "fp8 weight_block_size {block:?} (only [128, 128])"
            )));
        }
        let modules_to_not_convert = match obj.get("modules_to_not_convert") {
            None | Some(Value::Null) => vec![],
            Some(v) => Vec::<String>::deserialize(v).map_err(|e| {
                ConfigError::invalid(
                    "quantization_config.modules_to_not_convert",
                    format!("{v}: {e}"),
                )
            })?,
        };
        Ok(WeightFormat::Fp8Block {
            block: FP8_BLOCK,
            modules_to_not_convert,
        })
    }
}

/// A listed module name without the text model's prefixes.
fn strip_prefix(p: &str) -> &str {
    for prefix in [
        "model.language_model.",
        "language_model.model.",
        "language_model.",
        "model.",
    ] {
        if let Some(rest) = p.strip_prefix(prefix) {
            return rest;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp8(modules: &[&str]) -> WeightFormat {
        WeightFormat::Fp8Block {
            block: FP8_BLOCK,
            modules_to_not_convert: modules.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn not_converted_matches_whole_dotted_parts() {
        let f = fp8(&[
            "lm_head",
            "mlp.gate",
            "model.language_model.layers.0.linear_attn.in_proj_a",
        ]);
        assert!(f.not_converted("lm_head"));
        assert!(f.not_converted("layers.3.mlp.gate"));
        assert!(!f.not_converted("layers.3.mlp.gate_proj"));
        assert!(!f.not_converted("layers.3.mlp.shared_expert.gate_proj"));
        assert!(f.not_converted("layers.0.linear_attn.in_proj_a"));
        assert!(!f.not_converted("layers.10.linear_attn.in_proj_a"));
        assert!(!WeightFormat::Plain.not_converted("lm_head"));
    }

    #[test]
    fn parses_and_refuses_with_the_value_named() {
        let ok = serde_json::json!({"quant_method": "fp8", "fmt": "e4m3",
            "activation_scheme": "dynamic", "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head"]});
        let f = WeightFormat::from_hf_json(&ok).unwrap();
        assert_eq!(f, fp8(&["lm_head"]));
        assert_eq!(
            WeightFormat::from_hf_json(&f.to_hf_json().unwrap()).unwrap(),
            f
        );
        assert_eq!(f.describe(), "fp8 e4m3, 128x128 blocks");
        let minimal = serde_json::json!({"quant_method": "fp8", "weight_block_size": [128, 128],
            "modules_to_not_convert": null});
        assert_eq!(WeightFormat::from_hf_json(&minimal).unwrap(), fp8(&[]));
        for (key, value, needle) in [
            (
                "quant_method",
                serde_json::json!("awq"),
                "quant_method `awq`",
            ),
            ("fmt", serde_json::json!("e5m2"), "fmt `e5m2`"),
            ("activation_scheme", serde_json::json!("static"), "`static`"),
            ("weight_block_size", serde_json::json!([64, 64]), "[64, 64]"),
            ("weight_block_size", Value::Null, "weight_block_size"),
            (
                "weight_block_size",
                serde_json::json!("x"),
                "weight_block_size",
            ),
            (
                "modules_to_not_convert",
                serde_json::json!(3),
                "modules_to_not_convert",
            ),
        ] {
            let mut q = ok.clone();
            q[key] = value;
            let err = WeightFormat::from_hf_json(&q).unwrap_err();
            assert!(err.to_string().contains(needle), "{key}: {err}");
        }
    }
}
