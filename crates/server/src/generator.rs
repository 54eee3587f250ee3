//! What the server needs from an engine ([`Generator`]): submit a request of
//! prompt ids and get a stream of token events, read the counters, shut down.
//! It speaks the engine's own API types (`headroom_engine::api`:
//! [`GenerateRequest`], [`StreamEvent`], [`SubmitError`], [`EngineStats`]).
//! The engine implements it in `engine_adapter.rs`; tests use the scripted
//! [`crate::fake::FakeGenerator`]. Dropping a [`TokenStream`] cancels its request.

use futures_util::future::BoxFuture;
pub use headroom_engine::{
    EngineStats, FinishReason, GenerateRequest, StreamEvent, SubmitError, Usage,
};

/// A request's events, in order, ending with `Finished` or `Error`.
/// Dropping it cancels the request.
pub trait TokenStream: Send {
    /// The next event; `None` once the engine dropped its end.
    fn next(&mut self) -> BoxFuture<'_, Option<StreamEvent>>;
    /// Asks the engine to stop the request while keeping the stream: its
    /// remaining events, then `Finished { reason: Cancelled }` with the
    /// request's usage, can still be read.
    fn cancel(&mut self);
}

/// An engine the server can drive.
pub trait Generator: Send + Sync + 'static {
    fn submit(&self, r: GenerateRequest) -> Result<Box<dyn TokenStream>, SubmitError>;
    fn stats(&self) -> EngineStats;
    /// Most tokens (prompt + generated) of one request.
    fn max_context(&self) -> usize;
    /// Stops the engine: in-flight requests end with an error event.
    fn shutdown(&self);
    /// `Err(why)` once the engine can serve no more requests (its loop died):
    /// `/health` answers 503 and new requests are refused.
    fn health(&self) -> Result<(), String> {
        Ok(())
    }
}
