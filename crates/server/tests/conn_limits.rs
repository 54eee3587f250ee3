//! Connection limits over the fake generator: a slowloris head is dropped
//! within the header timeout while normal requests complete, idle sockets
//! neither stop a request nor stay open past the keep-alive timeout, the
//! connection cap answers 503 at once, a declared body over the limit is a
//! 413 before the body is sent, a slow body is a 408, and at shutdown a
//! kept-alive connection is answered 503.

mod common;

use common::*;
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::net::ConnLimits;
use headroom_server::ServerConfig;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn cfg(limits: ConnLimits) -> ServerConfig {
    ServerConfig {
        limits,
        ..ServerConfig::new("fake", 512)
    }
}

fn short() -> ConnLimits {
    ConnLimits {
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        keep_alive_timeout: Duration::from_millis(800),
        max_connections: 1024,
        ..ConnLimits::default()
    }
}

async fn fake(limits: ConnLimits) -> Running {
    start(
        Arc::new(FakeGenerator::new(FakeConfig::default())),
        cfg(limits),
        Duration::from_secs(5),
    )
    .await
}

async fn normal(addr: SocketAddr) -> u16 {
    post_json(
        addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 3}),
    )
    .await
    .map(|r| r.status)
    .unwrap_or(0)
}

/// Reads until the server closes `s`; the bytes read, or `None` past `limit`.
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let r = tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    r.ok().map(|_| out)
}

#[tokio::test]
async fn a_slowloris_head_is_dropped_within_the_header_timeout_while_others_are_served() {
    let s = fake(short()).await;
    let addr = s.addr;
    let slow = tokio::spawn(async move {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        let t0 = Instant::now();
        for b in head.iter() {
            if c.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let closed = read_to_close(&mut c, Duration::from_secs(5)).await;
        (t0.elapsed(), closed)
    });
    let normals: Vec<_> = (0..32).map(|_| tokio::spawn(normal(addr))).collect();
    for n in normals {
        assert_eq!(n.await.unwrap(), 200);
    }
    let (took, closed) = slow.await.unwrap();
    let closed = closed.expect("the slow connection was closed");
    assert!(closed.is_empty(), "no answer to a half head: {closed:?}");
    // 500 ms header timeout, watchdog ticks of 125 ms, one byte per 100 ms.
    assert!(took < Duration::from_millis(1200), "took {took:?}");
}

#[tokio::test]
async fn idle_sockets_do_not_stop_a_request_and_close_after_the_keep_alive_timeout() {
    let s = fake(short()).await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(s.addr).await.unwrap());
    }
    let t0 = Instant::now();
    assert_eq!(normal(s.addr).await, 200);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    for c in idle.iter_mut() {
        let closed = read_to_close(c, Duration::from_secs(3)).await;
        assert_eq!(closed.as_deref(), Some(&[][..]), "closed without an answer");
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn connections_beyond_the_cap_are_answered_503_at_once() {
    let s = fake(ConnLimits {
        max_connections: 8,
        ..short()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(s.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "hi"}))
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(r.status, 503, "{}", r.text());
    let v = r.json().unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many open connections (the limit is 8)"),
        "{v}"
    );
    // The held ones go idle past the keep-alive timeout and free their slots.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(normal(s.addr).await, 200);
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_413_before_it_is_sent() {
    let s = fake(short()).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        64u64 << 20
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let answer = read_to_close(&mut c, Duration::from_secs(2))
        .await
        .expect("answered and closed without the body");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.contains("larger than the limit of 4194304 bytes"),
        "{text}"
    );
}

#[tokio::test]
async fn a_body_slower_than_the_body_timeout_is_408() {
    let s = fake(short()).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pr")
        .await
        .unwrap();
    let t0 = Instant::now();
    let answer = read_to_close(&mut c, Duration::from_secs(3))
        .await
        .expect("answered and closed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body timeout of 0.5 s"), "{text}");
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
}
