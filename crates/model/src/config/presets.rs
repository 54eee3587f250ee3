//! The built-in synthetic presets (`tiny-d256`, `tiny-d64`, `qwen3.6-35b-a3b`,
//! `qwen3.5-122b-a10b`), each also as an FP8 checkpoint (`-fp8` suffix: the
//! weight format of Qwen's FP8 releases) and optionally cut or extended to
//! `:layers=N`.
//!
//! `layers=N` keeps the family's 3:1 pattern **ending in a full-attention
//! layer**: layer `i` is full attention iff `(N - 1 - i) % 4 == 0`, so every
//! N ≥ 1 runs at least one full-attention layer (`layers=2` is linear, full;
//! for N a multiple of 4 this is the checkpoints' own pattern).

use super::error::ConfigError;
use super::quant::WeightFormat;
use super::types::{
    interval_layer_types, Family, LinearAttentionConfig, MlpConfig, ModelConfig, MoeConfig,
    RopeConfig,
};
use super::validate::{check_size, limits};
use headroom_core::{AttentionKind, Dtype};

/// `layer_types` of `layers` layers, one full-attention layer every 4, the last one full.
pub fn tail_anchored_layer_types(layers: usize) -> Vec<AttentionKind> {
    (0..layers)
        .map(|i| {
            if (layers - 1 - i).is_multiple_of(4) {
                AttentionKind::Full
            } else {
                AttentionKind::Linear
            }
        })
        .collect()
}

impl ModelConfig {
    /// A built-in synthetic preset: `tiny-d256`, `tiny-d64`, `qwen3.6-35b-a3b`,
    /// `qwen3.5-122b-a10b`, each optionally `-fp8` and suffixed `:layers=N` (N in 1..=1024; see the module
    /// documentation for the layer pattern).
    pub fn synthetic(name: &str) -> Result<ModelConfig, ConfigError> {
        let unknown = || ConfigError::UnknownSynthetic(name.to_string());
        let (base, layers) = match name.split_once(':') {
            None => (name, None),
            Some((base, opt)) => {
                let n = opt.strip_prefix("layers=").ok_or_else(unknown)?.trim();
                let n = n.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    ConfigError::invalid(
                        "layers",
                        format!(
                            "`{n}` in `{name}` is not an integer in 1..={}",
                            limits::MAX_LAYERS
                        ),
                    )
                })?;
                check_size("layers", n, limits::MAX_LAYERS)?;
                (base, Some(n))
            }
        };
        let (base, fp8) = match base.trim().strip_suffix("-fp8") {
            Some(b) => (b, true),
            None => (base.trim(), false),
        };
        let mut cfg = match base {
            "tiny-d256" => tiny(256),
            "tiny-d64" => tiny(64),
            "qwen3.6-35b-a3b" => qwen36_35b_a3b(),
            "qwen3.5-122b-a10b" => qwen35_122b_a10b(),
            _ => return Err(unknown()),
        };
        if let Some(n) = layers {
            cfg.num_hidden_layers = n;
            cfg.layer_types = tail_anchored_layer_types(n);
        }
        if fp8 {
            cfg.weight_format = qwen_fp8_format();
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The weight format of Qwen's FP8 releases: 128 × 128 blocks; the
/// embeddings, LM head, routers, shared-expert gates and the GDN `a` / `b`
/// projections unquantized (with norms and conv, which are not linear).
fn qwen_fp8_format() -> WeightFormat {
    let keep = [
        "lm_head",
        "embed_tokens",
        "mlp.gate",
        "mlp.shared_expert_gate",
        "linear_attn.in_proj_a",
        "linear_attn.in_proj_b",
    ];
    WeightFormat::Fp8Block {
        block: super::quant::FP8_BLOCK,
        modules_to_not_convert: keep.iter().map(|s| s.to_string()).collect(),
    }
}

fn tiny(head_dim: usize) -> ModelConfig {
    ModelConfig {
        model_type: "qwen3_5_moe_text".into(),
        family: Family::Qwen35Moe,
        vocab_size: 512,
        hidden_size: 128,
        num_hidden_layers: 4,
        layer_types: interval_layer_types(4, 4),
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim,
        attn_output_gate: true,
        rope: RopeConfig {
            theta: 10_000_000.0,
            partial_rotary_factor: 0.25,
            rotary_dim: head_dim / 4,
            mrope_section: None,
            mrope_interleaved: false,
        },
        linear: LinearAttentionConfig {
            num_key_heads: 2,
            num_value_heads: 4,
            key_head_dim: 32,
            value_head_dim: 32,
            conv_kernel_dim: 4,
        },
        mlp: MlpConfig::Moe(MoeConfig {
            num_experts: 8,
            num_experts_per_tok: 2,
            moe_intermediate_size: 64,
            shared_expert_intermediate_size: 64,
            norm_topk_prob: true,
        }),
        rms_norm_eps: 1e-6,
        tie_word_embeddings: false,
        dtype: Dtype::F32,
        fused_linear_projections: false,
        eos_token_ids: vec![],
        max_position_embeddings: 32_768,
        weight_format: WeightFormat::Plain,
    }
}

/// The text model of Qwen3.6-35B-A3B (as its public config.json gives it).
fn qwen36_35b_a3b() -> ModelConfig {
    ModelConfig {
        model_type: "qwen3_5_moe_text".into(),
        family: Family::Qwen35Moe,
        vocab_size: 248_320,
        hidden_size: 2048,
        num_hidden_layers: 40,
        layer_types: interval_layer_types(40, 4),
        num_attention_heads: 16,
        num_key_value_heads: 2,
        head_dim: 256,
        attn_output_gate: true,
        rope: RopeConfig {
            theta: 10_000_000.0,
            partial_rotary_factor: 0.25,
            rotary_dim: 64,
            mrope_section: Some(vec![11, 11, 10]),
            mrope_interleaved: true,
        },
        linear: LinearAttentionConfig {
            num_key_heads: 16,
            num_value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel_dim: 4,
        },
        mlp: MlpConfig::Moe(MoeConfig {
            num_experts: 256,
            num_experts_per_tok: 8,
            moe_intermediate_size: 512,
            shared_expert_intermediate_size: 512,
            norm_topk_prob: true,
        }),
        rms_norm_eps: 1e-6,
        tie_word_embeddings: false,
        dtype: Dtype::Bf16,
        fused_linear_projections: false,
        eos_token_ids: vec![],
        max_position_embeddings: 262_144,
        weight_format: WeightFormat::Plain,
    }
}

/// The text model of Qwen3.5-122B-A10B (dims of its public config.json:
/// hidden 3072, 48 layers with full attention every 4th, 32 q / 2 KV heads of
/// 256, GDN 16 key / 64 value heads of 128, 256 experts top-8 of 1024 and a
/// shared expert of 1024; ≈ 122 B parameters, ≈ 244 GB in bf16 — more than
/// one H200 holds).
fn qwen35_122b_a10b() -> ModelConfig {
    let mut c = qwen36_35b_a3b();
    c.hidden_size = 3072;
    c.num_hidden_layers = 48;
    c.layer_types = interval_layer_types(48, 4);
    c.num_attention_heads = 32;
    c.linear.num_value_heads = 64;
    c.mlp = MlpConfig::Moe(MoeConfig {
        num_experts: 256,
        num_experts_per_tok: 8,
        moe_intermediate_size: 1024,
        shared_expert_intermediate_size: 1024,
        norm_topk_prob: true,
    });
    c
}
