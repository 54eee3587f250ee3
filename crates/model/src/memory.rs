//! What one step of the model holds per row beyond its weights and state:
//! [`activation_bytes_per_row`], an estimate from the model's shape that
//! bounds the transient of a step (the engine sizes a GPU's solo stripe
//! with it, adding the backend's attention workspace).

use crate::config::{MlpConfig, ModelConfig};

/// Estimated activation bytes one row of a step holds at its peak, for
/// activations of `act` bytes: the f32 residual stream, the normed input
/// and the mixer's output, plus the largest of one layer's live buffers —
/// Gated DeltaNet (qkv projection and its conv output, z, the rule's output,
/// the gated norm, a / b), gated full attention (q + gate, k, v, output),
/// the MLP (router logits in f32; per routed expert the gathered input,
/// gate + up and the activation, the f32 down output; the shared expert) —
/// all counted live at once, an upper bound.
pub fn activation_bytes_per_row(cfg: &ModelConfig, act: u64) -> u64 {
    let h = cfg.hidden_size as u64;
    let base = 4 * h + 2 * act * h;
    let lin = &cfg.linear;
    let (conv, vd) = (lin.conv_dim() as u64, lin.value_dim() as u64);
    let gdn = act * (2 * conv + 3 * vd + 2 * lin.num_value_heads as u64);
    let (qd, kvd) = (
        (cfg.num_attention_heads * cfg.head_dim) as u64,
        (cfg.num_key_value_heads * cfg.head_dim) as u64,
    );
    let attention = act * (3 * qd + 2 * kvd);
    let mlp = match cfg.mlp {
        MlpConfig::Moe(m) => {
            let (k, i, shared) = (
                m.num_experts_per_tok as u64,
                m.moe_intermediate_size as u64,
                m.shared_expert_intermediate_size as u64,
            );
            4 * m.num_experts as u64 + k * (act * (h + 3 * i) + 4 * h) + act * (3 * shared + h)
        }
        MlpConfig::Dense { intermediate_size } => act * (3 * intermediate_size as u64 + h),
    };
    base + gdn.max(attention).max(mlp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_35b_activation_estimate_bounds_the_h200_measurement() {
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        let per_row = activation_bytes_per_row(&cfg, 2);
        // 2.15 GiB peak transient at 32,768 rows (docs/perf/cuda-model.md run 4).
        let measured = (2.15 * (1u64 << 30) as f64 / 32_768.0) as u64;
        assert!(
            per_row >= measured && per_row <= 3 * measured,
            "{per_row} bytes/row against {measured} measured"
        );
        let tiny = ModelConfig::synthetic("tiny-d64").unwrap();
        assert!(activation_bytes_per_row(&tiny, 4) > 4 * tiny.hidden_size as u64);
    }
}
