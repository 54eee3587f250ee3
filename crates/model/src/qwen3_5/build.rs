//! Builds the model's layers on a backend from a [`ModelConfig`] and a
//! [`WeightSource`]: a checkpoint's canonical [`Weights`] (each tensor taken
//! once, shape-checked against the one schema table,
//! `weights::expected_tensors`), or synthetic weights drawn on the device.

use super::{Decoder, Mixer, ModelError};
use crate::config::{MlpConfig, ModelConfig};
use crate::layers::{FullAttention, GatedDeltaNet, Mlp};
use crate::weights::expected_tensors;
use crate::{Tensor, TensorData, Weights, WeightsError};
use headroom_core::ops::{Backend, GdnSpec, MoeSpec, MoeWeights, RopeSpec, WeightInit};
use headroom_core::{AttentionKind, OpError};
use std::collections::HashMap;

/// Where the weights come from.
pub(crate) trait WeightSource<B: Backend> {
    /// The matrix `name` (shape from the schema).
    fn matrix(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError>;
    /// The vector `name` (any shape, used flat as f32).
    fn vector(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError>;
    /// `q_proj` of a gated attention layer: rows interleaved per head as
    /// `[q (d rows), gate (d rows)]`, returned as the q and gate matrices.
    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: usize,
        head_dim: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError>;
}

fn op_err(e: OpError) -> ModelError {
    ModelError::Op {
        layer: None,
        source: e,
    }
}

/// The schema table: every canonical tensor's expected shape.
fn schema(cfg: &ModelConfig) -> HashMap<String, Vec<usize>> {
    expected_tensors(cfg).into_iter().collect()
}

/// Tensors taken out of a checkpoint's [`Weights`].
pub(crate) struct HostSource {
    weights: Weights,
    shapes: HashMap<String, Vec<usize>>,
}

impl HostSource {
    pub fn new(cfg: &ModelConfig, weights: Weights) -> HostSource {
        HostSource {
            weights,
            shapes: schema(cfg),
        }
    }

    fn take(&mut self, name: &str) -> Result<Tensor, ModelError> {
        let shape = self.shapes.get(name).cloned().unwrap_or_default();
        let t = self
            .weights
            .remove(name)
            .ok_or_else(|| WeightsError::Missing {
                name: name.to_string(),
                expected: shape.clone(),
            })?;
        if t.shape != shape {
            return Err(WeightsError::Shape {
                name: name.to_string(),
                expected: shape,
                actual: t.shape,
            }
            .into());
        }
        Ok(t)
    }
}

impl<B: Backend> WeightSource<B> for HostSource {
    fn matrix(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        be.upload_matrix(self.take(name)?).map_err(op_err)
    }

    fn vector(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        be.upload_vector(self.take(name)?).map_err(op_err)
    }

    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: usize,
        d: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError> {
        let t = self.take(name)?;
        let cols = t.shape[1];
        let (q, g) = split_rows(&t.data, heads, d, cols);
        let q = be.upload_matrix(Tensor::new(vec![heads * d, cols], q));
        let g = be.upload_matrix(Tensor::new(vec![heads * d, cols], g));
        Ok((q.map_err(op_err)?, g.map_err(op_err)?))
    }
}

/// Splits rows interleaved per head as `[a (d), b (d)]` into `a` and `b`.
fn split_rows(data: &TensorData, heads: usize, d: usize, cols: usize) -> (TensorData, TensorData) {
    fn split<T: Copy>(v: &[T], heads: usize, d: usize, cols: usize) -> (Vec<T>, Vec<T>) {
        let (mut a, mut b) = (
            Vec::with_capacity(v.len() / 2),
            Vec::with_capacity(v.len() / 2),
        );
        for h in 0..heads {
            let base = h * 2 * d * cols;
            a.extend_from_slice(&v[base..base + d * cols]);
            b.extend_from_slice(&v[base + d * cols..base + 2 * d * cols]);
        }
        (a, b)
    }
    match data {
        TensorData::F32(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::F32(a), TensorData::F32(b))
        }
        TensorData::F16(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::F16(a), TensorData::F16(b))
        }
        TensorData::Bf16(v) => {
            let (a, b) = split(v, heads, d, cols);
            (TensorData::Bf16(a), TensorData::Bf16(b))
        }
    }
}

/// Synthetic weights: matrices drawn on the device from N(0, 0.02) seeded
/// per tensor name; vectors (norms, gates' biases, conv) drawn on the host
/// by [`Weights::synthetic_tensor`] (they are small).
pub(crate) struct InitSource<'c> {
    cfg: &'c ModelConfig,
    seed: u64,
    shapes: HashMap<String, Vec<usize>>,
}

impl<'c> InitSource<'c> {
    pub fn new(cfg: &'c ModelConfig, seed: u64) -> InitSource<'c> {
        InitSource {
            cfg,
            seed,
            shapes: schema(cfg),
        }
    }

    fn shape(&self, name: &str) -> Result<Vec<usize>, ModelError> {
        self.shapes.get(name).cloned().ok_or_else(|| {
            ModelError::Unsupported(format!("no tensor `{name}` in this config's schema"))
        })
    }

    fn init(&self, name: &str) -> WeightInit {
        WeightInit {
            seed: crate::synthetic::tensor_seed(self.seed, name),
            mean: 0.0,
            std: 0.02,
        }
    }
}

impl<B: Backend> WeightSource<B> for InitSource<'_> {
    fn matrix(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        let shape = self.shape(name)?;
        let cols = *shape.last().unwrap_or(&1);
        let rows = shape.iter().product::<usize>() / cols.max(1);
        be.init_matrix(rows, cols, self.init(name)).map_err(op_err)
    }

    fn vector(&mut self, be: &B, name: &str) -> Result<B::Weight, ModelError> {
        let shape = self.shape(name)?;
        let t = Weights::synthetic_tensor(self.cfg, self.seed, name, shape);
        be.upload_vector(t).map_err(op_err)
    }

    fn split_q(
        &mut self,
        be: &B,
        name: &str,
        heads: usize,
        d: usize,
    ) -> Result<(B::Weight, B::Weight), ModelError> {
        let shape = self.shape(name)?;
        let mut init = self.init(name);
        let q = be.init_matrix(heads * d, shape[1], init).map_err(op_err)?;
        init.seed = init.seed.wrapping_add(1);
        let g = be.init_matrix(heads * d, shape[1], init).map_err(op_err)?;
        Ok((q, g))
    }
}

pub(super) fn decoder<B: Backend>(
    be: &B,
    cfg: &ModelConfig,
    src: &mut dyn WeightSource<B>,
    layer: usize,
) -> Result<Decoder<B>, ModelError> {
    let p = format!("layers.{layer}");
    let eps = cfg.rms_norm_eps as f32;
    let mixer = match cfg.layer_types[layer] {
        AttentionKind::Full => {
            let (nq, nkv, d) = (
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                cfg.head_dim,
            );
            let a = format!("{p}.self_attn");
            let (q_proj, gate_proj) = if cfg.attn_output_gate {
                let (q, g) = src.split_q(be, &format!("{a}.q_proj.weight"), nq, d)?;
                (q, Some(g))
            } else {
                (src.matrix(be, &format!("{a}.q_proj.weight"))?, None)
            };
            Mixer::Full(FullAttention {
                q_proj,
                gate_proj,
                k_proj: src.matrix(be, &format!("{a}.k_proj.weight"))?,
                v_proj: src.matrix(be, &format!("{a}.v_proj.weight"))?,
                o_proj: src.matrix(be, &format!("{a}.o_proj.weight"))?,
                q_norm: src.vector(be, &format!("{a}.q_norm.weight"))?,
                k_norm: src.vector(be, &format!("{a}.k_norm.weight"))?,
                heads: nq,
                kv_heads: nkv,
                head_dim: d,
                eps,
                rope: RopeSpec {
                    rotary_dim: cfg.rope.rotary_dim,
                    theta: cfg.rope.theta,
                },
            })
        }
        AttentionKind::Linear => {
            let l = &cfg.linear;
            let (nv, kc) = (l.num_value_heads, l.conv_kernel_dim);
            if l.num_key_heads == 0 || !nv.is_multiple_of(l.num_key_heads) || kc == 0 {
                return Err(ModelError::Unsupported(format!(
                    "linear attention with {} key heads, {nv} value heads, conv kernel {kc}",
                    l.num_key_heads
                )));
            }
            let a = format!("{p}.linear_attn");
            Mixer::Linear(GatedDeltaNet {
                in_proj_qkv: src.matrix(be, &format!("{a}.in_proj_qkv.weight"))?,
                in_proj_z: src.matrix(be, &format!("{a}.in_proj_z.weight"))?,
                in_proj_b: src.matrix(be, &format!("{a}.in_proj_b.weight"))?,
                in_proj_a: src.matrix(be, &format!("{a}.in_proj_a.weight"))?,
                out_proj: src.matrix(be, &format!("{a}.out_proj.weight"))?,
                conv_weight: src.vector(be, &format!("{a}.conv1d.weight"))?,
                a_log: src.vector(be, &format!("{a}.A_log"))?,
                dt_bias: src.vector(be, &format!("{a}.dt_bias"))?,
                norm: src.vector(be, &format!("{a}.norm.weight"))?,
                spec: GdnSpec {
                    slots: 1,
                    k_heads: l.num_key_heads,
                    v_heads: nv,
                    k_dim: l.key_head_dim,
                    v_dim: l.value_head_dim,
                    kernel: kc,
                },
                eps,
            })
        }
    };
    let m = format!("{p}.mlp");
    let mlp = match cfg.mlp {
        MlpConfig::Dense { .. } => Mlp::Dense {
            gate: src.matrix(be, &format!("{m}.gate_proj.weight"))?,
            up: src.matrix(be, &format!("{m}.up_proj.weight"))?,
            down: src.matrix(be, &format!("{m}.down_proj.weight"))?,
        },
        MlpConfig::Moe(moe) => {
            let s = format!("{m}.shared_expert");
            Mlp::Moe {
                weights: MoeWeights {
                    router: src.matrix(be, &format!("{m}.gate.weight"))?,
                    gate_up: src.matrix(be, &format!("{m}.experts.gate_up_proj"))?,
                    down: src.matrix(be, &format!("{m}.experts.down_proj"))?,
                    shared_gate_proj: src.matrix(be, &format!("{s}.gate_proj.weight"))?,
                    shared_up_proj: src.matrix(be, &format!("{s}.up_proj.weight"))?,
                    shared_down_proj: src.matrix(be, &format!("{s}.down_proj.weight"))?,
                    shared_gate: src.matrix(be, &format!("{m}.shared_expert_gate.weight"))?,
                },
                spec: MoeSpec {
                    num_experts: moe.num_experts,
                    top_k: moe.num_experts_per_tok,
                    intermediate: moe.moe_intermediate_size,
                    renormalise: moe.norm_topk_prob,
                },
            }
        }
    };
    Ok(Decoder {
        input_norm: src.vector(be, &format!("{p}.input_layernorm.weight"))?,
        post_norm: src.vector(be, &format!("{p}.post_attention_layernorm.weight"))?,
        mixer,
        mlp,
    })
}
