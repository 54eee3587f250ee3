//! The checks a submitted request passes before it is queued
//! ([`Limits::check`], shared by the handle and the loop): context length,
//! queue length, whether it could ever fit the KV pool or the memory
//! budget, and its ids and sampling parameters.

use crate::api::{GenerateRequest, SubmitError};
use crate::memory::{MemoryModel, Prediction};
use crate::settings::SchedulerSettings;

/// What a submitted request is checked against (shared by the handle and the loop).
#[derive(Debug, Clone)]
pub struct Limits {
    pub memory: MemoryModel,
    pub settings: SchedulerSettings,
    /// The resolved solo stripe ([`crate::stripe`]): a request's largest prefill chunk.
    pub solo_tokens: usize,
    /// Bytes the pool plan left for a step's transients
    /// ([`crate::pool::PoolPlan::transient_room_bytes`]; `None`: unbounded):
    /// the bound an `auto` solo stripe on CUDA resolves within.
    pub transient_room_bytes: Option<u64>,
    /// The memory budget a request's prediction must fit (contiguous KV).
    pub budget: Option<u64>,
    /// The paged KV pool's blocks a request's prompt + max tokens must fit.
    pub pool_blocks: Option<usize>,
    /// Bytes of one KV block (messages).
    pub block_bytes: u64,
    pub max_context: usize,
    pub max_waiting: usize,
    /// Tokens between prefix-cache snapshots, where prefill chunks are cut
    /// (`None`: caching off or only at prompt ends).
    pub prefix_interval: Option<usize>,
    pub vocab: usize,
    /// End-of-sequence ids added to every request's stop tokens.
    pub eos: Vec<u32>,
}

/// A request that passed [`Limits::check`], or why it cannot run at all.
pub enum Checked {
    Ok(Prediction),
    /// Well-formed for the engine but not runnable (bad ids or sampling):
    /// answered on its stream with an error event.
    Invalid(String),
}

impl Limits {
    /// The request's predicted bytes, or why it is refused.
    pub fn check(&self, r: &GenerateRequest, waiting: usize) -> Result<Checked, SubmitError> {
        let tokens = r.prompt_ids.len().saturating_add(r.max_tokens);
        if tokens > self.max_context {
            return Err(SubmitError::TooLong {
                tokens,
                limit: self.max_context,
            });
        }
        if waiting >= self.max_waiting {
            return Err(SubmitError::QueueFull {
                limit: self.max_waiting,
            });
        }
        if let Some(why) = self.invalid(r) {
            return Ok(Checked::Invalid(why));
        }
        let p = self.predict(r);
        if let Some(pool) = self.pool_blocks {
            let need = crate::kv::blocks_for(tokens);
            if need > pool {
                let bytes = |b: usize| (b as u64).saturating_mul(self.block_bytes);
                return Err(SubmitError::NeverFits {
                    predicted_bytes: bytes(need),
                    budget_bytes: bytes(pool),
                    detail: format!(
                        "{tokens} tokens need {need} KV blocks of {} rows; the whole KV pool \
                         holds {pool} blocks",
                        crate::kv::KV_BLOCK_ROWS
                    ),
                });
            }
        }
        if let Some(budget) = self.budget {
            if p.total() > budget {
                return Err(SubmitError::NeverFits {
                    predicted_bytes: p.total(),
                    budget_bytes: budget,
                    detail: p.detail(),
                });
            }
        }
        Ok(Checked::Ok(p))
    }

    pub fn predict(&self, r: &GenerateRequest) -> Prediction {
        self.memory.predict(
            r.prompt_ids.len(),
            r.max_tokens,
            self.settings.max_chunk(true, self.solo_tokens),
        )
    }

    fn invalid(&self, r: &GenerateRequest) -> Option<String> {
        if r.prompt_ids.is_empty() {
            return Some("the prompt has no tokens".into());
        }
        if let Some(pos) = r
            .prompt_ids
            .iter()
            .position(|&id| id as usize >= self.vocab)
        {
            return Some(format!(
                "token id {} at position {pos} is out of range (vocab_size {})",
                r.prompt_ids[pos], self.vocab
            ));
        }
        let s = &r.sampling;
        if !(s.temperature.is_finite() && s.temperature >= 0.0) {
            return Some(format!("temperature must be >= 0 (got {})", s.temperature));
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            return Some(format!("top_p must be in (0, 1] (got {})", s.top_p));
        }
        r.extras.invalid()
    }
}
