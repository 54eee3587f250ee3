//! One request inside the engine ([`Sequence`]): its tokens, how far its
//! rows are in the KV/GDN state, its slot and KV block table, its predicted
//! memory, and the stream it reports to. A preempted sequence keeps its
//! prompt and generated tokens and re-prefills all of them when admitted
//! again ([`Sequence::preempted`]); its stream only pauses.

use crate::api::{
    AttentionRun, FinishReason, GenerateRequest, SamplingExtras, StreamEvent, TokenLogprobs, Usage,
};
use crate::memory::Prediction;
use crate::prefix::BlockHash;
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
    /// Penalties and log probabilities (drawn on the host when any is asked).
    pub extras: SamplingExtras,
    pub max_tokens: usize,
    pub stops: Vec<u32>,
    /// State slot (valid once admitted).
    pub slot: usize,
    /// Tokens whose rows are in the state.
    pub processed: usize,
    /// Tokens fed as prefill (the prompt; after a preemption the prompt and
    /// every generated token), the last row drawing the next token.
    pub prefill_target: usize,
    /// The KV blocks holding its rows, in token order (paged KV).
    pub blocks: Vec<u32>,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Chain hashes of its full blocks of tokens (prompt, then generated)
    /// computed so far (`crate::prefix`).
    pub hashes: Vec<BlockHash>,
    /// Prompt tokens its first admission took from the prefix cache.
    pub cached_tokens: usize,
    /// Where its cached blocks branched off without a snapshot there, when
    /// it did: a snapshot point of its prefill (`crate::core`'s cache).
    pub branch: Option<usize>,
    pub prediction: Prediction,
    pub submitted: Instant,
    pub ttft_ms: Option<f64>,
    /// One entry per (layer, route, query block) the calls reported: a
    /// layer whose calls disagree shows up twice.
    pub attention: Vec<AttentionRun>,
    pub sink: StreamSink,
    /// Whether its wait for memory was logged.
    pub waited_for_memory: bool,
    /// The token it drew in a step still in flight (the engine's step
    /// overlap): that step's number and the token's row among its draws.
    /// Its next decode row takes the token from there (`StepIds`).
    pub feed: Option<(u64, usize)>,
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
        let prefill_target = r.prompt_ids.len();
        Sequence {
            id,
            prompt: r.prompt_ids,
            generated: Vec::new(),
            sampling: r.sampling,
            extras: r.extras,
            max_tokens: r.max_tokens,
            stops,
            slot: usize::MAX,
            processed: 0,
            prefill_target,
            blocks: Vec::new(),
            preemptions: 0,
            hashes: Vec::new(),
            cached_tokens: 0,
            branch: None,
            prediction,
            submitted: Instant::now(),
            ttft_ms: None,
            attention: Vec::new(),
            sink,
            waited_for_memory: false,
            feed: None,
        }
    }

    /// Prefill tokens not yet in the state.
    pub(crate) fn remaining_prompt(&self) -> usize {
        self.prefill_target.saturating_sub(self.processed)
    }

    /// Appends the next `n` input tokens to `out`: prefill rows (the prompt,
    /// then generated tokens after a preemption), or the last drawn token.
    pub(crate) fn push_inputs(&self, n: usize, out: &mut Vec<u32>) {
        if self.processed < self.prefill_target {
            let (from, to) = (self.processed, self.processed + n);
            let p = self.prompt.len();
            out.extend_from_slice(&self.prompt[from.min(p)..to.min(p)]);
            out.extend_from_slice(&self.generated[from.max(p) - p..to.max(p) - p]);
        } else {
            let last = self.generated.len().saturating_sub(1);
            out.extend_from_slice(&self.generated[last..]);
        }
    }

    /// Tokens drawn and not yet read (the step overlap: 0 or 1).
    pub(crate) fn unread(&self) -> usize {
        usize::from(self.feed.is_some())
    }

    /// Whether its next row is a decode row: its prompt is in, and the
    /// token it waits for (if any) will not end it by `max_tokens`.
    pub(crate) fn decodes_next(&self) -> bool {
        self.remaining_prompt() == 0 && self.generated.len() + self.unread() < self.max_tokens
    }

    /// Whether a step feeding it `n` rows ends with a token drawn.
    pub(crate) fn draws_after(&self, n: usize) -> bool {
        self.processed + n >= self.prefill_target
    }

    /// Forgets its rows (its slot and blocks were given back): when admitted
    /// again it prefills its prompt and every generated token, and the last
    /// of those rows draws the token a decode step would have.
    pub(crate) fn preempted(&mut self) {
        self.processed = 0;
        self.prefill_target = self.prompt.len() + self.generated.len();
        self.slot = usize::MAX;
        self.preemptions += 1;
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

    /// Records a drawn token (streamed after its log probabilities, when
    /// asked); returns the finish reason when it ends the sequence.
    pub(crate) fn push_token(
        &mut self,
        token: u32,
        logprobs: Option<TokenLogprobs>,
    ) -> Option<FinishReason> {
        if self.ttft_ms.is_none() {
            self.ttft_ms = Some(self.submitted.elapsed().as_secs_f64() * 1e3);
        }
        self.generated.push(token);
        if self.stops.contains(&token) {
            return Some(FinishReason::Stop);
        }
        if let Some(lp) = logprobs {
            self.sink.send(StreamEvent::Logprobs(lp));
        }
        self.sink.send(StreamEvent::Token(token));
        (self.generated.len() >= self.max_tokens).then_some(FinishReason::Length)
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt.len(),
            completion_tokens: self.generated.len(),
            ttft_ms: self.ttft_ms.unwrap_or(0.0),
            cached_tokens: self.cached_tokens,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preempted_sequence_refeeds_prompt_and_generated_tokens() {
        let (_stream, sink) = crate::stream::stream_pair(1, None);
        let r = GenerateRequest::greedy(vec![10, 11, 12], 8);
        let p = Prediction {
            kv_bytes: 0,
            gdn_bytes: 0,
            transient_bytes: 0,
        };
        let mut s = Sequence::new(1, r, &[], p, sink);
        let mut out = Vec::new();
        s.push_inputs(2, &mut out);
        assert_eq!((out.as_slice(), s.draws_after(2)), (&[10, 11][..], false));
        s.processed = 3;
        s.push_token(20, None);
        s.push_token(21, None);
        s.processed = 4;
        assert_eq!(s.remaining_prompt(), 0);
        out.clear();
        s.push_inputs(1, &mut out);
        assert_eq!(out, vec![21], "decode feeds the last drawn token");
        s.preempted();
        assert_eq!(
            (s.processed, s.remaining_prompt(), s.preemptions),
            (0, 5, 1)
        );
        out.clear();
        s.push_inputs(2, &mut out);
        s.processed = 2;
        s.push_inputs(3, &mut out);
        assert_eq!(out, vec![10, 11, 12, 20, 21]);
        assert!(s.draws_after(3) && !s.draws_after(2));
    }
}
