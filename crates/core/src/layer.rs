//! Per-layer kinds: what the attention policy decides on.
//!
//! Eligibility for an attention route comes from a layer's kind and shape,
//! never from the model family's name (review finding 2 of DESIGN.md).

use crate::Dtype;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// Softmax attention over the whole (causal) sequence, with a KV cache.
    Full,
    /// Gated DeltaNet linear attention with a recurrent state.
    Linear,
}

impl fmt::Display for AttentionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttentionKind::Full => "full",
            AttentionKind::Linear => "linear",
        })
    }
}

/// The shape of one decoder layer's token mixer.
///
/// For `Full` layers `q_heads`/`kv_heads`/`head_dim` are the softmax
/// attention's; for `Linear` layers they are the Gated DeltaNet's key heads,
/// value heads and key head dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub struct LayerKind {
    pub attention: AttentionKind,
    pub head_dim: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub dtype: Dtype,
}

impl fmt::Display for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} attention, head_dim {}, {} q heads / {} kv heads, {}",
            self.attention, self.head_dim, self.q_heads, self.kv_heads, self.dtype
        )
    }
}
