//! A client that stops reading a streamed response does not hold its
//! connection or the engine forever: once the server's writes have been
//! blocked for the write timeout, the connection is closed and the request
//! cancelled in the generator (its slot freed), while other clients are
//! served throughout.

mod common;

use common::*;
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::net::ConnLimits;
use headroom_server::{Generator, ServerConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const WRITE_TIMEOUT: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_and_its_request_cancelled() {
    let g = Arc::new(FakeGenerator::new(FakeConfig {
        max_context: 1 << 22,
        token_delay: Duration::ZERO,
        ..FakeConfig::default()
    }));
    let cfg = ServerConfig {
        limits: ConnLimits {
            write_timeout: WRITE_TIMEOUT,
            ..ConnLimits::default()
        },
        ..ServerConfig::new("fake", 512)
    };
    let s = start(g.clone(), cfg, Duration::from_secs(5)).await;

    // A small receive buffer so that the server's writes block soon.
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(s.addr).await.unwrap();
    let body = json!({"prompt": "slow", "max_tokens": 1 << 21, "stream": true}).to_string();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 512];
    let n = c.read(&mut first).await.unwrap();
    assert!(
        String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first[..n])
    );
    assert_eq!(g.stats().running, 1);

    // The client reads nothing more. Others are still served.
    let t0 = Instant::now();
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    while g.stats().running > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the stalled request still runs after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = g.stats();
    assert_eq!(stats.cancelled, 1, "{stats:?}");
    assert!(
        stats.generated_tokens < 1 << 21,
        "cancelled before its end: {stats:?}"
    );
    eprintln!("the stalled request was cancelled after {:?}", t0.elapsed());

    // The server closed the connection: reading what was buffered ends.
    let mut rest = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await;
    assert!(end.is_ok(), "the connection is still open");
}
