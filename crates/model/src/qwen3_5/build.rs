//! Builds the model's layers from a [`ModelConfig`] and canonical [`Weights`]
//! (names and layouts documented in `weights.rs`), checking each tensor's
//! shape so a bad checkpoint is an error naming the tensor, never a panic.

use super::{Decoder, Mixer, ModelError};
use crate::config::{MlpConfig, ModelConfig};
use crate::layers::{FullAttention, GatedDeltaNet, Mlp, SparseMoe, SwiGlu};
use crate::ops::gated_delta::DeltaDims;
use crate::ops::rope::Rope;
use crate::ops::WeightView;
use crate::{Tensor, Weights, WeightsError};
use headroom_core::AttentionKind;

pub(super) struct Source<'w> {
    pub weights: &'w Weights,
}

impl<'w> Source<'w> {
    /// The tensor `name`, which must have `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<&'w Tensor, ModelError> {
        let t = self.weights.get(name).map_err(|_| WeightsError::Missing {
            name: name.to_string(),
            expected: shape.to_vec(),
        })?;
        if t.shape != shape {
            return Err(WeightsError::Shape {
                name: name.to_string(),
                expected: shape.to_vec(),
                actual: t.shape.clone(),
            }
            .into());
        }
        Ok(t)
    }

    pub fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<WeightView<'w>, ModelError> {
        Ok(WeightView::matrix(self.tensor(name, &[rows, cols])?))
    }

    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.tensor(name, &[len])?.to_f32_vec())
    }
}

pub(super) fn decoder<'w>(
    cfg: &ModelConfig,
    src: &Source<'w>,
    layer: usize,
) -> Result<Decoder<'w>, ModelError> {
    let h = cfg.hidden_size;
    let p = format!("layers.{layer}");
    let eps = cfg.rms_norm_eps as f32;
    let mixer = match cfg.layer_types[layer] {
        AttentionKind::Full => {
            let (nq, nkv, d) = (
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                cfg.head_dim,
            );
            let q_rows = nq * d * if cfg.attn_output_gate { 2 } else { 1 };
            Mixer::Full(FullAttention {
                q_proj: src.matrix(&format!("{p}.self_attn.q_proj.weight"), q_rows, h)?,
                k_proj: src.matrix(&format!("{p}.self_attn.k_proj.weight"), nkv * d, h)?,
                v_proj: src.matrix(&format!("{p}.self_attn.v_proj.weight"), nkv * d, h)?,
                o_proj: src.matrix(&format!("{p}.self_attn.o_proj.weight"), h, nq * d)?,
                q_norm: src.vector(&format!("{p}.self_attn.q_norm.weight"), d)?,
                k_norm: src.vector(&format!("{p}.self_attn.k_norm.weight"), d)?,
                heads: nq,
                kv_heads: nkv,
                head_dim: d,
                gated: cfg.attn_output_gate,
                eps,
                rope: Rope::new(cfg.rope.rotary_dim, cfg.rope.theta),
            })
        }
        AttentionKind::Linear => {
            let l = &cfg.linear;
            let (vd, cd, nv, kc) = (
                l.value_dim(),
                l.conv_dim(),
                l.num_value_heads,
                l.conv_kernel_dim,
            );
            if l.num_key_heads == 0 || !nv.is_multiple_of(l.num_key_heads) || kc == 0 {
                return Err(ModelError::Unsupported(format!(
                    "linear attention with {} key heads, {nv} value heads, conv kernel {kc}",
                    l.num_key_heads
                )));
            }
            let a = format!("{p}.linear_attn");
            Mixer::Linear(GatedDeltaNet {
                in_proj_qkv: src.matrix(&format!("{a}.in_proj_qkv.weight"), cd, h)?,
                in_proj_z: src.matrix(&format!("{a}.in_proj_z.weight"), vd, h)?,
                in_proj_b: src.matrix(&format!("{a}.in_proj_b.weight"), nv, h)?,
                in_proj_a: src.matrix(&format!("{a}.in_proj_a.weight"), nv, h)?,
                out_proj: src.matrix(&format!("{a}.out_proj.weight"), h, vd)?,
                conv_weight: src
                    .tensor(&format!("{a}.conv1d.weight"), &[cd, 1, kc])?
                    .to_f32_vec(),
                kernel: kc,
                a_log: src.vector(&format!("{a}.A_log"), nv)?,
                dt_bias: src.vector(&format!("{a}.dt_bias"), nv)?,
                norm: src.vector(&format!("{a}.norm.weight"), l.value_head_dim)?,
                dims: DeltaDims {
                    k_heads: l.num_key_heads,
                    v_heads: nv,
                    k_dim: l.key_head_dim,
                    v_dim: l.value_head_dim,
                },
                eps,
            })
        }
    };
    let m = format!("{p}.mlp");
    let mlp = match cfg.mlp {
        MlpConfig::Dense {
            intermediate_size: i,
        } => Mlp::Dense(SwiGlu {
            gate: src.matrix(&format!("{m}.gate_proj.weight"), i, h)?,
            up: src.matrix(&format!("{m}.up_proj.weight"), i, h)?,
            down: src.matrix(&format!("{m}.down_proj.weight"), h, i)?,
        }),
        MlpConfig::Moe(moe) => {
            let (e, i, is) = (
                moe.num_experts,
                moe.moe_intermediate_size,
                moe.shared_expert_intermediate_size,
            );
            let gate_up = src.tensor(&format!("{m}.experts.gate_up_proj"), &[e, 2 * i, h])?;
            let down = src.tensor(&format!("{m}.experts.down_proj"), &[e, h, i])?;
            Mlp::Moe(SparseMoe {
                router: src.matrix(&format!("{m}.gate.weight"), e, h)?,
                gate_up: WeightView::matrix(gate_up),
                down: WeightView::matrix(down),
                num_experts: e,
                top_k: moe.num_experts_per_tok,
                intermediate: i,
                renormalise: moe.norm_topk_prob,
                shared: SwiGlu {
                    gate: src.matrix(&format!("{m}.shared_expert.gate_proj.weight"), is, h)?,
                    up: src.matrix(&format!("{m}.shared_expert.up_proj.weight"), is, h)?,
                    down: src.matrix(&format!("{m}.shared_expert.down_proj.weight"), h, is)?,
                },
                shared_gate: src.matrix(&format!("{m}.shared_expert_gate.weight"), 1, h)?,
            })
        }
    };
    Ok(Decoder {
        input_norm: src.vector(&format!("{p}.input_layernorm.weight"), h)?,
        post_norm: src.vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
        mixer,
        mlp,
    })
}
