//! What one connection is doing, for its watchdog ([`Activity`]): idle
//! since when, reading a request head since when, or serving requests, and
//! since when a write to the socket has been blocked. The socket wrapper
//! ([`Watched`]) marks the first byte of a head and blocked writes; the service
//! marks a request's start ([`Activity::begin`]) and the response body's
//! end (dropping the [`InFlight`] guard inside [`GuardedBody`]).

use axum::body::Body;
use http_body::Frame;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// No request in flight, no byte of the next one received.
    Idle(Instant),
    /// Bytes of a request head received since this instant.
    Head(Instant),
    /// At least one request in flight.
    Busy,
}

/// Shared by a connection's socket, service and watchdog, and counted in
/// the server's total of requests in flight.
#[derive(Debug)]
pub struct Activity {
    phase: Mutex<Phase>,
    /// Since when the socket has refused every write (its send buffer full).
    write_blocked: Mutex<Option<Instant>>,
    in_flight: AtomicUsize,
    total: Arc<AtomicUsize>,
}

impl Activity {
    pub fn new(total: Arc<AtomicUsize>) -> Arc<Activity> {
        Arc::new(Activity {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            write_blocked: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            total,
        })
    }

    pub fn phase(&self) -> Phase {
        self.phase.lock().map(|p| *p).unwrap_or(Phase::Busy)
    }

    fn set(&self, p: Phase) {
        if let Ok(mut g) = self.phase.lock() {
            *g = p;
        }
    }

    /// Bytes arrived: an idle connection starts reading a head.
    fn bytes_read(&self) {
        if let Ok(mut g) = self.phase.lock() {
            if let Phase::Idle(_) = *g {
                *g = Phase::Head(Instant::now());
            }
        }
    }

    /// Since when writes have been blocked, if they are.
    pub fn write_blocked_since(&self) -> Option<Instant> {
        self.write_blocked.lock().ok().and_then(|w| *w)
    }

    /// A write was refused (`blocked`) or went through: a blocked stretch
    /// starts at its first refusal and ends at the next write that progresses.
    fn write_result(&self, blocked: bool) {
        if let Ok(mut w) = self.write_blocked.lock() {
            match (blocked, *w) {
                (true, None) => *w = Some(Instant::now()),
                (false, Some(_)) => *w = None,
                _ => {}
            }
        }
    }

    /// A request's head was read: in flight until the guard drops.
    pub fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
        self.set(Phase::Busy);
        InFlight(self.clone())
    }
}

/// One request in flight; dropping it (the response body ended or was
/// dropped) may make the connection idle.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.total.fetch_sub(1, Ordering::AcqRel);
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.set(Phase::Idle(Instant::now()));
        }
    }
}

/// A response body that holds its request's [`InFlight`] until it ends.
pub struct GuardedBody {
    pub inner: Body,
    pub guard: Option<InFlight>,
}

impl http_body::Body for GuardedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            self.guard = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that reports received bytes to its connection's [`Activity`].
pub struct Watched<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.write_result(r.is_pending());
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_bytes_requests_and_response_ends() {
        let total = Arc::new(AtomicUsize::new(0));
        let a = Activity::new(total.clone());
        assert!(matches!(a.phase(), Phase::Idle(_)));
        a.bytes_read();
        assert!(matches!(a.phase(), Phase::Head(_)));
        let g1 = a.begin();
        let g2 = a.begin();
        assert_eq!(a.phase(), Phase::Busy);
        assert_eq!(total.load(Ordering::Acquire), 2);
        a.bytes_read();
        assert_eq!(a.phase(), Phase::Busy);
        drop(g1);
        assert_eq!(a.phase(), Phase::Busy);
        drop(g2);
        assert!(matches!(a.phase(), Phase::Idle(_)));
        assert_eq!(total.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_blocked_stretch_runs_from_the_first_refused_write_to_the_next_progress() {
        let a = Activity::new(Arc::new(AtomicUsize::new(0)));
        assert_eq!(a.write_blocked_since(), None);
        a.write_result(false);
        assert_eq!(a.write_blocked_since(), None);
        a.write_result(true);
        let since = a.write_blocked_since().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        a.write_result(true);
        assert_eq!(
            a.write_blocked_since(),
            Some(since),
            "kept from the first refusal"
        );
        a.write_result(false);
        assert_eq!(a.write_blocked_since(), None);
    }
}
