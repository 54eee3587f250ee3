//! What one engine step did ([`StepReport`]): the sequences in its batch,
//! its rows, the tokens it drew ([`SampledRow`]) and its times.

/// A drawn token, (when captured) its logits row and (when asked) its log probabilities.
pub(crate) type Drawn = (u32, Option<Vec<f32>>, Option<crate::api::TokenLogprobs>);

/// One drawn token of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledRow {
    pub id: u64,
    pub token: u32,
    /// The row's logits (only with [`crate::EngineConfig::capture_logits`]).
    pub logits: Option<Vec<f32>>,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepReport {
    /// `(request id, rows)` of each sequence in the batch, in batch order.
    pub sequences: Vec<(u64, usize)>,
    pub prefill_rows: usize,
    pub decode_rows: usize,
    pub sampled: Vec<SampledRow>,
    /// Seconds in `model.step` and sampling (device work).
    pub forward_s: f64,
    /// Seconds the host spent in `model.step` queueing the forward (the
    /// rest of `forward_s` is waiting for the device and drawing tokens).
    pub queue_s: f64,
    /// Seconds of the whole step (admission, planning, bookkeeping included).
    pub total_s: f64,
    /// Largest attention transient of the step's calls.
    pub transient_bytes: u64,
}

impl StepReport {
    pub fn rows(&self) -> usize {
        self.prefill_rows + self.decode_rows
    }
}
