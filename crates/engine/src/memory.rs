//! Admission by memory: the bytes a request will need ([`MemoryModel::predict`]):
//! its KV rows for prompt + max tokens, its GDN slot, and the transient peak
//! of its attention calls under each full-attention layer's route — composed
//! grows with `qL × kv_len`, fused is bounded by its tiles.
//!
//! The transient formulas are each backend's exact workspace accounting:
//! * CPU (`headroom_attention_cpu`): per worker thread (`min(threads, tasks)`)
//!   one scratch set; composed `(2·qb·d + qb·kv_len + qb)·4` bytes, fused
//!   `(2·M·d + 2·T·d + M·T + 2·M)·4` with `M = group · rows_per_head`, `T` the KV tile.
//!   Tasks are `kv_heads × query blocks` (a slot read whole) — the larger of
//!   the CPU backend's two call shapes, so the prediction is an upper bound.
//! * CUDA (`headroom_cuda::attention::composed_workspace_bytes`, per KV head
//!   call): composed `group · qb · kv_len · (4 + 2)`; fused allocates no
//!   workspace beyond its tiles in shared memory (0).
//!
//! The bound is exact when a request's last prefill chunk holds at least one
//! full query block (composed) or tile (fused); it never under-predicts.
//!
//! A step's activations ([`MemoryModel::activation_bytes_per_row`]) are not
//! part of a request's admission (a shared step is bounded by its token
//! budget); they bound the solo stripe a GPU grows to
//! ([`MemoryModel::solo_step_transient`], used by [`crate::stripe`]). The
//! per-row figure is an estimate from the shape — every buffer one layer's
//! mixer or MLP holds per row at once, plus the residual stream — meant as
//! an upper bound (the 35B-A3B shape: ≈ 100 KB/row against the 2.15 GiB
//! measured at 32k, ≈ 69 KB/row, on the H200).

use headroom_attention_cpu::fused::{rows_per_head, FUSED_KV_TILE};
use headroom_core::ops::Backend;
use headroom_core::{AttentionKind, BackendKind, LayerKind, RouteRequest};
use headroom_model::config::{MlpConfig, ModelConfig};
use headroom_model::Qwen35Model;
use serde::Serialize;

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

/// One full-attention layer as the memory model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttentionLayer {
    pub layer: usize,
    pub kind: LayerKind,
    pub route: RouteRequest,
}

/// A request's predicted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Prediction {
    pub kv_bytes: u64,
    pub gdn_bytes: u64,
    pub transient_bytes: u64,
}

impl Prediction {
    pub fn total(&self) -> u64 {
        self.kv_bytes
            .saturating_add(self.gdn_bytes)
            .saturating_add(self.transient_bytes)
    }

    /// `kv … + gdn … + transient …` for messages.
    pub fn detail(&self) -> String {
        format!(
            "KV {} + GDN slot {} + attention transient {} bytes",
            self.kv_bytes, self.gdn_bytes, self.transient_bytes
        )
    }
}

/// Everything needed to predict a request's memory, without the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryModel {
    pub backend: BackendKind,
    /// KV bytes of one token over every full-attention layer.
    pub kv_bytes_per_token: u64,
    /// Bytes of one sequence's GDN state over every linear-attention layer.
    pub gdn_bytes_per_slot: u64,
    pub attention: Vec<AttentionLayer>,
    /// Worker threads of the attention kernels (CPU).
    pub threads: usize,
    /// Estimated activation bytes one row of a step holds at its peak
    /// (see the module doc).
    pub activation_bytes_per_row: u64,
}

impl MemoryModel {
    /// Predicted bytes of a request of `prompt` tokens generating up to
    /// `max_tokens`, its prefill chunks at most `max_chunk` tokens.
    pub fn predict(&self, prompt: usize, max_tokens: usize, max_chunk: usize) -> Prediction {
        let rows = prompt.saturating_add(max_tokens) as u64;
        let q = max_chunk.clamp(1, prompt.max(1));
        let last_kv = prompt.saturating_add(max_tokens.saturating_sub(1));
        let transient = self
            .attention
            .iter()
            .map(|a| {
                let prefill = self.attention_transient(a, q, prompt.max(1));
                let decode = self.attention_transient(a, 1, last_kv.max(1));
                prefill.max(decode)
            })
            .max()
            .unwrap_or(0);
        Prediction {
            kv_bytes: self.kv_bytes_per_token.saturating_mul(rows),
            gdn_bytes: self.gdn_bytes_per_slot,
            transient_bytes: transient,
        }
    }

    /// Predicted transient bytes of one step of `rows` prompt rows of a
    /// request alone, its KV up to `kv_len` rows: the step's activations plus
    /// the largest attention call's transient.
    pub fn solo_step_transient(&self, rows: usize, kv_len: usize) -> u64 {
        let kv = kv_len.max(rows).max(1);
        let attention = self
            .attention
            .iter()
            .map(|a| self.attention_transient(a, rows.max(1), kv))
            .max()
            .unwrap_or(0);
        self.activation_bytes_per_row
            .saturating_mul(rows as u64)
            .saturating_add(attention)
    }

    /// Transient bytes of one attention call of `q_len` rows over `kv_len` keys.
    pub fn attention_transient(&self, a: &AttentionLayer, q_len: usize, kv_len: usize) -> u64 {
        let k = a.kind;
        let (d, kvh) = (k.head_dim as u64, k.kv_heads.max(1) as u64);
        let group = (k.q_heads / k.kv_heads.max(1)).max(1) as u64;
        let (q, kv) = (q_len.max(1) as u64, kv_len as u64);
        match (self.backend, a.route) {
            (BackendKind::Cpu, RouteRequest::Composed { query_block }) => {
                let qb = if query_block == 0 {
                    q
                } else {
                    (query_block as u64).min(q)
                };
                let workers = (self.threads as u64).min(kvh * q.div_ceil(qb)).max(1);
                workers * (2 * qb * d + qb * kv + qb) * 4
            }
            (BackendKind::Cpu, RouteRequest::Fused) => {
                let rows = (rows_per_head(group as usize) as u64).min(q);
                let workers = (self.threads as u64).min(kvh * q.div_ceil(rows)).max(1);
                let (m, t) = (group * rows, FUSED_KV_TILE as u64);
                workers * (2 * m * d + 2 * t * d + m * t + 2 * m) * 4
            }
            (BackendKind::Cuda, RouteRequest::Composed { query_block }) => {
                let qb = if query_block == 0 {
                    q
                } else {
                    (query_block as u64).min(q)
                };
                group * qb * kv * (4 + 2)
            }
            (BackendKind::Cuda, RouteRequest::Fused) => 0,
        }
    }
}

/// The memory model of `model` running `routes` (threads: the current rayon
/// pool). `model` is one rank's shard (a plain model is the whole one): the
/// KV and GDN bytes are what that rank holds — its KV heads, its GDN heads —
/// and every rank of a group holds the same amount, so admission by this
/// model counts each rank's memory against the per-rank budget.
pub fn memory_model<B: Backend>(
    model: &Qwen35Model<B>,
    routes: &[Option<RouteRequest>],
) -> MemoryModel {
    let be = model.backend();
    let act = be.act_dtype().size_bytes() as u64;
    let cfg = model.config();
    let attention: Vec<AttentionLayer> = model
        .attention_kinds()
        .into_iter()
        .filter_map(|(layer, kind)| {
            routes
                .get(layer)
                .copied()
                .flatten()
                .map(|route| AttentionLayer { layer, kind, route })
        })
        .collect();
    let kv_bytes_per_token = attention
        .iter()
        .map(|a| 2 * (a.kind.kv_heads * a.kind.head_dim) as u64 * act)
        .sum();
    let lin = &cfg.linear;
    let linear_layers = cfg
        .layer_types
        .iter()
        .filter(|k| **k == AttentionKind::Linear)
        .count() as u64;
    let (key_heads, value_heads) = (
        model.shard().linear.kv_heads.len(),
        model.shard().linear.heads.len(),
    );
    let conv_dim = (2 * key_heads * lin.key_head_dim + value_heads * lin.value_head_dim) as u64;
    let conv = (lin.conv_kernel_dim.saturating_sub(1)) as u64 * conv_dim * act;
    let recurrent = (value_heads * lin.key_head_dim * lin.value_head_dim) as u64 * 4;
    MemoryModel {
        activation_bytes_per_row: activation_bytes_per_row(cfg, act),
        backend: be.kind(),
        kv_bytes_per_token,
        gdn_bytes_per_slot: linear_layers * (conv + recurrent),
        attention,
        threads: rayon::current_num_threads(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::{AttentionKind, Dtype};

    fn model(route: RouteRequest, threads: usize) -> MemoryModel {
        MemoryModel {
            backend: BackendKind::Cpu,
            kv_bytes_per_token: 1000,
            gdn_bytes_per_slot: 77,
            attention: vec![AttentionLayer {
                layer: 3,
                kind: LayerKind {
                    attention: AttentionKind::Full,
                    head_dim: 64,
                    q_heads: 4,
                    kv_heads: 2,
                    dtype: Dtype::F32,
                },
                route,
            }],
            threads,
            activation_bytes_per_row: 0,
        }
    }

    #[test]
    fn composed_grows_with_kv_len_and_fused_does_not() {
        let c = model(RouteRequest::Composed { query_block: 128 }, 2);
        let small = c.predict(1024, 8, 512);
        let big = c.predict(8192, 8, 512);
        assert_eq!(small.kv_bytes, 1032 * 1000);
        assert_eq!(small.gdn_bytes, 77);
        assert_eq!(
            small.transient_bytes,
            2 * (2 * 128 * 64 + 128 * 1024 + 128) * 4
        );
        assert!(big.transient_bytes > 7 * small.transient_bytes);
        let f = model(RouteRequest::Fused, 2);
        assert_eq!(
            f.predict(1024, 8, 512).transient_bytes,
            f.predict(8192, 8, 512).transient_bytes
        );
        assert_eq!(small.total(), small.kv_bytes + 77 + small.transient_bytes);
    }

    #[test]
    fn a_solo_step_adds_activations_per_row_to_the_attention_transient() {
        let mut c = model(RouteRequest::Composed { query_block: 0 }, 1);
        c.backend = BackendKind::Cuda;
        c.activation_bytes_per_row = 1000;
        // group 2, qb = rows = 100, kv_len 300.
        assert_eq!(
            c.solo_step_transient(100, 300),
            100 * 1000 + 2 * 100 * 300 * 6
        );
        // kv_len is at least the rows of the step.
        assert_eq!(c.solo_step_transient(10, 0), 10 * 1000 + 2 * 10 * 10 * 6);
        c.attention[0].route = RouteRequest::Fused;
        assert_eq!(c.solo_step_transient(4096, 8192), 4096 * 1000);
    }

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

    #[test]
    fn cuda_composed_matches_its_workspace_formula() {
        let mut c = model(RouteRequest::Composed { query_block: 0 }, 1);
        c.backend = BackendKind::Cuda;
        // group 2, qb = q_len = 100, kv_len 300.
        assert_eq!(
            c.attention_transient(&c.attention[0], 100, 300),
            2 * 100 * 300 * 6
        );
    }
}
