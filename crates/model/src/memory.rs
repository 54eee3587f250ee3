//! What one step of the model holds per row beyond its weights and state:
//! [`activation_bytes_per_row`], an estimate from the model's shape that
//! bounds the transient of a step. A GPU's engine measures the figure at
//! start-up instead (`headroom_engine::calibrate`: about half of this
//! estimate for the 35B-A3B); the CPU's plans with it.

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
    fn the_35b_activation_estimate_bounds_the_measured_bytes_a_row() {
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        let per_row = activation_bytes_per_row(&cfg, 2);
        // 74,880 bytes a row from 512 to 16,384 rows on an H100 (the GPU
        // test cuda_memory, docs/perf/serving.md session 30); 2.15 GiB at
        // 32,768 rows on an H200 (docs/perf/cuda-model.md run 4) is 70 kB.
        let measured = 74_880;
        assert!(
            per_row >= measured && per_row <= 3 * measured,
            "{per_row} bytes/row against {measured} measured"
        );
        let tiny = ModelConfig::synthetic("tiny-d64").unwrap();
        assert!(activation_bytes_per_row(&tiny, 4) > 4 * tiny.hidden_size as u64);
    }
}
