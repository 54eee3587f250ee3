//! What the server needs from an engine ([`Generator`]): submit a request of
//! prompt ids and get a stream of token events, read the counters, shut down.
//! The engine implements it in `engine_adapter.rs`; tests use the scripted
//! [`crate::fake::FakeGenerator`]. Dropping a [`TokenStream`] cancels its request.

use futures_util::future::BoxFuture;
use headroom_core::ops::SamplingParams;

/// One generation request (the engine's `GenerateRequest`).
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    pub prompt_ids: Vec<u32>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stop_token_ids: Vec<u32>,
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenFinish {
    Stop,
    Length,
    Cancelled,
}

/// One event of a request's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum GenEvent {
    Token(u32),
    Finished {
        reason: GenFinish,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Error(String),
}

/// Why a request was refused at submit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenRefusal {
    #[error("the request needs a predicted {predicted_bytes} bytes of memory but the engine's budget is {budget_bytes} bytes ({detail})")]
    NeverFits {
        predicted_bytes: u64,
        budget_bytes: u64,
        detail: String,
    },
    #[error("prompt + max_tokens = {tokens} tokens exceed the context limit of {limit} tokens")]
    TooLong { tokens: usize, limit: usize },
    #[error("the engine's waiting queue is full ({limit} requests)")]
    QueueFull { limit: usize },
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// The engine's counters the metrics report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub admitted: u64,
    pub refused: u64,
    pub finished: u64,
    pub cancelled: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
}

/// A request's events, in order, ending with `Finished` or `Error`.
/// Dropping it cancels the request.
pub trait TokenStream: Send {
    /// The next event; `None` once the engine dropped its end.
    fn next(&mut self) -> BoxFuture<'_, Option<GenEvent>>;
}

/// An engine the server can drive.
pub trait Generator: Send + Sync + 'static {
    fn submit(&self, r: GenRequest) -> Result<Box<dyn TokenStream>, GenRefusal>;
    fn stats(&self) -> GenStats;
    /// Most tokens (prompt + generated) of one request.
    fn max_context(&self) -> usize;
    /// Stops the engine: in-flight requests end with an error event.
    fn shutdown(&self);
}
