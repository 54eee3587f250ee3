//! The attention bench's JSON evidence, `headroom.bench.attention/1`.

use headroom_core::{Dtype, Route};
use headroom_hardware::HardwareFingerprint;
use serde::{Deserialize, Serialize};

pub const ATTENTION_SCHEMA: &str = "headroom.bench.attention/1";

/// One bench run: the machine and one sample per (length, route arm).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionBenchFile {
    /// Always [`ATTENTION_SCHEMA`].
    pub schema: String,
    /// The fingerprint of the machine (and device) the samples ran on.
    pub hardware: HardwareFingerprint,
    pub samples: Vec<AttentionSample>,
}

/// One (length, route) arm. `route` and `query_block` are what the backend
/// reported it ran, not what was requested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionSample {
    pub backend: String,
    /// Query rows (`q_len`); `kv_len = length + history`.
    pub length: usize,
    pub history: usize,
    pub route: Route,
    pub query_block: Option<usize>,
    pub dtype: Dtype,
    pub head_dim: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub iterations: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    /// `causal_flops / median`, in 1e9 FLOP/s.
    pub gflops: f64,
    pub transient_bytes: u64,
    /// Relative Frobenius error against the f64 reference on the checked subset
    /// (`null` when the output held a NaN).
    pub rel_err: Option<f64>,
}
