//! Running a server from a plain thread (the CLI): a tokio runtime, the
//! listener, and shutdown on SIGINT or SIGTERM.

use crate::state::AppState;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Binds `host:port`, calls `on_listening` with the bound address, serves
/// until SIGINT/SIGTERM, then drains (see [`crate::serve`]) and returns.
pub fn serve_until_signal(
    host: &str,
    port: u16,
    state: Arc<AppState>,
    grace: Duration,
    on_listening: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((host, port)).await?;
        on_listening(listener.local_addr()?);
        crate::serve(listener, state, signal(), grace).await
    })
}

/// Resolves on the first SIGINT or SIGTERM.
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT"),
            _ = term.recv() => tracing::info!("SIGTERM"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
