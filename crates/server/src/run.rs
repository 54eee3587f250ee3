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
        // The handlers are installed before anyone is told the address: a
        // SIGTERM right after "listening on" shuts down cleanly instead of
        // killing the process (it did, when they were installed on the
        // shutdown future's first poll).
        let shutdown = signal();
        let listener = tokio::net::TcpListener::bind((host, port)).await?;
        on_listening(listener.local_addr()?);
        crate::serve(listener, state, shutdown, grace).await
    })
}

/// Installs the SIGINT and SIGTERM handlers now (inside a runtime) and
/// returns a future that resolves on the first of them.
fn signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            let (Ok(mut int), Ok(mut term)) = handlers else {
                let _ = tokio::signal::ctrl_c().await;
                return;
            };
            tokio::select! {
                _ = int.recv() => tracing::info!("SIGINT"),
                _ = term.recv() => tracing::info!("SIGTERM"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
