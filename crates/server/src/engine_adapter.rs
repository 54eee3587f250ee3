//! The engine behind the server: [`Generator`] for `headroom_engine::EngineHandle`
//! (its request, event and error types are the server's too).

use crate::generator::{Generator, TokenStream};
use futures_util::future::BoxFuture;
use headroom_engine::{
    EngineHandle, EngineStats, GenerateRequest, RequestStream, StreamEvent, SubmitError,
};

struct EngineStream(RequestStream);

impl TokenStream for EngineStream {
    fn next(&mut self) -> BoxFuture<'_, Option<StreamEvent>> {
        Box::pin(self.0.next())
    }

    fn cancel(&mut self) {
        self.0.cancel();
    }
}

impl Generator for EngineHandle {
    fn submit(&self, r: GenerateRequest) -> Result<Box<dyn TokenStream>, SubmitError> {
        EngineHandle::submit(self, r).map(|s| Box::new(EngineStream(s)) as Box<dyn TokenStream>)
    }

    fn stats(&self) -> EngineStats {
        EngineHandle::stats(self)
    }

    fn max_context(&self) -> usize {
        EngineHandle::max_context(self)
    }

    fn shutdown(&self) {
        EngineHandle::shutdown(self)
    }

    /// A step panicked (the loop stopped; a failed step is handled inside
    /// the loop, which aborts that step's requests and goes on).
    fn health(&self) -> Result<(), String> {
        EngineHandle::health(self)
    }
}
