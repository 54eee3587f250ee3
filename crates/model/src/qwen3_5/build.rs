//! Builds the model's layers on a backend from a [`ModelConfig`], a
//! [`WeightSource`] (see `sources`) and the [`RankShard`] this backend holds
//! (the whole model outside tensor parallelism): each layer gets the heads,
//! experts and rows of its shard, with shapes to match.
// A shard is a list of row ranges; a list of one range is meant, not a mistaken `Vec` of the range.
#![allow(clippy::single_range_in_vec_init)]

use super::sources::WeightSource;
use super::{Decoder, Mixer, ModelError};
use crate::config::{MlpConfig, ModelConfig};
use crate::layers::{FullAttention, GatedDeltaNet, Mlp};
use crate::parallel::{MlpSplit, RankShard};
use headroom_core::ops::{Backend, GdnSpec, MoeSpec, MoeWeights, RopeSpec};
use headroom_core::AttentionKind;
use std::ops::Range;

/// `r` scaled by `k` (head ranges → row ranges).
fn times(r: &Range<usize>, k: usize) -> Range<usize> {
    r.start * k..r.end * k
}

/// Layer `layer`'s decoder: its token mixer, its MLP and its two norms,
/// each of this shard's part.
pub(super) fn decoder<B: Backend>(
    be: &B,
    cfg: &ModelConfig,
    src: &mut dyn WeightSource<B>,
    layer: usize,
    shard: &RankShard,
) -> Result<Decoder<B>, ModelError> {
    let p = format!("layers.{layer}");
    let mixer = match cfg.layer_types[layer] {
        AttentionKind::Full => Mixer::Full(full_attention(be, cfg, src, &p, shard)?),
        AttentionKind::Linear => Mixer::Linear(gated_delta_net(be, cfg, src, &p, shard)?),
    };
    let mlp = mlp(be, cfg, src, &p, shard)?;
    Ok(Decoder {
        input_norm: src.vector(be, &format!("{p}.input_layernorm.weight"))?,
        post_norm: src.vector(be, &format!("{p}.post_attention_layernorm.weight"))?,
        mixer,
        mlp,
    })
}

/// The gated full attention of the layer at prefix `p`: this shard's query
/// heads (q and gate rows), KV heads and `o_proj` columns.
fn full_attention<B: Backend>(
    be: &B,
    cfg: &ModelConfig,
    src: &mut dyn WeightSource<B>,
    p: &str,
    shard: &RankShard,
) -> Result<FullAttention<B>, ModelError> {
    let whole = shard.is_whole();
    let eps = cfg.rms_norm_eps as f32;
    let d = cfg.head_dim;
    let (heads, kv) = (&shard.attention.heads, &shard.attention.kv_heads);
    let a = format!("{p}.self_attn");
    let kv_rows = [times(kv, d)];
    let kv_rows = (!whole).then_some(&kv_rows[..]);
    let o_cols = (!whole).then(|| times(heads, d));
    let (q_proj, gate_proj) = if cfg.attn_output_gate {
        let (q, g) = src.split_q(be, &format!("{a}.q_proj.weight"), heads.clone(), d)?;
        (q, Some(g))
    } else {
        let rows = [times(heads, d)];
        let rows = (!whole).then_some(&rows[..]);
        (
            src.matrix_part(be, &format!("{a}.q_proj.weight"), rows, None)?,
            None,
        )
    };
    Ok(FullAttention {
        q_proj,
        gate_proj,
        k_proj: src.matrix_part(be, &format!("{a}.k_proj.weight"), kv_rows, None)?,
        v_proj: src.matrix_part(be, &format!("{a}.v_proj.weight"), kv_rows, None)?,
        o_proj: src.matrix_part(be, &format!("{a}.o_proj.weight"), None, o_cols)?,
        q_norm: src.vector(be, &format!("{a}.q_norm.weight"))?,
        k_norm: src.vector(be, &format!("{a}.k_norm.weight"))?,
        heads: heads.len(),
        kv_heads: kv.len(),
        head_dim: d,
        eps,
        rope: RopeSpec {
            rotary_dim: cfg.rope.rotary_dim,
            theta: cfg.rope.theta,
        },
    })
}

/// The Gated DeltaNet of the layer at prefix `p`: this shard's key and
/// value heads of every projection, conv channel and per-head vector.
fn gated_delta_net<B: Backend>(
    be: &B,
    cfg: &ModelConfig,
    src: &mut dyn WeightSource<B>,
    p: &str,
    shard: &RankShard,
) -> Result<GatedDeltaNet<B>, ModelError> {
    let whole = shard.is_whole();
    let eps = cfg.rms_norm_eps as f32;
    let l = &cfg.linear;
    let (nv, kc) = (l.num_value_heads, l.conv_kernel_dim);
    if l.num_key_heads == 0 || !nv.is_multiple_of(l.num_key_heads) || kc == 0 {
        return Err(ModelError::Unsupported(format!(
            "linear attention with {} key heads, {nv} value heads, conv kernel {kc}",
            l.num_key_heads
        )));
    }
    let a = format!("{p}.linear_attn");
    let (dk, dv) = (l.key_head_dim, l.value_head_dim);
    let (vh, kh) = (&shard.linear.heads, &shard.linear.kv_heads);
    let key = l.num_key_heads * dk;
    // q, k and v rows of in_proj_qkv (and the conv channels): this
    // rank's key heads of q and of k, its value heads of v.
    let qkv = [
        times(kh, dk),
        key + kh.start * dk..key + kh.end * dk,
        2 * key + vh.start * dv..2 * key + vh.end * dv,
    ];
    let conv: Vec<Range<usize>> = qkv.iter().map(|r| times(r, kc)).collect();
    let (z, heads) = ([times(vh, dv)], [vh.clone()]);
    let part =
        |x: &'_ [Range<usize>]| -> Option<Vec<Range<usize>>> { (!whole).then(|| x.to_vec()) };
    let (qkv, conv, z, heads) = (part(&qkv), part(&conv), part(&z), part(&heads));
    Ok(GatedDeltaNet {
        in_proj_qkv: src.matrix_part(
            be,
            &format!("{a}.in_proj_qkv.weight"),
            qkv.as_deref(),
            None,
        )?,
        in_proj_z: src.matrix_part(be, &format!("{a}.in_proj_z.weight"), z.as_deref(), None)?,
        in_proj_b: src.matrix_part(be, &format!("{a}.in_proj_b.weight"), heads.as_deref(), None)?,
        in_proj_a: src.matrix_part(be, &format!("{a}.in_proj_a.weight"), heads.as_deref(), None)?,
        out_proj: src.matrix_part(
            be,
            &format!("{a}.out_proj.weight"),
            None,
            (!whole).then(|| times(vh, dv)),
        )?,
        conv_weight: src.vector_part(be, &format!("{a}.conv1d.weight"), conv.as_deref())?,
        a_log: src.vector_part(be, &format!("{a}.A_log"), heads.as_deref())?,
        dt_bias: src.vector_part(be, &format!("{a}.dt_bias"), heads.as_deref())?,
        norm: src.vector(be, &format!("{a}.norm.weight"))?,
        spec: GdnSpec {
            slots: 1,
            k_heads: kh.len(),
            v_heads: vh.len(),
            k_dim: dk,
            v_dim: dv,
            kernel: kc,
        },
        eps,
    })
}

/// The MLP of the layer at prefix `p`: a dense MLP's intermediate slice, or
/// the MoE block's local experts and shared-expert slice.
fn mlp<B: Backend>(
    be: &B,
    cfg: &ModelConfig,
    src: &mut dyn WeightSource<B>,
    p: &str,
    shard: &RankShard,
) -> Result<Mlp<B>, ModelError> {
    let whole = shard.is_whole();
    let m = format!("{p}.mlp");
    match (cfg.mlp, &shard.mlp) {
        (MlpConfig::Dense { .. }, MlpSplit::Dense { intermediate }) => {
            let rows = [intermediate.clone()];
            let rows = (!whole).then_some(&rows[..]);
            let cols = (!whole).then(|| intermediate.clone());
            Ok(Mlp::Dense {
                gate: src.matrix_part(be, &format!("{m}.gate_proj.weight"), rows, None)?,
                up: src.matrix_part(be, &format!("{m}.up_proj.weight"), rows, None)?,
                down: src.matrix_part(be, &format!("{m}.down_proj.weight"), None, cols)?,
            })
        }
        (
            MlpConfig::Moe(moe),
            MlpSplit::Moe {
                experts,
                shared,
                adds_shared,
            },
        ) => {
            let s = format!("{m}.shared_expert");
            let (i, h) = (moe.moe_intermediate_size, cfg.hidden_size);
            let gate_up = [times(experts, 2 * i)];
            let down = [times(experts, h)];
            let shared_rows = [shared.clone()];
            let pick = |x: &'_ [Range<usize>]| (!whole).then(|| x.to_vec());
            let (gate_up, down, shared_rows) = (pick(&gate_up), pick(&down), pick(&shared_rows));
            Ok(Mlp::Moe {
                weights: MoeWeights {
                    router: src.matrix(be, &format!("{m}.gate.weight"))?,
                    gate_up: src.matrix_part(
                        be,
                        &format!("{m}.experts.gate_up_proj"),
                        gate_up.as_deref(),
                        None,
                    )?,
                    down: src.matrix_part(
                        be,
                        &format!("{m}.experts.down_proj"),
                        down.as_deref(),
                        None,
                    )?,
                    shared_gate_proj: src.matrix_part(
                        be,
                        &format!("{s}.gate_proj.weight"),
                        shared_rows.as_deref(),
                        None,
                    )?,
                    shared_up_proj: src.matrix_part(
                        be,
                        &format!("{s}.up_proj.weight"),
                        shared_rows.as_deref(),
                        None,
                    )?,
                    shared_down_proj: src.matrix_part(
                        be,
                        &format!("{s}.down_proj.weight"),
                        None,
                        (!whole).then(|| shared.clone()),
                    )?,
                    shared_gate: src.matrix(be, &format!("{m}.shared_expert_gate.weight"))?,
                },
                spec: MoeSpec {
                    first_expert: experts.start,
                    local_experts: experts.len(),
                    shared_expert: *adds_shared,
                    ..MoeSpec::all_experts(
                        moe.num_experts,
                        moe.num_experts_per_tok,
                        moe.moe_intermediate_size,
                        moe.norm_topk_prob,
                    )
                },
            })
        }
        _ => Err(ModelError::Unsupported(
            "the shard's MLP split does not match the config".into(),
        )),
    }
}
