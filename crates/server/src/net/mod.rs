//! The server loop ([`serve`]): accepting connections under the
//! [`ConnLimits`] and shutting down gracefully.
//!
//! * At most `max_connections` are open; a connection beyond it is answered
//!   503 and closed at once (no request of it is read).
//! * Each connection has a watchdog: a request head that takes longer than
//!   `header_timeout` from its first byte, an idle connection (no request
//!   in flight, no byte received) older than `keep_alive_timeout`, or a
//!   connection whose writes have been blocked for `write_timeout` (a client
//!   that stopped reading its response) is closed; closing drops the
//!   response, which cancels its request in the engine.
//!   Bodies are read under `body_timeout` by [`body::read_body`].
//! * At shutdown the listener is closed; requests on kept-alive connections
//!   are answered 503 with `Connection: close` while in-flight requests
//!   finish for the grace; then the generator is shut down (ending the
//!   rest), and every connection is closed once its last response ended.

pub mod activity;
pub mod body;
pub mod limits;

use crate::error::ApiError;
use crate::state::AppState;
use activity::{Activity, GuardedBody, Phase, Watched};
use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::Router;
pub use limits::ConnLimits;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Most connections being refused at once (each for at most a second);
/// beyond it a refused connection is closed without an answer.
const MAX_REFUSING: usize = 256;

/// How long, after the generator was shut down, responses may take to end.
const FINAL_WAIT: Duration = Duration::from_secs(2);

/// Serves `router` on `listener` until `shutdown` resolves, then drains
/// (see the module comment) for `grace` and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let limits = state.config.limits;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let (close_tx, close_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of file descriptors and the like: the watchdogs free some.
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let c = Connection {
                    router: router.clone(),
                    state: state.clone(),
                    activity: Activity::new(in_flight.clone()),
                    limits,
                    close: close_rx.clone(),
                    _permit: permit,
                };
                tokio::spawn(c.run(stream));
            }
            Err(_) => {
                state.metrics.http_error(503);
                if let Ok(p) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(refuse(stream, limits.max_connections, p));
                }
            }
        }
    }
    drop(listener);
    tracing::info!("shutting down: draining in-flight requests (grace {grace:?})");
    state.start_draining();
    wait_idle(&in_flight, grace).await;
    state.generator.shutdown();
    wait_idle(&in_flight, FINAL_WAIT).await;
    let _ = close_tx.send(true);
    Ok(())
}

/// Waits until no request is in flight, at most `limit`.
async fn wait_idle(in_flight: &AtomicUsize, limit: Duration) {
    let end = Instant::now() + limit;
    while in_flight.load(Ordering::Acquire) > 0 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Answers a connection over the cap 503 and closes it.
async fn refuse(mut stream: TcpStream, limit: usize, _permit: OwnedSemaphorePermit) {
    let body = ApiError::unavailable(format!(
        "too many open connections (the limit is {limit}); retry later"
    ))
    .body()
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent so that closing does not reset the answer away.
        let mut buf = [0u8; 4096];
        while stream.read(&mut buf).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// One accepted connection.
struct Connection {
    router: Router,
    state: Arc<AppState>,
    activity: Arc<Activity>,
    limits: ConnLimits,
    close: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let io = hyper_util::rt::TokioIo::new(Watched {
            inner: stream,
            activity: self.activity.clone(),
        });
        let (router, state, activity) = (
            self.router.clone(),
            self.state.clone(),
            self.activity.clone(),
        );
        let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
            let guard = activity.begin();
            let mut router = router.clone();
            let draining = state.draining();
            async move {
                let mut r =
                    match tower_service::Service::call(&mut router, req.map(Body::new)).await {
                        Ok(r) => r,
                        Err(never) => match never {},
                    };
                if draining {
                    r.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, std::convert::Infallible>(r.map(|b| {
                    Body::new(GuardedBody {
                        inner: b,
                        guard: Some(guard),
                    })
                }))
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(io, service);
        tokio::pin!(conn);
        let tick = (self
            .limits
            .header_timeout
            .min(self.limits.keep_alive_timeout)
            .min(self.limits.write_timeout)
            / 4)
        .clamp(Duration::from_millis(5), Duration::from_secs(1));
        let mut closing = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                _ = tokio::time::sleep(tick) => {
                    if let Some(why) = self.expired() {
                        tracing::debug!("closing a connection: {why}");
                        return;
                    }
                }
                _ = self.close.changed(), if !closing => {
                    closing = true;
                    if matches!(self.activity.phase(), Phase::Busy) {
                        // Shutting down: the generator already ended this request.
                        conn.as_mut().graceful_shutdown();
                    } else {
                        return;
                    }
                }
            }
        }
    }

    /// Why the watchdog closes the connection now, if it does.
    fn expired(&self) -> Option<&'static str> {
        if self
            .activity
            .write_blocked_since()
            .is_some_and(|t| t.elapsed() > self.limits.write_timeout)
        {
            return Some("the client read nothing within the write timeout");
        }
        match self.activity.phase() {
            Phase::Idle(t) if t.elapsed() > self.limits.keep_alive_timeout => {
                Some("idle past the keep-alive timeout")
            }
            Phase::Head(t) if t.elapsed() > self.limits.header_timeout => {
                Some("request head not received within the header timeout")
            }
            Phase::Idle(_) | Phase::Head(_) | Phase::Busy => None,
        }
    }
}
