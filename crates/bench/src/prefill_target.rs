//! What the prefill bench drives ([`PrefillTarget`]: the engine's
//! scheduler, `crate::prefill_engine`, or the model's one-pass prefill,
//! `crate::prefill_model`) and what one measured prefill gives back
//! ([`PrefillRun`], with the attention calls as they reported themselves,
//! [`AttentionRun`]).

use crate::prefill_schema::{KvRecord, SchedulerRecord};
use headroom_core::{BackendKind, LayerKind, RouteRequest};

/// Attention calls of one layer as they reported themselves: the engine's
/// record (`calls` calls reported this route and block, the largest
/// transient of them; a layer whose calls disagree has several entries).
pub use headroom_engine::AttentionRun;

/// What one prefill produced.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillRun {
    /// Submission to the first sampled token, ms.
    pub ttft_ms: f64,
    pub attention: Vec<AttentionRun>,
    pub backend_before_bytes: u64,
    pub backend_peak_bytes: u64,
    /// Filled by the runner: the process peak RSS of this run.
    pub process_peak_rss_bytes: u64,
    /// Forwards from submission to the first token (1 for one pass).
    pub steps: usize,
}

/// What the bench drives: something that prefills one prompt with a route per layer.
pub trait PrefillTarget {
    fn backend(&self) -> BackendKind;
    /// The kind of every layer, index = layer.
    fn layer_kinds(&self) -> Vec<LayerKind>;
    fn vocab_size(&self) -> usize;
    /// `"model.prefill"` or `"engine"`.
    fn path(&self) -> &'static str;
    /// The scheduling settings (`steps_to_first_token` is filled by the
    /// runner from the runs).
    fn scheduler(&self) -> SchedulerRecord;
    /// The KV backend requested and resolved.
    fn kv(&self) -> KvRecord;
    /// Prefill `ids` from an empty state with `routes[i]` on full layer `i`
    /// (set for the whole run); time from submission to the first token.
    fn prefill(
        &mut self,
        ids: &[u32],
        routes: &[(usize, RouteRequest)],
    ) -> anyhow::Result<PrefillRun>;
}
