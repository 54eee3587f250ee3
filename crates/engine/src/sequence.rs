//! One request inside the engine ([`Sequence`]): its tokens, how far its
//! rows are in the KV/GDN state, its slot, its predicted memory, and the
//! stream it reports to.

use crate::api::{AttentionRun, FinishReason, GenerateRequest, StreamEvent, Usage};
use crate::memory::Prediction;
use crate::stream::StreamSink;
use headroom_core::ops::SamplingParams;
use headroom_model::qwen3_5::LayerAttentionReport;
use std::time::Instant;

/// A request waiting for admission or running.
#[derive(Debug)]
pub(crate) struct Sequence {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub generated: Vec<u32>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stops: Vec<u32>,
    /// State slot (valid once admitted).
    pub slot: usize,
    /// Tokens whose rows are in the state.
    pub processed: usize,
    pub prediction: Prediction,
    pub submitted: Instant,
    pub ttft_ms: Option<f64>,
    /// One entry per (layer, route, query block) the calls reported: a
    /// layer whose calls disagree shows up twice.
    pub attention: Vec<AttentionRun>,
    pub sink: StreamSink,
    /// Whether its wait for memory was logged.
    pub waited_for_memory: bool,
}

impl Sequence {
    pub(crate) fn new(
        id: u64,
        r: GenerateRequest,
        eos: &[u32],
        prediction: Prediction,
        sink: StreamSink,
    ) -> Sequence {
        let mut stops = r.stop_token_ids;
        if !r.ignore_eos {
            stops.extend_from_slice(eos);
        }
        Sequence {
            id,
            prompt: r.prompt_ids,
            generated: Vec::new(),
            sampling: r.sampling,
            max_tokens: r.max_tokens,
            stops,
            slot: usize::MAX,
            processed: 0,
            prediction,
            submitted: Instant::now(),
            ttft_ms: None,
            attention: Vec::new(),
            sink,
            waited_for_memory: false,
        }
    }

    /// Prompt tokens not yet in the state.
    pub(crate) fn remaining_prompt(&self) -> usize {
        self.prompt.len().saturating_sub(self.processed)
    }

    /// The next `n` input tokens (prompt rows, or the last drawn token).
    pub(crate) fn next_inputs(&self, n: usize) -> &[u32] {
        if self.processed < self.prompt.len() {
            &self.prompt[self.processed..self.processed + n]
        } else {
            let last = self.generated.len().saturating_sub(1);
            &self.generated[last..]
        }
    }

    /// Counts each layer's calls per reported (route, query block), keeping
    /// the largest transient.
    pub(crate) fn note_attention(&mut self, r: &LayerAttentionReport) {
        let (layer, route, query_block) = (r.layer, r.report.route, r.report.query_block);
        let transient = r.report.transient_bytes;
        match self
            .attention
            .iter_mut()
            .find(|a| (a.layer, a.route, a.query_block) == (layer, route, query_block))
        {
            Some(a) => {
                a.calls += 1;
                a.transient_bytes = a.transient_bytes.max(transient);
            }
            None => self.attention.push(AttentionRun {
                layer,
                route,
                query_block,
                transient_bytes: transient,
                calls: 1,
            }),
        }
    }

    /// Records a drawn token; returns the finish reason when it ends the sequence.
    pub(crate) fn push_token(&mut self, token: u32) -> Option<FinishReason> {
        if self.ttft_ms.is_none() {
            self.ttft_ms = Some(self.submitted.elapsed().as_secs_f64() * 1e3);
        }
        self.generated.push(token);
        if self.stops.contains(&token) {
            return Some(FinishReason::Stop);
        }
        self.sink.send(StreamEvent::Token(token));
        (self.generated.len() >= self.max_tokens).then_some(FinishReason::Length)
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt.len(),
            completion_tokens: self.generated.len(),
            ttft_ms: self.ttft_ms.unwrap_or(0.0),
        }
    }

    /// Sends the final event.
    pub(crate) fn finish(&self, reason: FinishReason) {
        self.sink.send(StreamEvent::Finished {
            reason,
            usage: self.usage(),
            attention: {
                let mut runs = self.attention.clone();
                runs.sort_by_key(|a| a.layer);
                runs
            },
        });
    }
}
