//! Model weights: canonical tensor name → [`Tensor`] in its storage dtype.
//!
//! # Canonical names
//!
//! The names are transformers' text-model names with the `model.` /
//! `model.language_model.` prefix removed (`lm_head.weight` keeps its name).
//! Shapes are row-major, `[out, in]` for every linear weight (as
//! `nn.Linear.weight`). With `H` = hidden_size, `V` = vocab_size, `D` =
//! head_dim, `nq`/`nkv` = attention heads / key-value heads, and for the Gated
//! DeltaNet `nk`/`nv` key/value heads of dims `dk`/`dv`, `Kc` = conv kernel,
//! `conv = 2*nk*dk + nv*dv`:
//!
//! | name | shape |
//! |---|---|
//! | `embed_tokens.weight` | `[V, H]` |
//! | `layers.N.input_layernorm.weight`, `layers.N.post_attention_layernorm.weight` | `[H]` |
//! | `layers.N.self_attn.q_proj.weight` (full layers) | `[nq*D*2, H]` with the output gate, else `[nq*D, H]` |
//! | `layers.N.self_attn.k_proj.weight`, `v_proj.weight` | `[nkv*D, H]` |
//! | `layers.N.self_attn.o_proj.weight` | `[H, nq*D]` |
//! | `layers.N.self_attn.q_norm.weight`, `k_norm.weight` | `[D]` |
//! | `layers.N.linear_attn.in_proj_qkv.weight` (linear layers) | `[conv, H]` |
//! | `layers.N.linear_attn.in_proj_z.weight` | `[nv*dv, H]` |
//! | `layers.N.linear_attn.in_proj_b.weight`, `in_proj_a.weight` | `[nv, H]` |
//! | `layers.N.linear_attn.conv1d.weight` | `[conv, 1, Kc]` |
//! | `layers.N.linear_attn.dt_bias`, `layers.N.linear_attn.A_log` | `[nv]` |
//! | `layers.N.linear_attn.norm.weight` | `[dv]` |
//! | `layers.N.linear_attn.out_proj.weight` | `[H, nv*dv]` |
//! | `layers.N.mlp.gate.weight` (MoE router) | `[E, H]` |
//! | `layers.N.mlp.experts.gate_up_proj` | `[E, 2*I, H]` |
//! | `layers.N.mlp.experts.down_proj` | `[E, H, I]` |
//! | `layers.N.mlp.shared_expert.gate_proj.weight`, `up_proj.weight` | `[Is, H]` |
//! | `layers.N.mlp.shared_expert.down_proj.weight` | `[H, Is]` |
//! | `layers.N.mlp.shared_expert_gate.weight` | `[1, H]` |
//! | `layers.N.mlp.gate_proj.weight`, `up_proj.weight` (dense `qwen3_5`) | `[Id, H]` |
//! | `layers.N.mlp.down_proj.weight` (dense) | `[H, Id]` |
//! | `norm.weight` | `[H]` |
//! | `lm_head.weight` (absent when `tie_word_embeddings`) | `[V, H]` |
//!
//! Layouts inside tensors, as transformers' Qwen3.5 modules use them:
//!
//! * **Experts** (one layout, transformers' `Qwen3_5MoeExperts`):
//!   `gate_up_proj[e]` is `[2*I, H]` whose rows `0..I` are the **gate**
//!   projection and rows `I..2*I` the **up** projection; expert `e`'s output
//!   is `down_proj[e] · (silu(gate·x) * (up·x))`. Checkpoints with one tensor
//!   per expert (`mlp.experts.E.gate_proj.weight` ...) are stacked into this
//!   layout on load; a checkpoint mixing per-expert and stacked tensors is an
//!   error. Stacked tensors in the older `x @ W` orientation (gate_up
//!   `[E, H, 2*I]` with gate in columns `0..I`, down `[E, I, H]`) are
//!   transposed per expert when their shape tells them apart (`H != 2*I`,
//!   resp. `H != I`); otherwise the canonical orientation is assumed.
//! * **Gated q_proj**: viewed as `[nq, 2*D, H]`, rows `0..D` of head `h` are
//!   its query and rows `D..2*D` its output gate (`sigmoid(gate)` multiplies
//!   the attention output of that head, before `o_proj`).
//! * **in_proj_qkv** rows: all q heads (`nk*dk`), then all k heads (`nk*dk`),
//!   then all v heads (`nv*dv`) — the conv1d channels in the same order. Value
//!   head `j` uses key head `j / (nv/nk)`. `qwen3_next` checkpoints
//!   (`in_proj_qkvz`, `in_proj_ba`, grouped per key head) are split into this
//!   layout on load.
//! * RMSNorms `input_layernorm`, `post_attention_layernorm`, `q_norm`,
//!   `k_norm`, `norm` are zero-centred: `y = x/rms(x) * (1 + w)`; the gated
//!   `linear_attn.norm` is plain: `y = x/rms(x) * w * silu(z)`.
//!
//! Vision (`visual.`, `model.visual.`) and multi-token-prediction (`mtp.`)
//! tensors are recognised and skipped. Tensors of rank ≥ 2 must have the
//! config's dtype, or, in an FP8 checkpoint (`ModelConfig::weight_format`),
//! be float8 e4m3 with a block-scale tensor `<name>_scale_inv` (see `fp8`
//! for the pairing, the checks and the host representation); 1-D tensors
//! (norms, `A_log`, `dt_bias`) may be any of f32 / f16 / bf16.

mod check;
mod experts;
mod fp8;
mod fused;
mod load;
mod names;
mod save;

pub use names::{
    canonical_name, expected_storage_bytes, expected_tensors, fp8_in_config, qwen_fp8_quantized,
    CheckpointName,
};
pub use save::write_safetensors;

use crate::Tensor;
use std::collections::BTreeMap;

/// Why weights could not be loaded or are not what the config needs.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The OS error is in the message only (not also a `source`), so it is printed once.
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error(
        "tensor `{name}` has {count} non-finite values (NaN or Inf): the checkpoint is corrupt"
    )]
    NonFinite { name: String, count: usize },
    /// A checkpoint file refused before reading (not a regular file, too
    /// large) or an output that could not be written.
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    #[error(
        "{path}: the file ends early ({len} bytes, shorter than its safetensors header declares): \
         it is truncated (an interrupted copy or download, or a full disk)"
    )]
    Truncated { path: String, len: usize },
    #[error("{path}: not a valid safetensors file ({reason})")]
    Safetensors { path: String, reason: String },
    #[error("{path}: malformed shard index: {reason}")]
    Index { path: String, reason: String },
    #[error("no *.safetensors file in {0}")]
    NoFiles(String),
    #[error("missing tensor `{name}` (expected shape {expected:?})")]
    Missing { name: String, expected: Vec<usize> },
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error("tensor `{name}` has dtype {actual}, expected {expected}")]
    Dtype {
        name: String,
        expected: String,
        actual: String,
    },
    #[error("unexpected text tensor `{0}` (not part of this model's config)")]
    Unexpected(String),
    #[error("tensor `{0}` appears more than once")]
    Duplicate(String),
    #[error("layer {layer}: mixed expert layouts ({detail}); use either one tensor per expert or stacked experts")]
    MixedExpertLayout { layer: usize, detail: String },
    #[error("no tensor named `{0}`")]
    NotFound(String),
    /// An FP8 weight or block scale that does not fit (see `weights::fp8`).
    #[error("tensor `{name}` {reason}")]
    Fp8 { name: String, reason: String },
    #[error(
        "tensor `{name}` has {count} e4m3 NaN bytes (0x7F / 0xFF), the first at element {first}: \
         the checkpoint is corrupt"
    )]
    Fp8Nan {
        name: String,
        count: usize,
        first: usize,
    },
}

/// All tensors of a text model under their canonical names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Weights {
    tensors: BTreeMap<String, Tensor>,
}

impl Weights {
    /// Wraps a ready map of canonical tensors (no validation; see [`Weights::check`]).
    pub fn from_tensors(map: impl IntoIterator<Item = (String, Tensor)>) -> Weights {
        Weights {
            tensors: map.into_iter().collect(),
        }
    }

    /// The tensor `name`, or [`WeightsError::NotFound`].
    pub fn get(&self, name: &str) -> Result<&Tensor, WeightsError> {
        self.tensors
            .get(name)
            .ok_or_else(|| WeightsError::NotFound(name.to_string()))
    }

    /// Inserts or replaces one tensor; returns the previous one.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) -> Option<Tensor> {
        self.tensors.insert(name.into(), tensor)
    }

    /// Removes one tensor.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        self.tensors.remove(name)
    }

    /// Canonical names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// (name, tensor) pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Total bytes held in storage dtype (FP8: one byte per element plus the scales).
    pub fn storage_bytes(&self) -> usize {
        self.tensors.values().map(Tensor::storage_bytes).sum()
    }

    /// Checks that exactly the tensors of [`expected_tensors`] are present,
    /// with their shapes, and that every tensor of rank ≥ 2 has the config's dtype.
    pub fn check(&self, cfg: &crate::ModelConfig) -> Result<(), WeightsError> {
        check::check(&self.tensors, cfg)
    }
}
