//! Admission by memory: the bytes a request will need ([`MemoryModel::predict`]):
//! its KV rows for prompt + max tokens in whole blocks of [`KV_BLOCK_ROWS`]
//! rows (what the block pool hands out, as the pool's sizing counts them),
//! its GDN slot, and the transient peak of its attention calls under each
//! full-attention layer's route.
//!
//! The attention transient is the backend's own answer
//! (`Backend::workspace_model`, a [`WorkspaceModel`]: on the CPU exactly what
//! its kernels allocate, composed growing with `qL × kv_len` and fused
//! bounded by its tiles; on CUDA the composed route's score block per KV
//! head, 0 for fused). A request's largest call is its last prefill chunk
//! (at most `max_chunk` rows over the whole prompt) or its last decode
//! step; the prediction takes the larger.
//!
//! A step's activations ([`MemoryModel::activation_bytes_per_row`], the
//! model's estimate: `headroom_model::memory`) are not part of a request's
//! admission (a shared step is bounded by its token budget); they bound the
//! solo stripe a GPU grows to ([`MemoryModel::solo_step_transient`], used by
//! [`crate::stripe`]).

use crate::kv::{blocks_for, KV_BLOCK_ROWS};
use headroom_core::ops::{AttentionCall, Backend, WorkspaceModel};
use headroom_core::{AttentionKind, LayerKind, RouteRequest};
use headroom_model::memory::activation_bytes_per_row;
use headroom_model::Qwen35Model;
use serde::Serialize;
use std::sync::Arc;

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

/// Everything needed to predict a request's memory, without the model
/// (the backend's workspace account is detached from the backend).
#[derive(Debug, Clone)]
pub struct MemoryModel {
    /// KV bytes of one token over every full-attention layer.
    pub kv_bytes_per_token: u64,
    /// Bytes of one sequence's GDN state over every linear-attention layer.
    pub gdn_bytes_per_slot: u64,
    pub attention: Vec<AttentionLayer>,
    /// The backend's account of its attention workspace.
    pub workspace: Arc<dyn WorkspaceModel>,
    /// Estimated activation bytes one row of a step holds at its peak
    /// (see the module doc).
    pub activation_bytes_per_row: u64,
    /// Bytes of the logits of one sampled row (the LM head's output, the
    /// whole vocabulary in the activation dtype; twice that where a rank's
    /// vocabulary part is gathered).
    pub logits_bytes_per_row: u64,
    /// Bytes a step holds whatever its rows: FP8 experts kept FP8 on a CUDA
    /// device whose shape the native FP8 grouped GEMMs refuse are
    /// dequantized into bf16 scratch for the grouped GEMMs of more than 32
    /// rows, one layer's experts at a time ([`fp8_expert_scratch_bytes`]);
    /// 0 elsewhere.
    pub step_fixed_bytes: u64,
}

impl MemoryModel {
    /// KV bytes of `rows` rows held in whole blocks of [`KV_BLOCK_ROWS`]
    /// rows.
    pub fn kv_bytes(&self, rows: usize) -> u64 {
        let held = (blocks_for(rows) as u64).saturating_mul(KV_BLOCK_ROWS as u64);
        self.kv_bytes_per_token.saturating_mul(held)
    }

    /// Predicted bytes of a request of `prompt` tokens generating up to
    /// `max_tokens`, its prefill chunks at most `max_chunk` tokens.
    pub fn predict(&self, prompt: usize, max_tokens: usize, max_chunk: usize) -> Prediction {
        let rows = prompt.saturating_add(max_tokens);
        let q = max_chunk.clamp(1, prompt.max(1));
        let last_kv = prompt.saturating_add(max_tokens.saturating_sub(1));
        let transient = self
            .attention
            .iter()
            .map(|a| {
                let prefill = self.attention_transient(a, q, prompt.max(1), prompt.max(1));
                let decode = self.attention_transient(a, 1, last_kv.max(1), last_kv.max(1));
                prefill.max(decode)
            })
            .max()
            .unwrap_or(0);
        Prediction {
            kv_bytes: self.kv_bytes(rows),
            gdn_bytes: self.gdn_bytes_per_slot,
            transient_bytes: transient,
        }
    }

    /// Predicted transient bytes of one step of `rows` prompt rows of a
    /// request alone, its KV up to `kv_len` rows: the step's activations plus
    /// the largest attention call's transient plus the step's fixed bytes.
    pub fn solo_step_transient(&self, rows: usize, kv_len: usize) -> u64 {
        self.step_transient(rows, 1, 1, kv_len)
    }

    /// Predicted transient bytes of one step of `rows` rows in up to
    /// `sequences` sequences, of which `sampled` rows give logits, each
    /// sequence's attention over up to `kv_len` keys: the step's
    /// activations, the sampled rows' logits, the largest attention call's
    /// transient (all rows, `sequences` × `kv_len` keys together: a bound
    /// for a packed step) and the step's fixed bytes.
    pub fn step_transient(
        &self,
        rows: usize,
        sequences: usize,
        sampled: usize,
        kv_len: usize,
    ) -> u64 {
        let kv = kv_len.max(rows).max(1);
        let total = kv.saturating_mul(sequences.clamp(1, rows.max(1)));
        let attention = self
            .attention
            .iter()
            .map(|a| self.attention_transient(a, rows.max(1), kv, total))
            .max()
            .unwrap_or(0);
        self.activation_bytes_per_row
            .saturating_mul(rows as u64)
            .saturating_add(self.logits_bytes_per_row.saturating_mul(sampled as u64))
            .saturating_add(attention)
            .saturating_add(self.step_fixed_bytes)
    }

    /// Transient bytes of one attention call of `q_len` rows over `kv_len`
    /// keys (the longest sequence's; `total_kv_len` all the call's
    /// sequences' together): the backend's answer.
    pub fn attention_transient(
        &self,
        a: &AttentionLayer,
        q_len: usize,
        kv_len: usize,
        total_kv_len: usize,
    ) -> u64 {
        self.workspace.attention_bytes(&AttentionCall {
            layer: a.kind,
            route: a.route,
            q_len,
            kv_len,
            total_kv_len,
        })
    }
}

/// The memory model of `model` running `routes` (the workspace account: its
/// backend's, asked on this thread). `model` is one rank's shard (a plain model is the whole one): the
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
        logits_bytes_per_row: logits_bytes_per_row(model, act),
        step_fixed_bytes: fp8_expert_scratch_bytes(model),
        kv_bytes_per_token,
        gdn_bytes_per_slot: linear_layers * (conv + recurrent),
        attention,
        workspace: be.workspace_model(),
    }
}

/// Bytes of one sampled row's logits on a rank of `model`: the whole
/// vocabulary in `act` bytes, plus the rank's own part where the vocabulary
/// is split and gathered.
fn logits_bytes_per_row<B: Backend>(model: &Qwen35Model<B>, act: u64) -> u64 {
    let vocab = model.config().vocab_size as u64;
    let gathered = if model.shard().vocab.is_some() { 2 } else { 1 };
    vocab.saturating_mul(act).saturating_mul(gathered)
}

/// The bf16 scratch of one MoE layer's FP8 experts, as the backend
/// accounts it ([`WorkspaceModel::fp8_expert_scratch_bytes`]: on CUDA the
/// layer's gate_up and down, `experts · 3 · hidden · intermediate` bf16,
/// where the native FP8 grouped GEMMs do not take the shape), where the
/// checkpoint's experts are FP8 and held whole (a shard's experts are
/// dequantized at load); 0 for bf16 checkpoints and on backends that
/// dequantize at load (the CPU).
pub fn fp8_expert_scratch_bytes<B: Backend>(model: &Qwen35Model<B>) -> u64 {
    let cfg = model.config();
    let headroom_model::config::MlpConfig::Moe(m) = cfg.mlp else {
        return 0;
    };
    let fp8_experts =
        headroom_model::weights::fp8_in_config(cfg, "layers.0.mlp.experts.gate_up_proj");
    if !fp8_experts || !model.shard().is_whole() {
        return 0;
    }
    model.backend().workspace_model().fp8_expert_scratch_bytes(
        m.num_experts,
        cfg.hidden_size,
        m.moe_intermediate_size,
    )
}

/// The state pools could not be allocated (a device out of memory, most
/// often): an error that names what was asked and how much it needs.
pub(crate) fn state_pool_error(
    max_running: usize,
    max_context: usize,
    memory: &MemoryModel,
    e: headroom_model::ModelError,
) -> crate::EngineError {
    let running = max_running as u64;
    let kv = memory.kv_bytes(max_context).saturating_mul(running);
    let gdn = memory.gdn_bytes_per_slot.saturating_mul(running);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    crate::EngineError::Config(format!(
        "the state pools for {} running requests of up to {} tokens need {:.2} GiB \
         ({:.2} GiB KV cache + {:.2} GiB Gated DeltaNet state) and could not be allocated \
         ({e}); lower --max-running or --max-context",
        max_running,
        max_context,
        gib(kv.saturating_add(gdn)),
        gib(kv),
        gib(gdn),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::Dtype;
    use std::sync::Mutex;

    /// A backend's account that answers `q_len · kv_len + layer` and
    /// records every call it was asked.
    #[derive(Debug, Default)]
    struct Recording(Mutex<Vec<AttentionCall>>);

    impl WorkspaceModel for Recording {
        fn attention_bytes(&self, c: &AttentionCall) -> u64 {
            self.0.lock().unwrap().push(*c);
            (c.q_len * c.kv_len + c.layer.head_dim) as u64
        }
    }

    fn layer(layer: usize, head_dim: usize, route: RouteRequest) -> AttentionLayer {
        AttentionLayer {
            layer,
            kind: LayerKind {
                attention: AttentionKind::Full,
                head_dim,
                q_heads: 4,
                kv_heads: 2,
                dtype: Dtype::F32,
            },
            route,
        }
    }

    fn model(ws: Arc<Recording>, per_row: u64) -> MemoryModel {
        MemoryModel {
            kv_bytes_per_token: 1000,
            gdn_bytes_per_slot: 77,
            attention: vec![
                layer(3, 64, RouteRequest::Composed { query_block: 128 }),
                layer(7, 128, RouteRequest::Fused),
            ],
            workspace: ws,
            activation_bytes_per_row: per_row,
            logits_bytes_per_row: 0,
            step_fixed_bytes: 0,
        }
    }

    #[test]
    fn a_steps_fixed_bytes_add_to_its_solo_transient() {
        let ws = Arc::new(Recording::default());
        let plain = model(ws.clone(), 10);
        let fp8 = MemoryModel {
            step_fixed_bytes: 1 << 30,
            ..model(ws, 10)
        };
        for rows in [1, 64, 4096] {
            assert_eq!(
                fp8.solo_step_transient(rows, 8192),
                plain.solo_step_transient(rows, 8192) + (1 << 30)
            );
        }
    }

    #[test]
    fn the_cpu_holds_no_fp8_expert_scratch() {
        let cfg = headroom_model::ModelConfig::synthetic("tiny-d64-fp8").unwrap();
        let m = Qwen35Model::synthetic(headroom_cpu::CpuBackend::new(), &cfg, 1).unwrap();
        assert_eq!(fp8_expert_scratch_bytes(&m), 0);
    }

    #[test]
    fn the_transient_is_the_backends_answer_for_the_largest_call() {
        let ws = Arc::new(Recording::default());
        let m = model(ws.clone(), 0);
        let p = m.predict(1024, 8, 512);
        // 1,032 rows take 17 blocks of 64.
        assert_eq!((p.kv_bytes, p.gdn_bytes), (17 * 64 * 1000, 77));
        // The last prefill chunk: 512 rows over the 1024-token prompt (layer
        // 7's answer, the larger); decode: 1 row over 1031 keys.
        assert_eq!(p.transient_bytes, 512 * 1024 + 128);
        assert_eq!(p.total(), p.kv_bytes + 77 + p.transient_bytes);
        let asked = ws.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 4, "prefill and decode of each layer");
        for (call, a) in asked.chunks(2).zip(&m.attention) {
            assert_eq!((call[0].layer, call[0].route), (a.kind, a.route));
            assert_eq!((call[0].q_len, call[0].kv_len), (512, 1024));
            assert_eq!((call[1].q_len, call[1].kv_len), (1, 1031));
        }
        // A prompt shorter than the chunk is one chunk.
        assert_eq!(m.predict(100, 1, 512).transient_bytes, 100 * 100 + 128);
    }

    #[test]
    fn kv_bytes_are_whole_blocks_of_rows() {
        let m = model(Arc::new(Recording::default()), 0);
        assert_eq!(KV_BLOCK_ROWS, 64);
        for (rows, blocks) in [
            (0, 0),
            (1, 1),
            (63, 1),
            (64, 1),
            (65, 2),
            (128, 2),
            (129, 3),
        ] {
            assert_eq!(m.kv_bytes(rows), blocks * 64 * 1000, "{rows} rows");
        }
        // A request's prediction: prompt + max tokens, rounded up.
        assert_eq!(m.predict(60, 5, 512).kv_bytes, 2 * 64 * 1000);
        assert_eq!(m.predict(60, 4, 512).kv_bytes, 64 * 1000);
        // No overflow on absurd sizes.
        assert_eq!(m.kv_bytes(usize::MAX), u64::MAX);
    }

    #[test]
    fn a_solo_step_adds_activations_per_row_to_the_largest_attention_call() {
        let m = model(Arc::new(Recording::default()), 1000);
        assert_eq!(
            m.solo_step_transient(100, 300),
            100 * 1000 + 100 * 300 + 128
        );
        // kv_len is at least the rows of the step.
        assert_eq!(m.solo_step_transient(10, 0), 10 * 1000 + 10 * 10 + 128);
    }

    #[test]
    fn a_state_pool_that_cannot_be_allocated_is_an_error_with_the_numbers() {
        let mut m = model(Arc::new(Recording::default()), 0);
        m.kv_bytes_per_token = 20 << 10;
        m.gdn_bytes_per_slot = 63 << 20;
        let e = headroom_model::ModelError::Op {
            layer: None,
            source: headroom_core::OpError::shape("new_kv_cache", "out of memory"),
        };
        let msg = state_pool_error(128, 65_536, &m, e).to_string();
        // 128 x 65,536 x 20 KiB = 160 GiB of KV, 128 x 63 MiB = 7.875 GiB of state.
        for want in [
            "128 running",
            "65536 tokens",
            "167.88 GiB",
            "160.00 GiB KV",
            "7.88 GiB",
            "out of memory",
            "--max-running",
        ] {
            assert!(msg.contains(want), "{want}: {msg}");
        }
    }
}
