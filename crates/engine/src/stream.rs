//! A request's output stream ([`RequestStream`]) and the engine side of it
//! ([`StreamSink`]): events flow through an unbounded tokio channel; a
//! shared flag carries cancellation back (set by [`RequestStream::cancel`]
//! or when the stream is dropped), and the engine loop is woken to act on it.

use crate::api::StreamEvent;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Wakes the engine loop (a no-op for an engine driven by hand).
pub(crate) type Waker = Arc<dyn Fn() + Send + Sync>;

/// The caller's end: events of one request, in order, ending with
/// `Finished` or `Error`.
pub struct RequestStream {
    pub id: u64,
    rx: UnboundedReceiver<StreamEvent>,
    cancel: Arc<AtomicBool>,
    wake: Option<Waker>,
}

impl std::fmt::Debug for RequestStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestStream").field("id", &self.id).finish()
    }
}

impl RequestStream {
    /// The next event; `None` once the engine dropped its end.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        self.rx.recv().await
    }

    /// The next event, blocking the thread (not inside an async runtime).
    pub fn blocking_next(&mut self) -> Option<StreamEvent> {
        self.rx.blocking_recv()
    }

    /// An event if one is ready now.
    pub fn try_next(&mut self) -> Option<StreamEvent> {
        self.rx.try_recv().ok()
    }

    /// Asks the engine to stop this request; it ends with `Finished { reason: Cancelled }`.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Release);
        if let Some(w) = &self.wake {
            w();
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The engine's end of a request's stream.
#[derive(Debug)]
pub(crate) struct StreamSink {
    tx: UnboundedSender<StreamEvent>,
    cancel: Arc<AtomicBool>,
}

impl StreamSink {
    /// Sends an event (a closed stream is noticed by [`Self::cancelled`]).
    pub(crate) fn send(&self, e: StreamEvent) {
        let _ = self.tx.send(e);
    }

    /// True when the caller cancelled or dropped the stream.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire) || self.tx.is_closed()
    }
}

/// A connected pair for request `id`.
pub(crate) fn stream_pair(id: u64, wake: Option<Waker>) -> (RequestStream, StreamSink) {
    let (tx, rx) = unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    (
        RequestStream {
            id,
            rx,
            cancel: cancel.clone(),
            wake,
        },
        StreamSink { tx, cancel },
    )
}
