//! Canonical tensor names: the list a config needs, and the mapping from the
//! names checkpoints use (`model.`, `model.language_model.` prefixes; vision
//! and MTP tensors) to canonical ones.

use crate::config::{MlpConfig, ModelConfig, WeightFormat};
use headroom_core::AttentionKind;

/// What a checkpoint's tensor name is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointName {
    /// A text-model tensor under its canonical name (prefix removed).
    Text(String),
    /// A vision-tower tensor (skipped).
    Vision,
    /// A multi-token-prediction tensor (skipped).
    Mtp,
}

/// Maps a checkpoint tensor name to its canonical name, or says it is a
/// vision / MTP tensor.
pub fn canonical_name(name: &str) -> CheckpointName {
    if name.starts_with("mtp.") || name.starts_with("model.mtp.") {
        return CheckpointName::Mtp;
    }
    if name.starts_with("visual.")
        || name.starts_with("model.visual.")
        || name.starts_with("vision_tower.")
        || name.starts_with("model.vision_tower.")
    {
        return CheckpointName::Vision;
    }
    for prefix in [
        "model.language_model.",
        "language_model.model.",
        "language_model.",
        "model.",
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            // `language_model.lm_head.weight` (old VL layout) is the LM head.
            return CheckpointName::Text(rest.to_string());
        }
    }
    CheckpointName::Text(name.to_string())
}

/// Every canonical tensor of the text model described by `cfg`, with its
/// shape, in a stable order (embedding, layers, final norm, LM head).
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let h = cfg.hidden_size;
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    let mut push = |name: String, shape: Vec<usize>| out.push((name, shape));
    push("embed_tokens.weight".into(), vec![cfg.vocab_size, h]);
    for layer in 0..cfg.num_hidden_layers {
        let p = format!("layers.{layer}");
        push(format!("{p}.input_layernorm.weight"), vec![h]);
        push(format!("{p}.post_attention_layernorm.weight"), vec![h]);
        match cfg.layer_types[layer] {
            AttentionKind::Full => {
                let d = cfg.head_dim;
                let q = cfg.num_attention_heads * d;
                let kv = cfg.num_key_value_heads * d;
                let q_rows = if cfg.attn_output_gate { 2 * q } else { q };
                let a = format!("{p}.self_attn");
                push(format!("{a}.q_proj.weight"), vec![q_rows, h]);
                push(format!("{a}.k_proj.weight"), vec![kv, h]);
                push(format!("{a}.v_proj.weight"), vec![kv, h]);
                push(format!("{a}.o_proj.weight"), vec![h, q]);
                push(format!("{a}.q_norm.weight"), vec![d]);
                push(format!("{a}.k_norm.weight"), vec![d]);
            }
            AttentionKind::Linear => {
                let l = &cfg.linear;
                let a = format!("{p}.linear_attn");
                push(format!("{a}.in_proj_qkv.weight"), vec![l.conv_dim(), h]);
                push(format!("{a}.in_proj_z.weight"), vec![l.value_dim(), h]);
                push(format!("{a}.in_proj_b.weight"), vec![l.num_value_heads, h]);
                push(format!("{a}.in_proj_a.weight"), vec![l.num_value_heads, h]);
                push(
                    format!("{a}.conv1d.weight"),
                    vec![l.conv_dim(), 1, l.conv_kernel_dim],
                );
                push(format!("{a}.dt_bias"), vec![l.num_value_heads]);
                push(format!("{a}.A_log"), vec![l.num_value_heads]);
                push(format!("{a}.norm.weight"), vec![l.value_head_dim]);
                push(format!("{a}.out_proj.weight"), vec![h, l.value_dim()]);
            }
        }
        let m = format!("{p}.mlp");
        match &cfg.mlp {
            MlpConfig::Moe(moe) => {
                let (e, i, s) = (
                    moe.num_experts,
                    moe.moe_intermediate_size,
                    moe.shared_expert_intermediate_size,
                );
                push(format!("{m}.gate.weight"), vec![e, h]);
                push(format!("{m}.experts.gate_up_proj"), vec![e, 2 * i, h]);
                push(format!("{m}.experts.down_proj"), vec![e, h, i]);
                push(format!("{m}.shared_expert.gate_proj.weight"), vec![s, h]);
                push(format!("{m}.shared_expert.up_proj.weight"), vec![s, h]);
                push(format!("{m}.shared_expert.down_proj.weight"), vec![h, s]);
                push(format!("{m}.shared_expert_gate.weight"), vec![1, h]);
            }
            MlpConfig::Dense { intermediate_size } => {
                let i = *intermediate_size;
                push(format!("{m}.gate_proj.weight"), vec![i, h]);
                push(format!("{m}.up_proj.weight"), vec![i, h]);
                push(format!("{m}.down_proj.weight"), vec![h, i]);
            }
        }
    }
    push("norm.weight".into(), vec![h]);
    if !cfg.tie_word_embeddings {
        push("lm_head.weight".into(), vec![cfg.vocab_size, h]);
    }
    out
}

/// Whether Qwen's FP8 releases store canonical tensor `name` (or a
/// per-expert `layers.N.mlp.experts.E.*_proj.weight`) in FP8: the attention
/// projections (q/k/v/o), the Gated DeltaNet `in_proj_qkv`, `in_proj_z` and
/// `out_proj`, the routed experts, the shared expert's projections and the
/// dense MLP's. Routers, `shared_expert_gate`, norms, `conv1d`,
/// `in_proj_a` / `in_proj_b`, embeddings and `lm_head` stay unquantized.
pub fn qwen_fp8_quantized(name: &str) -> bool {
    const SUFFIXES: [&str; 15] = [
        ".self_attn.q_proj.weight",
        ".self_attn.k_proj.weight",
        ".self_attn.v_proj.weight",
        ".self_attn.o_proj.weight",
        ".linear_attn.in_proj_qkv.weight",
        ".linear_attn.in_proj_z.weight",
        ".linear_attn.out_proj.weight",
        ".mlp.experts.gate_up_proj",
        ".mlp.experts.down_proj",
        ".shared_expert.gate_proj.weight",
        ".shared_expert.up_proj.weight",
        ".shared_expert.down_proj.weight",
        ".mlp.gate_proj.weight",
        ".mlp.up_proj.weight",
        ".mlp.down_proj.weight",
    ];
    if SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return true;
    }
    // Per-expert checkpoint names: `layers.N.mlp.experts.E.{gate,up,down}_proj.weight`.
    name.split_once(".mlp.experts.").is_some_and(|(_, rest)| {
        rest.split_once('.').is_some_and(|(e, proj)| {
            e.parse::<usize>().is_ok()
                && ["gate_proj.weight", "up_proj.weight", "down_proj.weight"].contains(&proj)
        })
    })
}

/// Whether canonical tensor `name` is FP8 in an FP8 config's Qwen layout:
/// [`qwen_fp8_quantized`] and not listed in `modules_to_not_convert`
/// (always `false` for a plain config).
pub fn fp8_in_config(cfg: &ModelConfig, name: &str) -> bool {
    cfg.weight_format.is_fp8()
        && qwen_fp8_quantized(name)
        && !cfg
            .weight_format
            .not_converted(name.strip_suffix(".weight").unwrap_or(name))
}

/// Bytes the text model's weights take in storage: the config's dtype, and
/// for an FP8 config one byte per element of the tensors [`fp8_in_config`]
/// names plus four per 128 × 128 block scale (one grid per matrix of the
/// canonical shape, as the synthetic FP8 presets draw them).
pub fn expected_storage_bytes(cfg: &ModelConfig) -> u64 {
    let size = cfg.dtype.size_bytes() as u64;
    expected_tensors(cfg)
        .iter()
        .map(|(name, shape)| {
            let numel = shape.iter().product::<usize>() as u64;
            match &cfg.weight_format {
                WeightFormat::Fp8Block { block, .. } if fp8_in_config(cfg, name) => {
                    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
                    let matrices = numel / (rows * cols) as u64;
                    let grid = (rows.div_ceil(block[0]) * cols.div_ceil(block[1])) as u64;
                    numel + 4 * matrices * grid
                }
                _ => numel * size,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_removed_and_vision_mtp_recognised() {
        let t = |s: &str| CheckpointName::Text(s.to_string());
        assert_eq!(
            canonical_name("model.language_model.layers.3.self_attn.q_proj.weight"),
            t("layers.3.self_attn.q_proj.weight")
        );
        assert_eq!(
            canonical_name("model.embed_tokens.weight"),
            t("embed_tokens.weight")
        );
        assert_eq!(canonical_name("lm_head.weight"), t("lm_head.weight"));
        assert_eq!(canonical_name("model.norm.weight"), t("norm.weight"));
        assert_eq!(
            canonical_name("model.visual.blocks.0.attn.qkv.weight"),
            CheckpointName::Vision
        );
        assert_eq!(
            canonical_name("visual.merger.linear_fc1.bias"),
            CheckpointName::Vision
        );
        assert_eq!(
            canonical_name("mtp.layers.0.mlp.gate.weight"),
            CheckpointName::Mtp
        );
    }

    #[test]
    fn expected_tensors_cover_every_layer_kind() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let list = expected_tensors(&cfg);
        let get = |n: &str| list.iter().find(|(k, _)| k == n).map(|(_, s)| s.clone());
        // 4 layers: 0..2 linear, 3 full.
        assert_eq!(
            get("layers.3.self_attn.q_proj.weight"),
            Some(vec![2 * 4 * 64, 128])
        );
        assert_eq!(
            get("layers.3.self_attn.o_proj.weight"),
            Some(vec![128, 4 * 64])
        );
        assert_eq!(get("layers.0.self_attn.q_proj.weight"), None);
        let conv = 2 * 2 * 32 + 4 * 32;
        assert_eq!(
            get("layers.0.linear_attn.in_proj_qkv.weight"),
            Some(vec![conv, 128])
        );
        assert_eq!(
            get("layers.0.linear_attn.conv1d.weight"),
            Some(vec![conv, 1, 4])
        );
        assert_eq!(get("layers.2.linear_attn.A_log"), Some(vec![4]));
        assert_eq!(
            get("layers.1.mlp.experts.gate_up_proj"),
            Some(vec![8, 128, 128])
        );
        assert_eq!(
            get("layers.1.mlp.experts.down_proj"),
            Some(vec![8, 128, 64])
        );
        assert_eq!(get("lm_head.weight"), Some(vec![512, 128]));
        // 1 embed + 1 norm + 1 head + 3 linear layers * (2 + 9 + 7) + 1 full * (2 + 6 + 7)
        assert_eq!(list.len(), 3 + 3 * 18 + 15);
        let mut names: Vec<_> = list.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), list.len(), "names are unique");

        let mut tied = cfg.clone();
        tied.tie_word_embeddings = true;
        tied.attn_output_gate = false;
        let list = expected_tensors(&tied);
        assert!(!list.iter().any(|(n, _)| n == "lm_head.weight"));
        let q = list
            .iter()
            .find(|(n, _)| n == "layers.3.self_attn.q_proj.weight")
            .unwrap();
        assert_eq!(q.1, vec![4 * 64, 128]);
    }

    #[test]
    fn storage_bytes_match_the_synthetic_weights() {
        for name in ["tiny-d64", "qwen3.6-35b-a3b"] {
            let mut cfg = ModelConfig::synthetic(name).unwrap();
            cfg.num_hidden_layers = 4;
            cfg.layer_types.truncate(4);
            if name != "tiny-d64" {
                cfg.vocab_size = 100; // keep the synthetic build small
                if let MlpConfig::Moe(m) = &mut cfg.mlp {
                    m.num_experts = 8;
                }
            }
            let w = crate::Weights::synthetic(&cfg, 0);
            assert_eq!(
                expected_storage_bytes(&cfg),
                w.storage_bytes() as u64,
                "{name}"
            );
        }
        // The full 35B text model in bf16: ~34.7e9 parameters.
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        let params = expected_storage_bytes(&cfg) / 2;
        assert!(
            (34_000_000_000..36_000_000_000).contains(&params),
            "{params}"
        );
    }

    #[test]
    fn dense_mlp_names() {
        let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        cfg.mlp = MlpConfig::Dense {
            intermediate_size: 96,
        };
        let list = expected_tensors(&cfg);
        assert!(list
            .iter()
            .any(|(n, s)| n == "layers.0.mlp.down_proj.weight" && s == &vec![128, 96]));
        assert!(!list.iter().any(|(n, _)| n.contains("experts")));
    }
}
