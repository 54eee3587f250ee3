//! The engine behind the server: [`Generator`] for `headroom_engine::EngineHandle`.

use crate::generator::{
    GenEvent, GenFinish, GenRefusal, GenRequest, GenStats, Generator, TokenStream,
};
use futures_util::future::BoxFuture;
use headroom_engine::{
    EngineHandle, FinishReason, GenerateRequest, RequestStream, StreamEvent, SubmitError,
};

struct EngineStream(RequestStream);

impl TokenStream for EngineStream {
    fn next(&mut self) -> BoxFuture<'_, Option<GenEvent>> {
        Box::pin(async move { self.0.next().await.map(event) })
    }
}

fn event(e: StreamEvent) -> GenEvent {
    match e {
        StreamEvent::Token(t) => GenEvent::Token(t),
        StreamEvent::Finished { reason, usage, .. } => GenEvent::Finished {
            reason: match reason {
                FinishReason::Stop => GenFinish::Stop,
                FinishReason::Length => GenFinish::Length,
                FinishReason::Cancelled => GenFinish::Cancelled,
            },
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        },
        StreamEvent::Error(e) => GenEvent::Error(e),
    }
}

fn refusal(e: SubmitError) -> GenRefusal {
    match e {
        SubmitError::NeverFits {
            predicted_bytes,
            budget_bytes,
            detail,
        } => GenRefusal::NeverFits {
            predicted_bytes,
            budget_bytes,
            detail,
        },
        SubmitError::TooLong { tokens, limit } => GenRefusal::TooLong { tokens, limit },
        SubmitError::QueueFull { limit } => GenRefusal::QueueFull { limit },
        SubmitError::ShuttingDown => GenRefusal::ShuttingDown,
    }
}

impl Generator for EngineHandle {
    fn submit(&self, r: GenRequest) -> Result<Box<dyn TokenStream>, GenRefusal> {
        let req = GenerateRequest {
            prompt_ids: r.prompt_ids,
            sampling: r.sampling,
            max_tokens: r.max_tokens,
            stop_token_ids: r.stop_token_ids,
        };
        EngineHandle::submit(self, req)
            .map(|s| Box::new(EngineStream(s)) as Box<dyn TokenStream>)
            .map_err(refusal)
    }

    fn stats(&self) -> GenStats {
        let s = EngineHandle::stats(self);
        GenStats {
            running: s.running,
            waiting: s.waiting,
            kv_blocks_used: s.kv_blocks_used,
            kv_blocks_free: s.kv_blocks_free,
            admitted: s.admitted,
            refused: s.refused,
            finished: s.finished,
            cancelled: s.cancelled,
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
        }
    }

    fn max_context(&self) -> usize {
        EngineHandle::max_context(self)
    }

    fn shutdown(&self) {
        EngineHandle::shutdown(self)
    }
}
